#!/usr/bin/env python3
"""The ops a PyTorch porter reaches for, tessel against PyTorch on the GPU, bit for bit.

    python3 tests/gpu/torch_ops.py --tessel target/release/tessel [--out DIR] [--profile P]

Each case is one step of tests/gpu/torch_ops.tsl and the torch expression it stands for.
The inputs are seeded random values with the awkward ones mixed in (±0, ±inf, NaN, halfway
points like 2.5 and -0.5, huge and tiny magnitudes, integer edges); tessel runs the step on
them (`tessel run --inputs`), torch computes the expression on the same tensors on the GPU,
and every output is compared element by element: equal bits (NaN equal to NaN, -0 told from
+0), else the largest distance in ulps of the output dtype and how many differ.

A case passes when every element is equal, or, for the cases marked `ulps=N`, within N
ulps (the libm-free functions: tessel's erf/tanh are within 1 ulp of the correctly rounded
value, CUDA's erff/tanhf within their own documented bounds, so the two may differ by
their sum). The table printed last is the result; --json writes it too.
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TSL = os.path.join(HERE, "torch_ops.tsl")


def specials(dtype):
    """Values every float input carries somewhere."""
    return [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 0.5, -0.5, 1.5, -1.5, 2.5,
            -2.5, 3.0, -3.0, 1e-30, -1e-30, 65504.0, -65504.0, 3e38, -3e38, 1e-45, 7.0, -7.0]


def make_input(torch, gen, dtype, shape, kind):
    """A seeded input: kind "normal" (N(0, 4) with the specials in its first elements),
    "positive" (|N(0, 4)| + 0.25, no specials), "int" (i32 in [-50, 50] with 0, ±1 and the
    i32 edges), "int_nonzero" (±[1, 50], a divisor), "index:N" (i32 in [0, N)), "bool"."""
    n = int(np.prod(shape)) if shape else 1
    if kind == "bool":
        return (torch.rand(n, generator=gen) < 0.5).reshape(shape)
    if kind == "int_nonzero":
        v = torch.randint(1, 51, (n,), generator=gen, dtype=torch.int32)
        sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1, 1).to(torch.int32)
        v = v * sign
        v[: min(n, 3)] = torch.tensor([1, -1, 7], dtype=torch.int32)[: min(n, 3)]
        return v.reshape(shape)
    if kind == "int":
        v = torch.randint(-50, 51, (n,), generator=gen, dtype=torch.int32)
        edge = torch.tensor([0, 1, -1, 7, -7, 2**31 - 1, -2**31], dtype=torch.int32)
        v[: min(n, len(edge))] = edge[: min(n, len(edge))]
        return v.reshape(shape)
    if kind.startswith("index:"):
        hi = int(kind.split(":")[1])
        return torch.randint(0, hi, (n,), generator=gen, dtype=torch.int32).reshape(shape)
    v = torch.randn(n, generator=gen, dtype=torch.float32) * 2.0
    if kind == "positive":
        v = v.abs() + 0.25
    else:
        s = torch.tensor(specials(dtype), dtype=torch.float32)
        v[: min(n, len(s))] = s[: min(n, len(s))]
    return v.reshape(shape).to(dtype)


def ordered(torch, x):
    """Integer keys monotone in the float value (the ulp distance is their difference)."""
    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[x.dtype]
    b = x.contiguous().view(bits).to(torch.int64)
    top = 1 << (8 * x.element_size() - 1)
    return torch.where(b < 0, -(b + top), b)


def compare(torch, a, b):
    """(differ, max_ulp) of tessel's a against torch's b (same dtype and shape)."""
    if a.dtype in (torch.int32, torch.bool, torch.int64):
        differ = int((a != b).sum())
        return differ, (int((a.to(torch.int64) - b.to(torch.int64)).abs().max()) if differ else 0)
    nan = torch.isnan(a) & torch.isnan(b)
    same_bits = ordered(torch, a) == ordered(torch, b)
    ok = same_bits | nan
    differ = int((~ok).sum())
    if not differ:
        return 0, 0
    both = ~torch.isnan(a) & ~torch.isnan(b)
    ulps = (ordered(torch, a) - ordered(torch, b)).abs()
    ulps = torch.where(both, ulps, torch.full_like(ulps, 1 << 40))
    return differ, int(ulps[~ok].max())


def cases(torch):
    """(step, {input: (dtype, shape, kind)}, fn(inputs) -> {output: tensor}, ulps)."""
    F = torch.nn.functional
    bf, f32, i32 = torch.bfloat16, torch.float32, torch.int32
    X = {"x": (bf, [37, 129], "normal")}
    XF = {"x": (f32, [37, 129], "normal")}
    AB = {"a": (f32, [37, 129], "normal"), "b": (f32, [37, 129], "normal")}
    IABNZ = {"a": (i32, [37, 129], "int"), "b": (i32, [37, 129], "int_nonzero")}
    return [
        # A float literal with a bf16 tensor: torch computes in f32 with the literal as f32.
        ("scale_bf16", X, lambda t: {"out": t["x"] * 0.01}, 0),
        ("leaky_relu_bf16", X, lambda t: {"out": F.leaky_relu(t["x"], 0.01)}, 0),
        ("add_literal_bf16", X, lambda t: {"out": t["x"] + 0.1}, 0),
        # f32 division by a number: torch multiplies by its f32 reciprocal; `c / x` is
        # reciprocal(x) * c.
        ("div_literal_f32", XF, lambda t: {"out": t["x"] / 3.0}, 0),
        ("rdiv_literal_f32", XF, lambda t: {"out": 3.0 / t["x"]}, 0),
        ("div_literal_bf16", X, lambda t: {"out": t["x"] / 3.0}, 0),
        # Elementwise, torch's names. tessel's erf is within 1 ulp of the correctly rounded
        # value, CUDA's erff within 2 (CUDA C Programming Guide, "Mathematical Functions").
        ("erf_f32", XF, lambda t: {"out": torch.erf(t["x"])}, 3),
        ("erf_bf16", X, lambda t: {"out": torch.erf(t["x"])}, 1),
        ("gelu_bf16", X, lambda t: {"out": F.gelu(t["x"])}, 1),
        ("gelu_tanh_bf16", X, lambda t: {"out": F.gelu(t["x"], approximate="tanh")}, 1),
        ("gelu_f32", XF, lambda t: {"out": F.gelu(t["x"])}, 4),
        ("relu_bf16", X, lambda t: {"out": F.relu(t["x"])}, 0),
        ("clamp_f32", XF, lambda t: {"out": torch.clamp(t["x"], -1.5, 2.0)}, 0),
        ("maximum_f32", AB, lambda t: {"out": torch.maximum(t["a"], t["b"])}, 0),
        ("minimum_f32", AB, lambda t: {"out": torch.minimum(t["a"], t["b"])}, 0),
        ("floor_f32", XF, lambda t: {"out": torch.floor(t["x"])}, 0),
        ("ceil_f32", XF, lambda t: {"out": torch.ceil(t["x"])}, 0),
        ("round_f32", XF, lambda t: {"out": torch.round(t["x"])}, 0),
        ("trunc_bf16", X, lambda t: {"out": torch.trunc(t["x"])}, 0),
        ("floor_divide_f32", AB, lambda t: {"out": torch.floor_divide(t["a"], t["b"])}, 0),
        ("remainder_f32", AB, lambda t: {"out": torch.remainder(t["a"], t["b"])}, 0),
        ("fmod_f32", AB, lambda t: {"out": torch.fmod(t["a"], t["b"])}, 0),
        ("remainder_bf16", {"a": (bf, [37, 129], "normal"), "b": (bf, [37, 129], "normal")},
         lambda t: {"out": torch.remainder(t["a"], t["b"])}, 0),
        ("floor_divide_i32", IABNZ, lambda t: {"out": torch.floor_divide(t["a"], t["b"])}, 0),
        ("remainder_i32", IABNZ, lambda t: {"out": torch.remainder(t["a"], t["b"])}, 0),
        ("fmod_i32", IABNZ, lambda t: {"out": torch.fmod(t["a"], t["b"])}, 0),
        # Along an axis.
        ("argmax_f32", XF, lambda t: {"out": torch.argmax(t["x"], dim=-1)}, 0),
        ("argmin_bf16", X, lambda t: {"out": torch.argmin(t["x"], dim=-1)}, 0),
        ("topk_f32", XF, lambda t: dict(zip(("out0", "out1"), torch.topk(t["x"], 5, dim=-1))), 0),
        ("logsumexp_f32", XF, lambda t: {"out": torch.logsumexp(t["x"], dim=-1)}, 4),
        ("logsumexp_bf16", X, lambda t: {"out": torch.logsumexp(t["x"], dim=-1)}, 1),
        ("cumsum_f32", {"x": (f32, [37, 129], "positive")}, lambda t: {"out": torch.cumsum(t["x"], dim=-1)}, 8),
        ("cumsum_bf16", {"x": (bf, [37, 129], "positive")}, lambda t: {"out": torch.cumsum(t["x"], dim=-1)}, 1),
        # Indexing by a tensor.
        ("embedding", {"emb": (bf, [50, 33], "normal"), "ids": (i32, [7, 5], "index:50")},
         lambda t: {"out": F.embedding(t["ids"].long(), t["emb"])}, 0),
        ("take_along_axis_f32", {"logits": (f32, [37, 129], "normal"), "t": (i32, [37], "index:129")},
         lambda t: {"out": torch.take_along_dim(t["logits"], t["t"].long()[:, None], dim=-1)}, 0),
        ("gather_f32", {"x": (f32, [37, 129], "normal"), "idx": (i32, [37, 4], "index:129")},
         lambda t: {"out": torch.gather(t["x"], 1, t["idx"].long())}, 0),
        # Batched activations against a 2-D weight (one GEMM over B·T rows).
        ("linear_batched", {"x": (bf, [3, 5, 64], "positive"), "w": (bf, [96, 64], "positive")},
         lambda t: {"out": t["x"] @ t["w"].T}, 4),
    ]


def run(args):
    import torch
    from safetensors.torch import load_file, save_file

    dev = torch.device(args.device)
    os.makedirs(args.out, exist_ok=True)
    rows, failed = [], []
    for i, (step, spec, fn, ulps) in enumerate(cases(torch)):
        if args.only and step not in args.only:
            continue
        gen = torch.Generator().manual_seed(1000 + i)
        inputs = {n: make_input(torch, gen, dt, shape, kind) for n, (dt, shape, kind) in spec.items()}
        inp = os.path.join(args.out, f"{step}.in.safetensors")
        outp = os.path.join(args.out, f"{step}.out.safetensors")
        save_file({n: v.contiguous() for n, v in inputs.items()}, inp)
        cmd = [args.tessel, "run", TSL, "--step", step, "--inputs", inp, "--profile", args.profile, "-o", outp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            failed.append(step)
            rows.append({"step": step, "error": (r.stdout + r.stderr)[-2000:]})
            print(f"{step:<24} tessel failed:\n{r.stdout}{r.stderr}")
            continue
        got = load_file(outp)
        with torch.no_grad():
            want = fn({n: v.to(dev) for n, v in inputs.items()})
        for o, w in want.items():
            g = got.get(o)
            if g is None:
                failed.append(step)
                rows.append({"step": step, "output": o, "error": f"tessel wrote no `{o}` ({sorted(got)})"})
                print(f"{step:<24} {o}: tessel wrote no such output ({sorted(got)})")
                continue
            w = w.to("cpu")
            if w.dtype == torch.int64:
                w = w.to(torch.int32)
            if g.dtype != w.dtype or list(g.shape) != list(w.shape):
                failed.append(step)
                msg = f"tessel {g.dtype}{list(g.shape)}, torch {w.dtype}{list(w.shape)}"
                rows.append({"step": step, "output": o, "error": msg})
                print(f"{step:<24} {o}: {msg}")
                continue
            differ, max_ulp = compare(torch, g, w)
            ok = differ == 0 or max_ulp <= ulps
            if not ok:
                failed.append(step)
            rows.append({"step": step, "output": o, "n": g.numel(), "differ": differ, "max_ulp": max_ulp,
                         "allowed_ulps": ulps, "pass": ok})
            print(f"{step:<24} {o:<8} {str(list(g.shape)):<14} differ {differ:>6} of {g.numel():<7} "
                  f"max {max_ulp} ulp (allowed {ulps})  {'PASS' if ok else 'FAIL'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"profile": args.profile, "torch": torch.__version__, "rows": rows}, f, indent=1)
    if failed:
        print(f"FAILED: {' '.join(sorted(set(failed)))}")
        return 1
    print("torch_ops: every case passed")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessel", default="target/release/tessel")
    ap.add_argument("--out", default="out/torch_ops")
    ap.add_argument("--profile", default="exact")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--json")
    ap.add_argument("--only", nargs="*", help="run only these steps")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
