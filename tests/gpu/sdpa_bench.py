"""Times torch.nn.functional.scaled_dot_product_attention at the shapes of
tests/programs/attention_bench.tsl, for `tessel bench` to be read beside it
(scripts/gpu-attention.sh runs both in one device call).

Shapes (Qwen3-14B: 40 query heads, 8 key/value heads, head dim 128, bf16):
  prefill: q [1, 40, T, 128], k and v [1, 8, T, 128], causal (is_causal=True), T = 2048,
           4096 and 16384 (forward only: the backward stops at 4096);
  decode:  q [8, 40, 1, 128], k and v [8, 8, 4096, 128], every key visible.
GQA through `enable_gqa=True` (torch >= 2.5), so K and V are not repeated in memory.
Each backend torch offers (flash, memory-efficient, cuDNN, math) is timed where it accepts
the call. Time: CUDA events around one call, 10 warm-up calls, median of 50; inputs
are not rotated (K and V of the decode case, 134 MB, exceed the 50 MB L2 anyway).

With --backward, the prefill cases' backward instead: the forward run once (inputs with
requires_grad), then `torch.autograd.grad(out, (q, k, v), dy)` timed alone (dq, dk, dv:
what the `prefill_grads` step of tests/programs/attention_bench.tsl computes), at 2.5 times
the forward's FLOPs (FlashAttention-2's count: 5 matmuls against 2).

Usage: python3 tests/gpu/sdpa_bench.py OUT.json [--backward]
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_us(fn, warmup=10, rounds=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def backward_call(q, k, v, causal):
    """The backward alone: a forward with requires_grad, then a closure that runs its
    backward (the graph kept, so it can run again)."""
    q, k, v = (x.detach().requires_grad_(True) for x in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    dy = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), dy, retain_graph=True)


def case(name, q, k, v, causal, flops, backward=False):
    out = {"case": name, "shape_q": list(q.shape), "shape_kv": list(k.shape), "results": {}}
    backends = {
        "default": None,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }
    for label, be in backends.items():
        call = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        try:
            if be is None:
                us = median_us(backward_call(q, k, v, causal) if backward else call)
            else:
                with sdpa_kernel(be):
                    us = median_us(backward_call(q, k, v, causal) if backward else call)
        except RuntimeError as e:
            out["results"][label] = {"error": str(e).splitlines()[0][:200]}
            print(f"  {name:28s} {label:10s} not available: {str(e).splitlines()[0][:100]}")
            continue
        tf = flops / us / 1e6
        out["results"][label] = {"us": us, "tflops": tf}
        print(f"  {name:28s} {label:10s} {us:10.2f} us  {tf:7.1f} TFLOP/s")
    return out


def main():
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    backward = "--backward" in sys.argv[2:]
    res = []
    for t in (2048, 4096) if backward else (2048, 4096, 16384):
        q = torch.randn(1, 40, t, 128, device=dev, dtype=dt)
        k = torch.randn(1, 8, t, 128, device=dev, dtype=dt)
        v = torch.randn(1, 8, t, 128, device=dev, dtype=dt)
        # Causal: half of the T x T scores, 2 matmuls of 2 FLOP per multiply-add.
        flops = 4 * 40 * 128 * t * (t + 1) / 2
        if backward:
            res.append(case(f"prefill T={t} causal, backward", q, k, v, True, 2.5 * flops, True))
        else:
            res.append(case(f"prefill T={t} causal", q, k, v, True, flops))
    if backward:
        with open(sys.argv[1], "w") as f:
            json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "cases": res}, f, indent=1)
        return
    q = torch.randn(8, 40, 1, 128, device=dev, dtype=dt)
    k = torch.randn(8, 8, 4096, 128, device=dev, dtype=dt)
    v = torch.randn(8, 8, 4096, 128, device=dev, dtype=dt)
    res.append(case("decode B=8 over 4096", q, k, v, False, 4 * 8 * 40 * 128 * 4096))
    with open(sys.argv[1], "w") as f:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(), "cases": res}, f, indent=1)


if __name__ == "__main__":
    main()
