"""Where a Python call of a small step spends its host time (issue 20's per-call overhead).

The step is ``axpy`` (f32[4096], one kernel, no workspace), as in python_package.py. Every
number is host time per call over many back-to-back calls (best of 5 rounds of N calls,
then one synchronize), so the GPU never limits it:

- the whole call: ``step(x, y)`` and ``step(x, y, out=o)`` (the fast path of
  ``tessel._step._FastPath`` when the package has it) and ``step(x=x, y=y)`` (the general
  path: binding by name, the checks argument by argument);
- its parts: the extension's ``launch`` alone on fixed addresses, ``torch.empty`` of the
  result, the current stream read two ways;
- the yardsticks: a Triton launch of the same computation (allocating its output as the
  step does) and ``torch.add``.

With ``--check`` (the new package only) it also checks that the fast path gives the general
path's bits, and that a call the fast path declines (an aliasing ``inout``, a wrong dtype)
still raises the general path's ArgumentError naming the argument.

Writes ``OUT/python_overhead_LABEL.json``.
Usage (device): python3 tests/gpu/python_overhead.py OUTDIR LABEL [--check]
"""
import sys
import tempfile

import torch

import tessel
from python_checks import Report, same_bits
from python_timing import per_call_us, triton_axpy

OUT, LABEL = sys.argv[1], sys.argv[2]
CHECK = "--check" in sys.argv
R = Report(OUT, f"python_overhead_{LABEL}")
tmp = tempfile.mkdtemp()
with open(f"{tmp}/axpy.tsl", "w") as f:
    f.write("step axpy(x: f32[T], y: f32[T]) -> f32[T] { x * 2.0 + y }\n")
# An `inout` cache (tests/programs/kv_cache.tsl's `append_f32`) for the aliasing checks.
with open(f"{tmp}/cache.tsl", "w") as f:
    f.write("step append_f32(x: f32[B, R, D], pos: i32[B], cache: inout f32[B, S, D]) -> f32[B, D] {\n"
            "    let c = update(cache, x * 0.5 + 1.0, at: pos, axis: 1);\n    max(c, axis: 1)\n}\n")
axpy = tessel.compile(f"{tmp}/axpy.tsl", "axpy", dims={"T": 4096}, profile="fast")
x = torch.randn(4096, device="cuda")
y = torch.randn(4096, device="cuda")
R.verdict("axpy equals torch", torch.equal(axpy(x, y), x * 2.0 + y), f"package {tessel.__file__}")


o = torch.empty_like(x)
dev = x.device
stream = torch.cuda.current_stream().cuda_stream
ptrs = [x.data_ptr(), y.data_ptr()]
optr = [o.data_ptr()]
launch = axpy._c.launch
times = {
    "tessel step(x, y)": per_call_us(lambda: axpy(x, y)),
    "tessel step(x=x, y=y) (general path)": per_call_us(lambda: axpy(x=x, y=y)),
    "tessel step(x, y, out=o)": per_call_us(lambda: axpy(x, y, out=o)),
    "part: extension launch(), fixed addresses": per_call_us(lambda: launch(0, stream, ptrs, optr, 0)),
    "part: torch.empty(4096, f32, cuda)": per_call_us(
        lambda: torch.empty((4096,), dtype=torch.float32, device=dev)),
    "part: torch.cuda.current_stream(dev).cuda_stream": per_call_us(
        lambda: torch.cuda.current_stream(dev).cuda_stream),
    "part: torch._C._cuda_getCurrentRawStream(0)": per_call_us(
        lambda: torch._C._cuda_getCurrentRawStream(0)),
    "triton launch (allocates its output)": per_call_us(lambda: triton_axpy(x, y)),
    "torch.add(y, x, alpha=2)": per_call_us(lambda: torch.add(y, x, alpha=2.0)),
}
R.data["timings"]["overhead_us_per_call"] = times
for k, v in times.items():
    print(f"overhead [{LABEL}] {k:<50} {v:7.2f} us/call")
ratio = times["tessel step(x, y)"] / times["triton launch (allocates its output)"]
R.data["timings"]["tessel_over_triton"] = ratio
print(f"[{LABEL}] tessel / triton per call: {ratio:.2f} (target <= 1.5)")

if CHECK:
    # The fast path against the general path, bit for bit, on other inputs.
    x2, y2 = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    R.verdict("fast path bits equal the general path's",
              same_bits(axpy(x2, y2), axpy(x=x2, y=y2)), "")
    app = tessel.compile(f"{tmp}/cache.tsl", dims={"B": 2, "R": 3, "S": 3, "D": 8}, profile="fast")
    xs = torch.randn(2, 3, 8, device="cuda")
    pos = torch.zeros(2, dtype=torch.int32, device="cuda")
    c = torch.zeros(2, 3, 8, device="cuda")
    m, cache = app(xs, pos, c)  # the result, then the inout cache returned as itself
    R.verdict("fast path updates an inout in place",
              torch.equal(c, xs * 0.5 + 1.0) and torch.equal(m, c.amax(dim=1))
              and cache.data_ptr() == c.data_ptr(), "")

    def error_of(f):
        try:
            f()
        except tessel.ArgumentError as e:
            return str(e)
        return "no error"

    e = error_of(lambda: app(c, pos, c))
    R.verdict("aliasing inout declined by the fast path, named by the general path",
              "`x` and `cache` share memory" in e, e)
    e = error_of(lambda: axpy(x, y.double()))
    R.verdict("wrong dtype declined by the fast path, named by the general path",
              e.startswith("`y` must be f32"), e)
    o2 = torch.empty_like(x)
    r = axpy(x2, y2, out=o2)
    R.verdict("fast path writes out= and returns it", r is o2 and torch.equal(o2, x2 * 2.0 + y2), "")
    r = axpy.into(o2, y2, x2)
    R.verdict("fast path writes into(out, ...)", r is o2 and torch.equal(o2, y2 * 2.0 + x2), "")
    e = error_of(lambda: axpy(x, y, out=x))
    R.verdict("out= aliasing an input declined by the fast path, named", "share memory" in e, e)
    e = error_of(lambda: axpy(x, y, out=o2.double()))
    R.verdict("out= of a wrong dtype named", "must be f32" in e, e)
    e = error_of(lambda: axpy(x, y[1:]))
    R.verdict("wrong shape named", e.startswith("`y` must have shape"), e)
    e = error_of(lambda: axpy(x, y.cpu()))
    R.verdict("mixed devices named", "same CUDA device" in e, e)

sys.exit(R.finish())
