#!/usr/bin/env python3
"""Self-test of hf_compare.py's plumbing and explanation rules, without a GPU or tessel.

Builds fake example directories (T=8) whose "tessel outputs" are an independent emulation
(float64 math, correctly rounded to bf16, bf16 ops emulated in f32), made to disagree with
Hugging Face exactly where the rules allow it (near-boundary cases are rounded to the other
neighbour; one inv_freq entry is 1 f32 ulp off) plus a few injected errors that no rule
may explain.  Then runs hf_compare.py on them and checks that it finds exactly the injected
errors as unexplained and explains everything else.

    python3 tests/gpu/hf_compare_selftest.py [--device cpu] [--keep DIR]

Needs torch, transformers and safetensors (a GPU is not needed).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_compare as H  # noqa: E402

BF16, F32, F64 = torch.bfloat16, torch.float32, torch.float64
T = 8
NEAR = 2.0  # emulate "the other neighbour" within this many f32 ulps of a boundary
FAR = 100.0  # inject errors only where the exact value is at least this far from one


def rand_bf16(g, *shape):
    # like tessel's Tensor::random: (sum of 4 uniforms - 2) * sqrt(3)
    u = torch.rand(*shape, 4, generator=g, dtype=F64).sum(-1)
    return ((u - 2.0) * 3 ** 0.5).to(F32).to(BF16)


def flip_to_other(exact64, hf_val, near):
    """bf16: RN(exact) where not near; where near, the neighbour that is not HF's."""
    lo, hi, _, _ = H.bracket(exact64)
    lo_b, hi_b = lo.to(F32).to(BF16), hi.to(F32).to(BF16)
    other = torch.where(H.same_bits(hf_val, lo_b), hi_b, lo_b)
    return torch.where(near, other, H.rn_bf16_f64(exact64))


def bump(t, flat_idx):
    """+1 in the bf16 encoding at flat_idx (an error no rule explains)."""
    b = H.bits16(t).clone().reshape(-1)
    b[flat_idx] += 1
    return b.view(BF16).reshape(t.shape)


def far_indices(dist, n, g):
    idx = (dist.reshape(-1) > FAR).nonzero().flatten()
    return idx[torch.randperm(idx.numel(), generator=g)[:n]].tolist()


def rms_emulate(x, w, g, n_inject):
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    y = x2.to(F64) / torch.sqrt((x2.to(F64) ** 2).mean(-1, keepdim=True) + float(torch.tensor(1e-6, dtype=F32)))
    xf = x2.to(F32)
    n_hf = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(BF16)
    _, _, _, dist = H.bracket(y)
    n_t = flip_to_other(y, n_hf, dist <= NEAR)
    out = H.bmul(w, n_t).reshape(x.shape)
    inj = far_indices(dist, n_inject, g)
    for i in inj:
        out = bump(out, i)
    return out, inj, int((dist <= NEAR).sum())


def make_rms(root, g):
    d = os.path.join(root, "rms_norm")
    os.makedirs(d, exist_ok=True)
    x, w = rand_bf16(g, T, 5120), rand_bf16(g, 5120)
    out, inj, near = rms_emulate(x, w, g, 2)
    save_file({"x": x, "w": w}, os.path.join(d, "hidden_norm.inputs.safetensors"))
    save_file({"out": out, "t7": torch.zeros(T, 1, dtype=F32)}, os.path.join(d, "hidden_norm.outputs.safetensors"))
    q, k, wq, wk = rand_bf16(g, T, 40, 128), rand_bf16(g, T, 8, 128), rand_bf16(g, 128), rand_bf16(g, 128)
    oq, iq, nq = rms_emulate(q, wq, g, 1)
    ok, ik, nk = rms_emulate(k, wk, g, 1)
    save_file({"q": q, "k": k, "wq": wq, "wk": wk}, os.path.join(d, "qk_norm.inputs.safetensors"))
    save_file({"out0": oq, "out1": ok}, os.path.join(d, "qk_norm.outputs.safetensors"))
    return {("hidden_norm", 0): 2, ("qk_norm", 0): 1, ("qk_norm", 1): 1}, {"rms_near": near + nq + nk}


def make_swiglu(root, g):
    d = os.path.join(root, "swiglu")
    os.makedirs(d, exist_ok=True)
    gate, up = rand_bf16(g, T, 17408) * 2, rand_bf16(g, T, 17408)
    g64 = gate.to(F64)
    y = g64 / (1 + torch.exp(-g64))
    s_hf = torch.nn.functional.silu(gate)
    _, _, _, dist = H.bracket(y)
    s_t = flip_to_other(y, s_hf, dist <= NEAR)
    out = H.bmul(s_t, up)
    for i in far_indices(dist, 2, g):
        out = bump(out, i)
    save_file({"gate": gate, "up": up}, os.path.join(d, "swiglu.inputs.safetensors"))
    save_file({"out": out}, os.path.join(d, "swiglu.outputs.safetensors"))
    return {("swiglu", 0): 2}, {"silu_near": int((dist <= NEAR).sum())}


def near_positions(inv, n, lo=100000, hi=140000):
    """Positions whose cos/sin tables have an entry within NEAR f32 ulps of a boundary."""
    p = torch.arange(lo, hi, dtype=F32)
    ang = (p[:, None] * inv[None, :]).to(F64)
    dmin = torch.minimum(H.bracket(torch.cos(ang))[3], H.bracket(torch.sin(ang))[3]).min(-1).values
    return p[dmin <= NEAR][:n].to(torch.int32)


def rope_tables(hf, pos, inv_t):
    """tessel-like tables: RN of cos/sin of tessel's f32 angle, the other neighbour where
    near a boundary of HF's angle and inv_freq agrees."""
    cos_hf, sin_hf = hf.cos_sin(pos)
    inv_hf = hf.rotary().inv_freq.cpu()
    posf = pos.to(F32)
    emb_h = torch.cat([posf[:, None] * inv_hf[None, :]] * 2, -1).to(F64)
    emb_t = torch.cat([posf[:, None] * inv_t[None, :]] * 2, -1).to(F64)
    same = torch.cat([inv_hf.view(torch.int32) == inv_t.view(torch.int32)] * 2)[None, :]
    tabs = []
    for f, hv in ((torch.cos, cos_hf), (torch.sin, sin_hf)):
        yh, yt = f(emb_h), f(emb_t)
        near = (H.bracket(yh)[3] <= NEAR) & same
        tabs.append(torch.where(same, flip_to_other(yh, hv, near), H.rn_bf16_f64(yt)))
        tabs.append(H.bracket(yh)[3])
    return cos_hf, sin_hf, tabs[0], tabs[2], tabs[1], tabs[3], same


def rope_emulate(x, c, s):
    c, s = c[:, None, :], s[:, None, :]
    return H.badd(H.bmul(x, c), H.bmul(H.rotate_half(x), s))


def make_rope(root, g, hf, with_temps):
    d = os.path.join(root, "rope")
    os.makedirs(d, exist_ok=True)
    inv_hf = hf.rotary().inv_freq.cpu().clone()
    pos = torch.cat([near_positions(inv_hf, 5), torch.tensor([0, 1, -3], dtype=torch.int32)])
    q, k = rand_bf16(g, T, 40, 128), rand_bf16(g, T, 8, 128)
    inv_t = inv_hf.clone()
    if with_temps:
        inv_t.view(torch.int32)[1] += 1  # a pow one ulp off: rule inv_freq_differs
    cos_hf, sin_hf, ct, st, dc, ds, same = rope_tables(hf, pos, inv_t)
    hq, hk = rope_emulate(q, cos_hf, sin_hf), rope_emulate(k, cos_hf, sin_hf)
    expect = {}
    if with_temps:
        # an unexplained cos entry: far from a boundary, in a column where inv_freq agrees
        cand = ((dc > FAR) & same & (pos[:, None] > 100)).reshape(-1).nonzero().flatten()
        ti = int(cand[len(cand) // 2])
        ct = bump(ct, ti)
        t0, d0 = divmod(ti, 128)
        expect[("rope_qk", "cos")] = 1
        expect[("rope_qk", "sin")] = 0
    oq, ok = rope_emulate(q, ct, st), rope_emulate(k, ct, st)
    if with_temps:
        # outputs that differ from HF only because of the bad cos entry
        for j, (o, h) in enumerate(((oq, hq), (ok, hk))):
            expect[("rope_qk", j)] = int(H.mismatch_mask(o[t0, :, d0], h[t0, :, d0]).sum())
        # an output element tessel's own tables do not give (HF formula recompute differs)
        tbl_same = H.same_bits(ct, cos_hf) & H.same_bits(st, sin_hf)
        tt, dd = tbl_same.nonzero()[3].tolist()
        oq = bump(oq, (tt * 40 + 7) * 128 + dd)
        expect[("rope_qk", 0)] += 1
    else:
        expect[("rope_qk", 0)] = 0
        expect[("rope_qk", 1)] = 0
    save_file({"q": q, "k": k, "pos": pos}, os.path.join(d, "rope_qk.inputs.safetensors"))
    outs = {"out0": oq, "out1": ok} if with_temps else {"res_a": oq, "res_b": ok}
    if with_temps:
        emb = (pos.to(F32)[:, None] * inv_t[None, :])
        outs.update({"t3": inv_t, "t5": emb, "t11": ct, "t12": st})
    save_file(outs, os.path.join(d, "rope_qk.outputs.safetensors"))
    return expect, {"table_mismatch_expected": int((~H.same_bits(ct, cos_hf)).sum() + (~H.same_bits(st, sin_hf)).sum())}


def check(report_path, expect):
    rep = json.load(open(report_path))
    ok = True
    for ex in rep["examples"]:
        step = ex["step"]
        for j, o in enumerate(ex["outputs"]):
            want = expect.get((step, j))
            got = o["unexplained"]
            status = "ok" if want == got else "FAIL"
            ok &= want == got
            print(f"  {status}: {step} output {j} ({o['name']}): unexplained {got}, expected {want}; "
                  f"mismatches {o['mismatches']}, explained {o['explained']}")
        for o in ex["tables"]:
            which = "cos" if o["name"].startswith("cos") else "sin"
            want = expect.get((step, which))
            got = o["unexplained"]
            ok &= want == got
            print(f"  {'ok' if want == got else 'FAIL'}: {step} {o['name']}: unexplained {got}, expected {want}; "
                  f"mismatches {o['mismatches']}, explained {o['explained']}")
    return ok, rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--keep", help="build the fake dirs here and keep them")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(1234)
    root = args.keep or tempfile.mkdtemp(prefix="hf_compare_selftest.")
    hf = H.HF(torch.device("cpu"))
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_compare.py")
    all_ok = True

    # 1: every example, tables dumped, injected errors.
    d1 = os.path.join(root, "full")
    expect, info = {}, {}
    for f in (make_rms, make_swiglu):
        e, i = f(d1, g)
        expect.update(e)
        info.update(i)
    e, i = make_rope(d1, g, hf, with_temps=True)
    expect.update(e)
    info.update(i)
    print(f"fake dir {d1}: {info}")
    j1 = os.path.join(root, "full.json")
    r = subprocess.run([sys.executable, script, d1, "--device", args.device, "--json", j1],
                       capture_output=True, text=True)
    open(os.path.join(root, "full.log"), "w").write(r.stdout + r.stderr)
    print(f"hf_compare exit code {r.returncode} (expected 1: errors were injected)")
    if r.returncode != 1:
        print(r.stdout[-5000:], r.stderr[-5000:])
        all_ok = False
    ok, rep = check(j1, expect)
    all_ok &= ok
    expl = {}
    for ex in rep["examples"]:
        for o in ex["outputs"] + ex["tables"]:
            for k, v in o["explained"].items():
                expl[k] = expl.get(k, 0) + v
    print(f"  explained by rule: {expl}")
    for rule in ("rms_boundary", "silu_boundary", "table_boundary", "inv_freq_differs", "rope_table"):
        if not expl.get(rule):
            print(f"  FAIL: rule {rule} explained nothing (the fake data should exercise it)")
            all_ok = False

    # 2: rope without tables in the dump (fallback rule), odd output names, nothing injected.
    d2 = os.path.join(root, "fallback")
    e2, _ = make_rope(d2, g, hf, with_temps=False)
    j2 = os.path.join(root, "fallback.json")
    r = subprocess.run([sys.executable, script, d2, "--device", args.device, "--json", j2],
                       capture_output=True, text=True)
    open(os.path.join(root, "fallback.log"), "w").write(r.stdout + r.stderr)
    print(f"fallback: hf_compare exit code {r.returncode} (expected 0)")
    if r.returncode != 0:
        print(r.stdout[-5000:], r.stderr[-5000:])
        all_ok = False
    ok, rep = check(j2, e2)
    all_ok &= ok
    fb = sum(o["explained"].get("rope_output_boundary", 0) for ex in rep["examples"] for o in ex["outputs"])
    print(f"  explained by rope_output_boundary: {fb}")
    if not fb:
        print("  FAIL: the fallback rule explained nothing")
        all_ok = False
    print(f"\nlogs and reports in {root}")
    print("SELFTEST PASSED" if all_ok else "SELFTEST FAILED")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
