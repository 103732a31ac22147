#!/usr/bin/env python3
"""Ten AdamW steps of a LoRA pair: tessel's examples/lora/adamw.tsl against torch.optim.AdamW.

  adamw_compare.py --tessel BIN [--R 16 --K 4096 --N 4096] [--steps 10] [--profile exact]
                   [--seed 1] --out DIR [--json FILE]

Both optimise A [R, K] (seeded U(-1/sqrt(K), 1/sqrt(K)), PEFT's init bound) and B [N, R]
(zero, PEFT's start) with the same seeded gradients at every step (N(0, 0.01^2), every third
element scaled by 1e-3 and every third by 1e-9 so that eps matters), lr 1e-3, betas (0.9,
0.999), eps 1e-8, weight decay 0.01. torch: torch.optim.AdamW on CUDA with its defaults
(the foreach implementation, capturable=False). tessel: one `tessel run` per step on the GPU,
the state carried from one step's outputs to the next step's inputs, the scalars computed in
double as torch's Python code computes them (torch/optim/adam.py) and rounded to f32.

Reported per step and tensor (A, B and their moments exp_avg, exp_avg_sq): the largest
difference in ulp of f32 (ordered integers), the largest absolute difference, how many
elements differ, and the same against a float64 AdamW from the same gradients.

The bound checked (and why). The two compute the same operations on the same f32 scalars;
torch's kernels contract some multiply-adds into one rounding (nvcc's default: the lerp,
addcmul and addcdiv), tessel rounds each operation. So per step a moment may differ by one
rounding (an ulp of itself, relative to the f32 result, plus what the previous step left),
and the parameter by one rounding of |p| plus the update's relative difference (some 1e-7)
times its size (at most about lr): after t steps
    |p_tessel - p_torch| <= t * (2 ulp(|p|) + 1e-6 * lr),   |m, v diff| <= t * 2 ulp.
A difference past it fails the run (exit 1).
"""

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def scalars(t):
    """The f32 scalars torch's AdamW kernels receive at step t, as examples/lora/adamw.tsl
    takes them: w1, beta2, w2, decay, step_size, bc2_sqrt, eps."""
    b1, b2 = BETAS
    bc1, bc2 = 1 - b1**t, 1 - b2**t
    vals = dict(w1=1 - b1, beta2=b2, w2=1 - b2, decay=1 - LR * WD, step_size=LR / bc1,
                bc2_sqrt=bc2**0.5, eps=EPS)
    return {k: np.array(v, dtype=np.float32) for k, v in vals.items()}


def grads(t, shape, seed):
    g = np.random.default_rng(seed * 1000 + t).normal(0, 0.01, size=shape).astype(np.float32)
    flat = g.reshape(-1)
    flat[1::3] *= np.float32(1e-3)
    flat[2::3] *= np.float32(1e-9)
    return g


def ulps(a, b):
    """Largest distance in f32 ulps (ordered integers) between two f32 arrays."""
    def ordered(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return int(np.max(np.abs(ordered(a) - ordered(b)))) if a.size else 0


def ulp_of(x):
    return float(np.spacing(np.float32(np.max(np.abs(x))))) if x.size else 0.0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tessel", required=True)
    ap.add_argument("--R", type=int, default=16)
    ap.add_argument("--K", type=int, default=4096)
    ap.add_argument("--N", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile", default="exact")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    R, K, N = args.R, args.K, args.N
    rng = np.random.default_rng(args.seed)
    bound_a = 1 / math.sqrt(K)
    a0 = rng.uniform(-bound_a, bound_a, size=(R, K)).astype(np.float32)
    b0 = np.zeros((N, R), dtype=np.float32)

    dev = torch.device("cuda")
    ta = torch.tensor(a0, device=dev, requires_grad=True)
    tb = torch.tensor(b0, device=dev, requires_grad=True)
    opt = torch.optim.AdamW([ta, tb], lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)

    state = {"a": a0, "b": b0, "m_a": np.zeros_like(a0), "v_a": np.zeros_like(a0),
             "m_b": np.zeros_like(b0), "v_b": np.zeros_like(b0)}
    exact = {k: v.astype(np.float64) for k, v in state.items()}
    rows, failures = [], []
    tsl = os.path.join(ROOT, "examples/lora/adamw.tsl")
    for t in range(1, args.steps + 1):
        ga, gb = grads(t, (R, K), args.seed), grads(t, (N, R), args.seed + 7)
        # torch
        ta.grad = torch.tensor(ga, device=dev)
        tb.grad = torch.tensor(gb, device=dev)
        opt.step()
        torch.cuda.synchronize()
        st = opt.state
        torch_now = {"a": ta, "b": tb, "m_a": st[ta]["exp_avg"], "v_a": st[ta]["exp_avg_sq"],
                     "m_b": st[tb]["exp_avg"], "v_b": st[tb]["exp_avg_sq"]}
        torch_now = {k: v.detach().cpu().numpy() for k, v in torch_now.items()}
        # tessel
        inp = dict(state, g_a=ga, g_b=gb, **scalars(t))
        fin, fout = os.path.join(args.out, f"in{t}.safetensors"), os.path.join(args.out, f"out{t}.safetensors")
        # np.ascontiguousarray would make the 0-d scalars 1-d; np.require keeps them 0-d.
        save_file({k: np.require(v, requirements="C") for k, v in inp.items()}, fin)
        cmd = [args.tessel, "run", tsl, "--step", "adamw", "--profile", args.profile,
               "--dim", f"R={R}", "--dim", f"K={K}", "--dim", f"N={N}", "--inputs", fin, "-o", fout]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out = load_file(fout)
        state = {k: out[k] for k in state}
        # f64 from the same gradients
        b1, b2 = BETAS
        for p, m, v, g in (("a", "m_a", "v_a", ga), ("b", "m_b", "v_b", gb)):
            g = g.astype(np.float64)
            exact[m] = b1 * exact[m] + (1 - b1) * g
            exact[v] = b2 * exact[v] + (1 - b2) * g * g
            exact[p] = exact[p] * (1 - LR * WD) - LR / (1 - b1**t) * exact[m] / (
                np.sqrt(exact[v]) / math.sqrt(1 - b2**t) + EPS)
        for k in state:
            x, y = state[k], torch_now[k]
            d = float(np.max(np.abs(x.astype(np.float64) - y))) if x.size else 0.0
            e = float(np.max(np.abs(x.astype(np.float64) - exact[k])))
            if k in ("a", "b"):
                bound = t * (2 * ulp_of(y) + 1e-6 * LR)
            else:
                bound = t * 2 * ulp_of(y)
            row = dict(step=t, tensor=k, max_ulp=ulps(x, y), max_abs=d,
                       differing=int(np.count_nonzero(x.view(np.int32) != y.view(np.int32))),
                       numel=int(x.size), bound_abs=bound, max_abs_vs_f64=e,
                       max_abs_torch_vs_f64=float(np.max(np.abs(y.astype(np.float64) - exact[k]))))
            rows.append(row)
            if d > bound:
                failures.append(row)
            print(f"step {t:2d} {k:4s}: tessel vs torch max {row['max_ulp']} ulp, max abs {d:.3e} "
                  f"(bound {bound:.3e}), {row['differing']}/{row['numel']} differ; vs f64: tessel "
                  f"{e:.3e}, torch {row['max_abs_torch_vs_f64']:.3e}")
    summary = dict(R=R, K=K, N=N, steps=args.steps, profile=args.profile, lr=LR, betas=BETAS,
                   eps=EPS, weight_decay=WD, torch=torch.__version__,
                   foreach_default=True, rows=rows, failures=len(failures))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(f"{'FAIL' if failures else 'PASS'}: {len(failures)} of {len(rows)} past the bound")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
