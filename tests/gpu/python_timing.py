"""The per-call timing the Python package's GPU scripts share (python_package.py,
python_overhead.py): host time per call of a function over many back-to-back calls, and
the Triton kernel they measure tessel's small step against (axpy, ``x * 2 + y``)."""
import time

import torch
import triton
import triton.language as tl


def per_call_us(f, n=5000):
    """Host µs per call of ``f``: the best of 5 rounds of ``n`` calls, each round ended by
    one synchronize (after 200 warm-up calls), so the GPU never limits it."""
    for _ in range(200):
        f()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / n * 1e6)
    return best


@triton.jit
def _axpy_kernel(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(o_ptr + i, tl.load(x_ptr + i, mask=m) * 2.0 + tl.load(y_ptr + i, mask=m), mask=m)


def triton_axpy(x, y):
    """``x * 2 + y`` by one Triton launch, its output allocated as tessel's step does."""
    o = torch.empty_like(x)
    n = x.numel()
    _axpy_kernel[(triton.cdiv(n, 1024),)](x, y, o, n, BLOCK=1024)
    return o
