#!/usr/bin/env python3
"""PyTorch / PEFT baselines for tessel's LoRA steps (issue 18), on the GPU.

    python3 tests/gpu/bench_lora.py [--cases copy,delta,seed,layer] [--config examples/qwen3_14b/config.json]
        [--T 2048] [--R 16] [--rounds 20] [--warmup 5] [--no-compile] [--json bench_lora.json]

Every row is printed as one JSON line (and all of them, with the environment, go to --json).
What is timed (α = 2 throughout: ALPHA / R = 32 / 16):
  copy   dst.copy_(src), 1 GiB: the device copy bandwidth, the memory floors' rate.
  delta  the LoRA delta of an adapter of rank r on a K -> N linear, forward and backward
         (examples/lora/lora_delta.tsl), composed from torch matmuls, M = 8192, K = N = 4096,
         r = 16; A [r, K], B [N, r], X [M, K], dY [M, N]:
           forward  U = X·Aᵀ, ΔY = (U·Bᵀ)·α
           backward dV = dY·α, dU = dV·B, dB = dVᵀ·U, dX = dU·A, dA = dUᵀ·X
         variants:
           f32          every tensor f32, the formulas as written (dY·α and ΔY·α are M×N
                        elementwise passes), torch.backends.cuda.matmul.allow_tf32 = False
           f32 folded   the same with α applied on the rank-r side (ΔY = (U·α)·Bᵀ, dU = (dY·B)·α,
                        dB = (dYᵀ·U)·α): no M×N elementwise pass; f32, TF32 off
           tf32, tf32 folded   the two above with allow_tf32 = True
           bf16 seed    the seed contract (lora_delta.tsl `by_hand`): X, A, B bf16, dY f32;
                        U = bf16(X·Aᵀ), ΔY = f32(U·Bᵀ)·α (torch.mm(..., out_dtype=float32)
                        where torch has it, else U.float() @ B.float()ᵀ; the row says which),
                        dV = bf16(dY·α), dU = bf16(dV·B), dB = bf16(dVᵀ·U), dX = bf16(dU·A),
                        dA = bf16(dUᵀ·X)
         each as fwd, bwd and fwd+bwd, plain and torch.compile (--no-compile skips it); the
         memory floor is the bytes every implementation must move (fwd: X read, ΔY written;
         bwd: dY and X read, dX written; the adapters and U are negligible) at the copy rate.
  seed   the seed report's shapes (shared/seeds/001): M = 1, 8, 64, 256; K = 4096, N = 2048,
         r = 8; variants f32 (TF32 off, the seed's "native fp32" baseline) and bf16 seed; fwd,
         bwd, fwd+bwd; each timed "cold" (a 256 MiB L2 flush before every call, outside the
         events) and "hot" (back-to-back calls, no flush: the seed's benchmark loop, where
         small M is launch-bound).
  layer  PEFT's LoRA training step of one decoder layer (--config; Qwen3-14B by default) at
         T = --T tokens: transformers' decoder layer with random bf16 weights of
         make_checkpoint.py's magnitudes, wrapped by peft.get_peft_model exactly as
         tests/gpu/lora_layer.py does (r = --R, lora_alpha 32, the seven projections, f32
         adapters, B ~ N(0, 0.02²)); x [1, T, H] bf16 requiring grad; the step is
         out = layer(x); out.backward(dy) — tessel's `grads` step (out, dx and the 14
         adapter gradients; no base-weight gradient: PEFT freezes them). attn_implementation
         sdpa and eager (the math tessel follows), plain and torch.compile (default mode; the
         backward compiled by AOTAutograd); plus the forward alone under no_grad (sdpa,
         plain) for scale. Mask and RoPE tables are made once outside the timing; gradients
         are reset (set to None) before each call, outside the timing. The row also gives the
         peak memory of one step and an approximate FLOP count (4·T per base weight: the
         forward and dx GEMMs; 6·T per adapter weight; causal attention 2·T²·d·heads forward,
         2.5× that backward).

Method: CUDA events around each call after --warmup calls, the median (and minimum) of
--rounds; cold rows flush L2 before each call (outside the events). Plain PyTorch launches
each kernel from Python, so its times include the gaps the GPU waits for launches.
torch.compile rows: the first calls compile (tens of seconds each), not timed.
Needs torch, and for `layer` transformers 5.x and peft. --device cpu: plumbing only (tiny
sizes are not substituted; use --cases seed there).
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)

os.environ.setdefault("USE_HUB_KERNELS", "0")

import torch  # noqa: E402

BF16, F32 = torch.bfloat16, torch.float32
FLUSH_BYTES = 256 << 20
ALPHA = 32.0


class Timer:
    """Times calls: CUDA events on a GPU (an L2 flush before each call when flush), else
    perf_counter."""

    def __init__(self, device, warmup, rounds):
        self.device, self.warmup, self.rounds = device, warmup, rounds
        self.cuda = device.type == "cuda"
        self.buf = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device) if self.cuda else None

    def __call__(self, fn, reset=None, flush=True):
        """(median µs, min µs) of fn(); reset() runs before each call, untimed."""
        for _ in range(self.warmup):
            if reset:
                reset()
            fn()
        if not self.cuda:
            times = []
            for _ in range(self.rounds):
                if reset:
                    reset()
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e6)
            return statistics.median(times), min(times)
        torch.cuda.synchronize()
        pairs = []
        for _ in range(self.rounds):
            if reset:
                reset()
            if flush:
                self.buf.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            pairs.append((s, e))
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e3 for s, e in pairs]
        return statistics.median(times), min(times)


ROWS = []


def emit(**row):
    """One result row: printed as a JSON line, kept for --json."""
    if row.get("median_us") and row.get("floor_us"):
        row["ratio_to_floor"] = row["median_us"] / row["floor_us"]
    ROWS.append(row)
    print(json.dumps(row), flush=True)


class tf32:
    """with tf32(on): torch.backends.cuda.matmul.allow_tf32 set to `on`, restored after."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = self.on

    def __exit__(self, *exc):
        torch.backends.cuda.matmul.allow_tf32 = self.old


# ----------------------------------------------------------------------------------------
# the LoRA delta


def f32_mm(device):
    """(fn(u, b_t) -> the f32 product of two bf16 matrices with f32 accumulation, its name):
    torch.mm(..., out_dtype=float32) when this torch has it for the device (probed once, so
    that no try/except sits in a compiled function), else the f32 product of the upcast
    operands (the same values: a bf16 x bf16 product is exact in f32)."""
    t = torch.ones(2, 2, device=device, dtype=BF16)
    try:
        if torch.mm(t, t, out_dtype=F32).dtype == F32:
            return (lambda u, b_t: torch.mm(u, b_t, out_dtype=F32)), "mm(out_dtype=float32)"
    except (TypeError, RuntimeError, NotImplementedError):
        pass
    return (lambda u, b_t: u.float() @ b_t.float()), "upcast f32 mm"


def delta_fns(variant, alpha, device):
    """(forward(x, a, b) -> (dy_out, u), backward(x, a, b, u, dy) -> (dx, da, db), note)."""
    note = {}
    if variant in ("f32", "tf32"):
        def fwd(x, a, b):
            u = x @ a.T
            return (u @ b.T) * alpha, u

        def bwd(x, a, b, u, dy):
            dv = dy * alpha
            du = dv @ b
            return du @ a, du.T @ x, dv.T @ u
    elif variant in ("f32 folded", "tf32 folded"):
        def fwd(x, a, b):
            u = x @ a.T
            return (u * alpha) @ b.T, u

        def bwd(x, a, b, u, dy):
            du = (dy @ b) * alpha
            return du @ a, du.T @ x, (dy.T @ u) * alpha
    elif variant == "bf16 seed":
        mm32, note["gemm2"] = f32_mm(device)

        def fwd(x, a, b):
            u = x @ a.T
            return mm32(u, b.T) * alpha, u

        def bwd(x, a, b, u, dy):
            dv = (dy * alpha).to(BF16)
            du = dv @ b
            return du @ a, du.T @ x, dv.T @ u
    else:
        raise ValueError(variant)
    return fwd, bwd, note


def delta_tensors(M, K, N, r, variant, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    io = BF16 if variant == "bf16 seed" else F32
    x = torch.randn(M, K, device=device, generator=g).to(io)
    a = (torch.rand(r, K, device=device, generator=g) * 2 - 1).div_(K ** 0.5).to(io)
    b = (0.02 * torch.randn(N, r, device=device, generator=g)).to(io)
    dy = torch.randn(M, N, device=device, generator=g)  # f32 in every variant (lora_delta.tsl)
    return x, a, b, dy


def delta_bytes(M, K, N, variant, direction):
    """Bytes every implementation must move (adapters and U left out)."""
    sx = 2 if variant == "bf16 seed" else 4
    fwd = M * K * sx + M * N * 4
    bwd = M * N * 4 + M * K * sx + M * K * sx
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[direction]


def delta_flops(M, K, N, r, direction):
    fwd = 2 * M * K * r + 2 * M * N * r
    bwd = 3 * 2 * M * N * r + 2 * 2 * M * K * r
    return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + bwd}[direction]


def bench_delta(timer, group, M, K, N, r, variants, directions, copy_bw, compile_too, temps=(("cold", True),)):
    alpha = ALPHA / 16
    for variant in variants:
        with tf32(variant.startswith("tf32")):
            x, a, b, dy = delta_tensors(M, K, N, r, variant, timer.device)
            fwd, bwd, note = delta_fns(variant, alpha, timer.device)
            _, u = fwd(x, a, b)
            calls = {"fwd": lambda f=fwd: f(x, a, b), "bwd": lambda g=bwd: g(x, a, b, u, dy)}

            def both(f=fwd, g=bwd):
                _, uu = f(x, a, b)
                return g(x, a, b, uu, dy)
            calls["fwd+bwd"] = both
            modes = [("plain", calls)]
            if compile_too:
                cf, cb = torch.compile(fwd), torch.compile(bwd)

                def cboth(f=cf, g=cb):
                    _, uu = f(x, a, b)
                    return g(x, a, b, uu, dy)
                modes.append(("torch.compile", {"fwd": lambda f=cf: f(x, a, b), "bwd": lambda g=cb: g(x, a, b, u, dy),
                                                "fwd+bwd": cboth}))
            for mode, fns in modes:
                for direction in directions:
                    for temp, flush in temps:
                        nbytes = delta_bytes(M, K, N, variant, direction)
                        floor = nbytes / copy_bw * 1e6 if copy_bw else None
                        row = dict(group=group, M=M, K=K, N=N, r=r, variant=variant, mode=mode, direction=direction,
                                   cache=temp, bytes=nbytes, flops=delta_flops(M, K, N, r, direction),
                                   floor_us=floor if flush else None, **note)
                        try:
                            med, mn = timer(fns[direction], flush=flush)
                        except Exception as e:  # noqa: BLE001 -- a compile failure is a result
                            emit(**row, error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
                            continue
                        emit(**row, median_us=med, min_us=mn, achieved_TBps=nbytes / (med * 1e-6) / 1e12)


# ----------------------------------------------------------------------------------------
# the PEFT layer step


def bench_layer(timer, args, device, copy_bw, peak):
    from bench_torch import Layer
    from lora_layer import make_peft

    lay = Layer(args.config, device)
    spec = lay.spec
    n_base = sum(p.numel() for n, p in lay.layer.named_parameters() if n.endswith("proj.weight"))
    model, wrap, modules, scale = make_peft(lay.layer, args.R, ALPHA)
    g = torch.Generator(device=device).manual_seed(0)
    n_lora = 0
    with torch.no_grad():
        for m in modules.values():
            a, b = m.lora_A["default"].weight, m.lora_B["default"].weight
            a.uniform_(-1, 1, generator=g).div_(a.shape[1] ** 0.5)
            b.normal_(0, 0.02, generator=g)
            n_lora += a.numel() + b.numel()
    adapter_dtype = str(next(iter(modules.values())).lora_A["default"].weight.dtype)
    params = [p for p in model.parameters() if p.requires_grad]
    T, H = args.T, spec["hidden"]
    x0 = torch.randn(T, H, device=device, dtype=BF16, generator=g)
    dy = torch.randn(1, T, H, device=device, dtype=BF16, generator=g)
    pos = torch.arange(T, device=device)[None]
    attn_fwd = 2 * T * T * spec["head_dim"] * spec["heads"]
    flops = 4 * T * n_base + 6 * T * n_lora + attn_fwd * 3.5
    floor = flops / peak * 1e6 if peak else None
    state = {}

    def reset():
        for p in params:
            p.grad = None
        state["x"] = x0.clone().requires_grad_(True)

    for impl in ("sdpa", "eager"):
        mask, cos_sin = lay.inputs(x0[None], pos, impl)
        variants = [("plain", wrap)]
        if not args.no_compile:
            torch._dynamo.reset()
            variants.append(("torch.compile", torch.compile(wrap)))
        for mode, fn in variants:
            def train_step(fn=fn, mask=mask, cos_sin=cos_sin):
                out = fn(hidden_states=state["x"][None], attention_mask=mask, position_ids=pos,
                         position_embeddings=cos_sin)
                out.backward(dy)
            row = dict(group="layer", case=f"PEFT LoRA layer step T={T} r={args.R}", attn=impl, mode=mode,
                       step="fwd+bwd (out, dx, 14 adapter grads)", flops_approx=flops, floor_us=floor,
                       base_weights=n_base, adapter_weights=n_lora, adapter_dtype=adapter_dtype)
            try:
                med, mn = timer(train_step, reset)
                if device.type == "cuda":
                    reset()
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats(device)
                    train_step()
                    torch.cuda.synchronize()
                    row["peak_memory_GiB"] = torch.cuda.max_memory_allocated(device) / 2**30
            except Exception as e:  # noqa: BLE001 -- a compile failure is a result
                emit(**row, error=f"{type(e).__name__}: {str(e).splitlines()[0][:120]}")
                continue
            emit(**row, median_us=med, min_us=mn, achieved_TFLOPs=flops / (med * 1e-6) / 1e12)
        if impl == "sdpa":
            def fwd_only(mask=mask, cos_sin=cos_sin):
                with torch.no_grad():
                    return wrap(hidden_states=x0[None], attention_mask=mask, position_ids=pos,
                                position_embeddings=cos_sin)
            med, mn = timer(fwd_only)
            fflops = 2 * T * n_base + 2 * T * n_lora + attn_fwd
            emit(group="layer", case=f"PEFT LoRA layer forward T={T} r={args.R}", attn=impl, mode="plain",
                 step="forward only, no_grad", flops_approx=fflops, median_us=med, min_us=mn,
                 floor_us=fflops / peak * 1e6 if peak else None, achieved_TFLOPs=fflops / (med * 1e-6) / 1e12)


# ----------------------------------------------------------------------------------------


def bench_copy(timer, device):
    n = 1 << 30 if device.type == "cuda" else 1 << 24
    src = torch.empty(n, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    med, mn = timer(lambda: dst.copy_(src))
    bw = 2 * n / (med * 1e-6)
    emit(group="machine", case=f"copy {n >> 20} MiB", median_us=med, min_us=mn, achieved_TBps=bw / 1e12)
    return bw


def bench_gemm(timer, device):
    n = 8192 if device.type == "cuda" else 512
    a = torch.randn(n, n, device=device, dtype=BF16)
    b = torch.randn(n, n, device=device, dtype=BF16)
    med, mn = timer(lambda: a @ b)
    peak = 2 * n ** 3 / (med * 1e-6)
    emit(group="machine", case=f"gemm bf16 {n}^3", median_us=med, min_us=mn, achieved_TFLOPs=peak / 1e12)
    return peak


def environment(device):
    env = {"torch": torch.__version__, "device": str(device),
           "allow_tf32_default": torch.backends.cuda.matmul.allow_tf32,
           "allow_bf16_reduced_precision_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction}
    for mod in ("transformers", "peft"):
        try:
            env[mod] = __import__(mod).__version__
        except ImportError:
            env[mod] = None
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        env.update(gpu=p.name, sms=p.multi_processor_count, cuda=torch.version.cuda)
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="copy,delta,seed,layer")
    ap.add_argument("--config", default=os.path.join(ROOT, "examples", "qwen3_14b", "config.json"))
    ap.add_argument("--T", type=int, default=2048, help="layer: tokens")
    ap.add_argument("--R", type=int, default=16, help="layer: LoRA rank")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json", default="bench_lora.json")
    args = ap.parse_args(argv)
    cases = set(args.cases.split(","))
    unknown = cases - {"copy", "gemm", "delta", "seed", "layer"}
    if unknown:
        ap.error(f"unknown --cases {sorted(unknown)} (copy, gemm, delta, seed, layer)")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device (pass --device cpu to check the plumbing)")
    timer = Timer(device, args.warmup, args.rounds)
    env = environment(device)
    print(json.dumps({"env": env}), flush=True)
    copy_bw = bench_copy(timer, device) if cases & {"copy", "delta", "seed"} else None
    peak = bench_gemm(timer, device) if cases & {"gemm", "layer"} else None
    dirs = ("fwd", "bwd", "fwd+bwd")
    if "delta" in cases:
        bench_delta(timer, "delta", 8192, 4096, 4096, 16, ("f32", "f32 folded", "tf32", "tf32 folded", "bf16 seed"),
                    dirs, copy_bw, not args.no_compile)
    if "seed" in cases:
        for M in (1, 8, 64, 256):
            bench_delta(timer, "seed", M, 4096, 2048, 8, ("f32", "bf16 seed"), dirs, copy_bw, False,
                        temps=(("cold", True), ("hot", False)))
    if "layer" in cases:
        bench_layer(timer, args, device, copy_bw, peak)
    result = {"env": env, "argv": sys.argv[1:], "rounds": args.rounds, "warmup": args.warmup,
              "l2_flush_bytes": FLUSH_BYTES if device.type == "cuda" else 0, "copy_bandwidth_bytes_per_s": copy_bw,
              "gemm_peak_flop_per_s": peak, "rows": ROWS}
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({"wrote": args.json}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
