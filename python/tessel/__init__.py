"""tessel from Python: compile a step of a ``.tsl`` file and call it on tensors.

>>> import tessel, torch
>>> step = tessel.compile("examples/qwen3_14b/rms_norm.tsl", dims={"T": 4096})
>>> y = step(x=torch.randn(4096, 5120, dtype=torch.bfloat16, device="cuda"), w=...)

On CUDA tensors a call is zero-copy: the kernels run on the tensors' memory, on torch's
current stream, and the results are allocated through torch's caching allocator (or passed
as ``out=``). On CPU tensors and numpy arrays the same call runs tessel's CPU executor, the
kernels' own order of operations. Steps are cached on disk (``tessel.cache_dir()``), so a
second process does not compile them again.

Errors are exceptions derived from :class:`TesselError`: :class:`CompileError` (carrying the
rendered source report), :class:`ArgumentError` (naming the argument), :class:`DeviceError`.
"""

from ._tessel import (  # noqa: F401
    ArgumentError,
    CompileError,
    DeviceError,
    TesselError,
    __version__,
)
from ._step import Step, cache_dir, compile, steps  # noqa: F401
from . import autograd, lora, models  # noqa: E402,F401

__all__ = [
    "compile",
    "autograd",
    "lora",
    "models",
    "steps",
    "Step",
    "cache_dir",
    "TesselError",
    "CompileError",
    "ArgumentError",
    "DeviceError",
    "__version__",
]
