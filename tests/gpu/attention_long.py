"""Checks tessel's fused causal attention at a length whose scores pass 2^32 elements
(T = 16384 at 40 query heads: 2^33.3 scores, issue 19), where `tessel check` cannot run (its
CPU references would hold the scores): the GPU's output against an f32 reference computed
here on the GPU, one K/V head at a time, beside torch's SDPA (bf16, its default backend)
against the same reference.

Inputs: q [T, 40, 128], k and v [T, 8, 128] bf16, seeded normal values, written to
INPUTS.safetensors; tessel runs `prefill` of tests/programs/attention_bench.tsl on them
(the caller runs `tessel run ... --inputs INPUTS -o OUTPUT` between the two phases).

Verdict: PASS if tessel's rel-RMS error to the f32 reference is at most 2^-8 (the 16-bit
bound docs/numerics.md states for `fast`) and at most twice SDPA's.

Usage: python3 tests/gpu/attention_long.py make INPUTS.safetensors T
       python3 tests/gpu/attention_long.py judge INPUTS.safetensors OUTPUT.safetensors
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file


def reference(q, k, v):
    """f32 causal GQA attention, [T, 40, 128] from q [T, 40, 128], k and v [T, 8, 128]."""
    t = q.shape[0]
    out = torch.empty(t, 40, 128, dtype=torch.float32, device=q.device)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    for h in range(8):
        qh = q[:, 5 * h : 5 * h + 5].permute(1, 0, 2).float()  # [5, T, 128]
        kh = k[:, h].float()
        vh = v[:, h].float()
        s = (qh @ kh.T) * 128 ** -0.5
        s = s.masked_fill(~mask, float("-inf"))
        out[:, 5 * h : 5 * h + 5] = (torch.softmax(s, dim=-1) @ vh).permute(1, 0, 2)
        del s
    return out


def rel_rms(x, ref):
    return ((x.float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


def main():
    mode = sys.argv[1]
    if mode == "make":
        t = int(sys.argv[3])
        g = torch.Generator().manual_seed(19)
        x = {
            "q": torch.randn(t, 40, 128, generator=g).bfloat16(),
            "k": torch.randn(t, 8, 128, generator=g).bfloat16(),
            "v": torch.randn(t, 8, 128, generator=g).bfloat16(),
        }
        save_file(x, sys.argv[2])
        return
    x = {n: a.cuda() for n, a in load_file(sys.argv[2]).items()}
    out = load_file(sys.argv[3])
    got = next(iter(out.values())).cuda()
    q, k, v = x["q"], x["k"], x["v"]
    ref = reference(q, k, v)
    sdpa = F.scaled_dot_product_attention(
        q.permute(1, 0, 2)[None], k.permute(1, 0, 2)[None], v.permute(1, 0, 2)[None],
        is_causal=True, enable_gqa=True,
    )[0].permute(1, 0, 2)
    e_t, e_s = rel_rms(got, ref), rel_rms(sdpa, ref)
    ok = e_t <= 2.0 ** -8 and e_t <= 2 * e_s and torch.isfinite(got.float()).all().item()
    print(f"attention T={q.shape[0]}: tessel rel-RMS {e_t:.3e}, SDPA {e_s:.3e} to the f32 "
          f"reference: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
