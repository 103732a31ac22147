"""The Python package on the GPU (issue 20), with torch CUDA tensors:

1. bits: each step's results from ``tessel.compile(...)(...)`` on torch CUDA tensors equal
   the command line's ``tessel run`` results on the same inputs, bit for bit, in every
   profile (the same PTX on the same card), an ``inout`` KV cache among them;
2. zero copy: a call allocates only its results and its workspace (counted with
   ``torch.cuda.memory_stats``), nothing when ``out=`` is given and the step needs no
   workspace; an ``inout`` tensor is updated where it lies; the results' addresses are the
   ones tessel wrote;
3. streams: a call under ``torch.cuda.stream(s)`` runs on ``s`` and gives the same bits;
4. argument errors on the GPU path: a CPU tensor beside CUDA ones, a view at an unaligned
   offset, a non-contiguous tensor, a wrong dtype: ``tessel.ArgumentError`` naming it;
5. overhead per call of a small step (axpy, f32[4096]) against a Triton kernel launch and a
   torch op doing the same, host time per call over many back-to-back calls;
6. the Qwen3-14B decode layer (B = 1, S = 4096, fast) called from Python: time per call
   with CUDA events (the CLI's `bench` of the same step is in the same run's log).

Writes ``OUT/python_package.json`` and prints PASS/FAIL per check.

Usage (device): python3 tests/gpu/python_package.py TESSEL_BIN OUTDIR
(with the wheel installed: pip install --no-deps target/wheels/tessel-*.whl)
"""
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

import tessel
from python_checks import Report, same_bits
from python_timing import per_call_us, triton_axpy

BIN, OUT = sys.argv[1], sys.argv[2]
R = Report(OUT, "python_package")
results = R.data
verdict = R.verdict






# -- 1. bits against the command line ---------------------------------------------------------

CASES = [
    ("tests/programs/layer_small.tsl", "qwen3", {"T": 130}, "exact", ["--fill", "pos=iota:0"]),
    ("tests/programs/layer_small.tsl", "qwen3", {"T": 130}, "invariant", ["--fill", "pos=iota:0"]),
    ("tests/programs/layer_small.tsl", "qwen3", {"T": 130}, "fast", ["--fill", "pos=iota:0"]),
    ("tests/programs/layer_small.tsl", "qwen3_decode", {"B": 2, "T": 1, "S": 96}, "fast",
     ["--fill", "len=iota:50"]),
    ("tests/programs/kv_cache.tsl", "append", {"B": 2, "KV": 2, "R": 3, "S": 40, "D": 16}, "exact",
     ["--fill", "pos=iota:5"]),
    ("tests/programs/matmul.tsl", "linear", {"M": 300, "K": 256, "N": 384}, "fast", []),
    ("tests/programs/attention.tsl", "prefill", {"T": 150, "H": 4, "KV": 2, "D": 128}, "fast", []),
]

tmp = tempfile.mkdtemp()
for file, step, dims, profile, extra in CASES:
    name = f"bits {os.path.basename(file)} {step} {profile}"
    ins, outs = f"{tmp}/in.safetensors", f"{tmp}/out.safetensors"
    dim_args = [a for n, v in dims.items() for a in ("--dim", f"{n}={v}")]
    run = subprocess.run(
        [BIN, "run", file, "--step", step, "--profile", profile, "--seed", "7",
         "--save-inputs", ins, "-o", outs, *dim_args, *extra],
        capture_output=True, text=True,
    )
    if run.returncode != 0:
        verdict(name, False, f"CLI failed: {run.stderr[-500:]}")
        continue
    given = load_file(ins, device="cuda")
    want = load_file(outs, device="cuda")
    s = tessel.compile(file, step, dims=dims, profile=profile)
    args = {p.name: given[p.name].clone() for p in s.params}
    got = s(**args)
    torch.cuda.synchronize()
    got = got if isinstance(got, tuple) else (got,)
    bad = [r.name for r, g in zip(s.results, got) if not same_bits(g, want[r.name])]
    for p in s.params:
        if p.inout and not same_bits(args[p.name], want[p.name]):
            bad.append(f"{p.name} (in place)")
    verdict(name, not bad, f"differs: {bad}" if bad else f"{len(s.results)} results, {len(s.kernels)} kernels")

# -- 2. zero copy ------------------------------------------------------------------------------

s = tessel.compile("tests/programs/kv_cache.tsl", "append",
                   dims={"B": 2, "KV": 2, "R": 3, "S": 40, "D": 16}, profile="exact")
k_new = torch.randn(2, 2, 3, 16, device="cuda").bfloat16()
pos = torch.tensor([1, 30], dtype=torch.int32, device="cuda")
cache = torch.zeros(2, 2, 40, 16, device="cuda").bfloat16()
s(k_new, pos, cache)  # warm-up: the module loads
torch.cuda.synchronize()


def allocations(f):
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    r = f()
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["allocation.all.allocated"] - before, r


address = cache.data_ptr()
n, (summed, same_cache) = allocations(lambda: s(k_new, pos, cache))
own = sum(1 for r in s.results if r.memory is None)
want_n = own + (1 if s.workspace_bytes else 0)
verdict("zero copy: a call allocates only its results and workspace", n == want_n,
        f"{n} allocations, {own} results of their own, workspace {s.workspace_bytes} B")
verdict("zero copy: inout updated where it lies",
        same_cache is cache and cache.data_ptr() == address
        and torch.equal(cache[0, :, 1:4].float(), k_new[0].float()), "")
out = torch.empty(2, 2, 16, device="cuda")
n, r = allocations(lambda: s(k_new, pos, cache, out=[out, None]))
verdict("zero copy: out= is written, nothing else allocated but the workspace",
        r[0] is out and n == (1 if s.workspace_bytes else 0), f"{n} allocations")

# -- 3. streams --------------------------------------------------------------------------------

layer = tessel.compile("tests/programs/layer_small.tsl", "qwen3", dims={"T": 130}, profile="fast")
torch.manual_seed(0)
largs = {}
for p in layer.params:
    dt = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}[p.dtype]
    largs[p.name] = (torch.arange(130, dtype=torch.int32, device="cuda").reshape(p.shape)
                     if dt == torch.int32 else (torch.randn(p.shape, device="cuda") * 0.1).to(dt))
base = layer(**largs)
torch.cuda.synchronize()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    # A long matmul queued first on the side stream: were tessel's launches on another
    # stream, they would read before... the same inputs, so the bits show only the stream.
    for _ in range(3):
        torch.mm(torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda"))
    on_side = layer(**largs)
side.synchronize()
base = base if isinstance(base, tuple) else (base,)
on_side = on_side if isinstance(on_side, tuple) else (on_side,)
verdict("stream: a call on a side stream gives the same bits",
        all(same_bits(a, b) for a, b in zip(base, on_side)), "")

# -- 4. argument errors --------------------------------------------------------------------------


def raises(name, f, text):
    try:
        f()
    except tessel.ArgumentError as e:
        verdict(name, text in str(e), str(e)[:160])
        return
    except Exception as e:  # noqa: BLE001
        verdict(name, False, f"{type(e).__name__}: {e}")
        return
    verdict(name, False, "no error")


raises("error: a CPU tensor beside CUDA ones", lambda: s(k_new, pos.cpu(), cache), "`pos`")
flat = torch.zeros(2 * 2 * 3 * 16 + 1, device="cuda").bfloat16()
raises("error: a view at an unaligned offset",
       lambda: s(flat[1:].view(2, 2, 3, 16), pos, cache), "`k_new` starts at address")
raises("error: not contiguous", lambda: s(k_new.transpose(2, 3).contiguous().transpose(2, 3), pos, cache),
       "`k_new` is not contiguous")
raises("error: wrong dtype", lambda: s(k_new.float(), pos, cache), "`k_new` must be bf16")
raises("error: an input aliasing the inout cache",
       lambda: s(cache.view(-1)[: 2 * 2 * 3 * 16].view(2, 2, 3, 16), pos, cache),
       "`k_new` and `k_cache` share memory")

# -- 5. overhead per call ----------------------------------------------------------------------

with open(f"{tmp}/axpy.tsl", "w") as f:
    f.write("step axpy(x: f32[T], y: f32[T]) -> f32[T] { x * 2.0 + y }\n")
axpy = tessel.compile(f"{tmp}/axpy.tsl", dims={"T": 4096}, profile="fast")
x = torch.randn(4096, device="cuda")
y = torch.randn(4096, device="cuda")
verdict("axpy equals torch", torch.equal(axpy(x, y), x * 2.0 + y), "")

o = torch.empty_like(x)
times = {
    "tessel step(x, y)": per_call_us(lambda: axpy(x, y)),
    "tessel step(x, y, out=o)": per_call_us(lambda: axpy(x, y, out=o)),
    "triton launch (allocates its output)": per_call_us(lambda: triton_axpy(x, y)),
    "torch.add(y, x, alpha=2)": per_call_us(lambda: torch.add(y, x, alpha=2.0)),
}
results["timings"]["overhead_us_per_call"] = times
for k, v in times.items():
    print(f"overhead {k:<40} {v:7.2f} us/call")
ratio = times["tessel step(x, y)"] / times["triton launch (allocates its output)"]
results["timings"]["tessel_over_triton"] = ratio
print(f"tessel / triton per call: {ratio:.2f} (target <= 1.5)")

# -- 6. the Qwen3-14B decode layer from Python --------------------------------------------------

dec = tessel.compile("examples/qwen3_14b/layer.tsl", "decode", dims={"T": 1, "B": 1, "S": 4096},
                     profile="fast")
dargs = {}
for p in dec.params:
    dt = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}[p.dtype]
    if dt == torch.int32:
        dargs[p.name] = torch.full(p.shape, 4095, dtype=torch.int32, device="cuda")
    else:
        dargs[p.name] = (torch.randn(p.shape, device="cuda") * 0.02).to(dt)
for _ in range(5):
    dec(**dargs)
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
samples = []
for _ in range(21):
    start.record()
    for _ in range(20):
        dec(**dargs)
    end.record()
    end.synchronize()
    samples.append(start.elapsed_time(end) / 20 * 1000)
samples.sort()
results["timings"]["qwen3_14b_decode_B1_S4096_python_us"] = samples[len(samples) // 2]
print(f"Qwen3-14B decode B=1 S=4096 from Python: {samples[len(samples) // 2]:.1f} us/call "
      f"(median of 21 x 20 calls; min {samples[0]:.1f})")
host = per_call_us(lambda: dec(**dargs), n=200)
results["timings"]["qwen3_14b_decode_python_back_to_back_us"] = host
print(f"  back to back, host-timed: {host:.1f} us/call")

# The same call captured into a torch CUDA graph (tessel launches on torch's current stream,
# so torch.cuda.graph captures it) and replayed: the CLI's bench times its graph the same way.
eager = dec(**dargs)
torch.cuda.synchronize()
graph = torch.cuda.CUDAGraph()
with torch.cuda.graph(graph):
    captured = dec(**dargs)
graph.replay()
torch.cuda.synchronize()
verdict("a call captured in a torch CUDA graph replays to the same bits",
        all(same_bits(a, b) for a, b in zip(eager[:2], captured[:2])), "")
samples = []
for _ in range(21):
    start.record()
    for _ in range(20):
        graph.replay()
    end.record()
    end.synchronize()
    samples.append(start.elapsed_time(end) / 20 * 1000)
samples.sort()
results["timings"]["qwen3_14b_decode_python_cuda_graph_us"] = samples[len(samples) // 2]
print(f"  captured in a torch CUDA graph and replayed: {samples[len(samples) // 2]:.1f} us/call")

# -- 7. tessel.autograd on CUDA tensors against torch's autograd --------------------------------

with open(f"{tmp}/mlp.tsl", "w") as f:
    f.write(
        "fn mlp(x: f32[T, 64], w: f32[48, 64], ids: i32[T], g: f32[48]) -> f32[T, 48] {\n"
        "    let h = x @ w^T;\n"
        "    silu(h) * g + f32(ids)[:, None] * 0.25\n"
        "}\n"
    )
torch.backends.cuda.matmul.allow_tf32 = False
for profile in ("exact", "fast"):
    fn = tessel.autograd.function(f"{tmp}/mlp.tsl", "mlp", dims={"T": 77}, profile=profile)
    torch.manual_seed(1)
    x = torch.randn(77, 64, device="cuda", requires_grad=True)
    w = torch.randn(48, 64, device="cuda", requires_grad=True)
    g = torch.randn(48, device="cuda", requires_grad=True)
    ids = torch.randint(0, 9, (77,), dtype=torch.int32, device="cuda")
    fn(x, w, ids, g).square().sum().backward()
    first = [t.grad.clone() for t in (x, w, g)]
    for t in (x, w, g):
        t.grad = None
    fn(x, w, ids, g).square().sum().backward()
    again = all(torch.equal(a, t.grad) for a, t in zip(first, (x, w, g)))
    xr, wr, gr = (t.detach().clone().requires_grad_() for t in (x, w, g))
    (torch.nn.functional.silu(xr @ wr.T) * gr + ids.float()[:, None] * 0.25).square().sum().backward()
    err = max(((a - t.grad).norm() / t.grad.norm()).item() for a, t in zip(first, (xr, wr, gr)))
    # `fast` runs f32 GEMMs on TF32 tensor cores (docs/numerics.md: each operand rounded to
    # 10 fraction bits, 2^-10 of sum |a*b|); exact is f32 throughout (the f32 contract).
    bound = 2.0**-10 if profile == "fast" else 1e-5
    verdict(f"autograd {profile}: grads vs torch (rel-RMS <= {bound:.1e}) and the same bits twice",
            err <= bound and again, f"worst rel-RMS {err:.2e}, run-to-run identical {again}")

sys.exit(R.finish())
