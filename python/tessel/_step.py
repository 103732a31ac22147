"""``tessel.compile`` and the :class:`Step` it returns: arguments bound by name, checked, and
handed to the compiled step (``tessel._tessel``) as device addresses (CUDA tensors) or bytes
(CPU tensors and numpy arrays)."""

from __future__ import annotations

import hashlib
import operator
import os
import pathlib
import warnings
from typing import Any, Dict, List, Optional, Sequence

from . import _tessel
from ._tessel import ArgumentError

# The language's dtypes, by the names the compiled step reports, as torch's attribute names
# and numpy's dtype names (the same words; "bfloat16" is ml_dtypes' for numpy).
_DTYPES = {
    "bf16": "bfloat16",
    "f16": "float16",
    "f32": "float32",
    "i32": "int32",
    "bool": "bool",
}

# Every buffer a kernel reads or writes is accessed with up to 16-byte vectors and TMA tiles
# (tessel-driver `device::BUFFER_ALIGN`).
_ALIGN = 16

_compiler_id: Optional[str] = None


def _compiler() -> str:
    """The compiler build's identifier: the SHA-256 of the extension module's file, so that
    a rebuilt compiler never reads a step an older build cached."""
    global _compiler_id
    if _compiler_id is None:
        h = hashlib.sha256()
        with open(_tessel.__file__, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _compiler_id = f"tessel {_tessel.__version__} {h.hexdigest()}"
    return _compiler_id


def cache_dir() -> Optional[pathlib.Path]:
    """Where compiled steps are cached: ``$TESSEL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tessel``, else ``~/.cache/tessel``. ``TESSEL_CACHE_DIR=off`` (or
    ``0``, or empty) turns the cache off: ``None``."""
    env = os.environ.get("TESSEL_CACHE_DIR")
    if env is not None:
        if env.strip().lower() in ("", "0", "off", "none"):
            return None
        return pathlib.Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = pathlib.Path(xdg) if xdg else pathlib.Path.home() / ".cache"
    return base / "tessel"


def _torch():
    """torch, when it is installed (it is optional: numpy arrays work without it)."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _numpy():
    import numpy

    return numpy


def _numpy_dtype(name: str):
    np = _numpy()
    if name == "bf16":
        try:
            import ml_dtypes
        except ImportError as e:
            raise ArgumentError(
                "bf16 numpy arrays need the ml_dtypes package (pip install ml_dtypes); "
                "or pass torch tensors"
            ) from e
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(_DTYPES[name])


def steps(path) -> List[str]:
    """The steps of the file ``path``, in order. Raises :class:`CompileError` for a file
    that does not parse."""
    return _tessel.steps(os.fspath(path))


def compile(
    path,
    step: Optional[str] = None,
    *,
    dims: Optional[Dict[str, int]] = None,
    profile: str = "exact",
    target: Optional[str] = None,
    cache: bool = True,
    **options: Any,
) -> "Step":
    """Compiles step ``step`` of the ``.tsl`` file ``path`` (its only step when ``None``).

    - ``dims``: the symbolic dims the step's shapes use, e.g. ``{"T": 4096}``; every dim a
      parameter's shape names must be bound.
    - ``profile``: ``"exact"`` (the default, as the command line's: bit-identical to the CPU
      executor), ``"invariant"`` (a row's result independent of the batch) or ``"fast"``
      (docs/numerics.md).
    - ``target``: a preset (``"h100"``, ``"h200"``) or ``"device:N"``; by default the
      current CUDA device when torch sees one, else GPU 0 when the driver opens it, else
      the H200 preset (a step for the CPU executor).
    - ``cache``: read and write the on-disk cache (:func:`cache_dir`).
    - ``options``: the schedule choices of the command line: ``wgmma_pingpong``,
      ``wgmma_tma``, ``wgmma_attention``, ``merge_launches`` and ``dependent_launch`` (on
      by default), ``wgmma_attention_keys`` (64, the default, or 128).

    Raises :class:`CompileError` with the rendered report when the source or the dims are
    wrong, :class:`ArgumentError` for an unknown profile, target or option.
    """
    if dims is None:
        dims = {}
    checked = {}
    for name, size in dims.items():
        if not isinstance(name, str) or isinstance(size, bool):
            raise ArgumentError(f"dims: expected str -> int, given {name!r}: {size!r}")
        try:
            size = operator.index(size)  # ints, and numpy's integer scalars
        except TypeError:
            raise ArgumentError(f"dims: `{name}` = {size!r}; a dim is an integer") from None
        if size < 1:
            raise ArgumentError(f"dims: `{name}` = {size}; a dim must be at least 1")
        if size >= 2**63:
            raise ArgumentError(f"dims: `{name}` = {size} is too large")
        checked[name] = size
    dims = checked
    if target is None:
        torch = _torch()
        if torch is not None and torch.cuda.is_available():
            target = f"device:{torch.cuda.current_device()}"
    where = cache_dir() if cache else None
    compiled = _tessel.compile(
        os.fspath(path),
        step,
        dims,
        profile,
        target,
        options,
        os.fspath(where) if where is not None else None,
        _compiler(),
    )
    if compiled.cache_warning:
        warnings.warn(f"tessel: {compiled.cache_warning}", RuntimeWarning, stacklevel=2)
    return Step(compiled)


class Param:
    """A step parameter: its name, dtype (``"bf16"``, ``"f16"``, ``"f32"``, ``"i32"``,
    ``"bool"``), shape, and whether the step updates it in place (``inout``)."""

    __slots__ = ("name", "dtype", "shape", "inout")

    def __init__(self, name: str, dtype: str, shape: Sequence[int], inout: bool):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.inout = inout

    def __repr__(self) -> str:
        inout = "inout " if self.inout else ""
        return f"{self.name}: {inout}{self.dtype}{list(self.shape)}"


class Result:
    """A step result: name, dtype, shape, and where its memory comes from: ``None`` (its
    own), ``("param", n)`` (parameter ``n``'s: an ``inout`` parameter, or an input returned
    as it is) or ``("result", n)`` (the same value as result ``n``)."""

    __slots__ = ("name", "dtype", "shape", "memory")

    def __init__(self, name, dtype, shape, memory):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape)
        self.memory = memory

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


def _describe(v) -> str:
    torch = _torch()
    if torch is not None and isinstance(v, torch.Tensor):
        return f"a {str(v.dtype).replace('torch.', '')}{list(v.shape)} tensor on {v.device}"
    np = _numpy()
    if isinstance(v, np.ndarray):
        return f"a {v.dtype}{list(v.shape)} numpy array"
    return f"a {type(v).__name__}"


class Step:
    """A compiled step, called like a function: ``step(x, w=...)`` binds arguments to its
    parameters by position and name, checks each (dtype, shape, device, contiguity,
    alignment: an :class:`ArgumentError` naming the argument when one is wrong) and runs the
    step, returning its result (a tuple of results when it has several).

    - CUDA tensors (all on one device): launched on torch's current stream with no copy;
      results allocated through torch's caching allocator, or written into ``out`` (a
      tensor, or a sequence with one entry per result, ``None`` to allocate that one).
    - CPU tensors or numpy arrays: run on tessel's CPU executor; results of the inputs'
      kind (torch tensors when any input is one).
    - ``inout`` parameters are updated in place, and returned as their result.
    """

    def __init__(self, compiled):
        self._c = compiled
        self.params = [Param(*p) for p in compiled.params]
        self.results = [Result(*r) for r in compiled.results]
        self._index = {p.name: i for i, p in enumerate(self.params)}
        self._has_inout = any(p.inout for p in self.params)
        self._fast = _FastPath(self) if _torch() is not None else None

    # What the compiled step says about itself.
    name = property(lambda self: self._c.name, doc="The step's name in its source.")
    ptx = property(lambda self: self._c.ptx, doc="Its PTX module.")
    program = property(lambda self: self._c.program, doc="Its kernel program, as text.")
    kernels = property(lambda self: self._c.kernels, doc="The kernels it launches, in order.")
    key = property(lambda self: self._c.key, doc="Its cache key (SHA-256).")
    from_cache = property(lambda self: self._c.from_cache, doc="Read from the disk cache.")
    profile = property(lambda self: self._c.profile, doc="The numerics profile.")
    target = property(lambda self: self._c.target, doc="The target's name.")
    workspace_bytes = property(
        lambda self: self._c.workspace_bytes, doc="Device memory its intermediates take."
    )
    tensor_cores = property(
        lambda self: self._c.tensor_cores,
        doc="Whether it issues tensor-core instructions (judged by tolerance, not bits).",
    )

    def __repr__(self) -> str:
        params = ", ".join(map(repr, self.params))
        results = ", ".join(map(repr, self.results))
        return f"<tessel.Step {self.name}({params}) -> ({results}), {self.profile}, {self.target}>"

    def _bind(self, args: tuple, kwargs: dict) -> list:
        if len(args) > len(self.params):
            raise ArgumentError(
                f"step `{self.name}` takes {len(self.params)} parameters, given {len(args)} "
                "positional arguments"
            )
        values: List[Any] = list(args) + [_MISSING] * (len(self.params) - len(args))
        for name, v in kwargs.items():
            i = self._index.get(name)
            if i is None:
                known = ", ".join(p.name for p in self.params)
                raise ArgumentError(f"step `{self.name}` has no parameter `{name}` (it has {known})")
            if values[i] is not _MISSING:
                raise ArgumentError(f"`{name}` is given twice")
            values[i] = v
        missing = [p.name for p, v in zip(self.params, values) if v is _MISSING]
        if missing:
            raise ArgumentError(
                f"step `{self.name}` is missing {', '.join(f'`{m}`' for m in missing)}"
            )
        return values

    def __call__(self, /, *args, **kwargs):
        if self._fast is not None and (
            not kwargs or (len(kwargs) == 1 and "out" in kwargs and "out" not in self._index)
        ):
            # Every argument positional (and perhaps `out=`): CUDA tensors that pass every
            # check launch without the general path below; anything else (or anything
            # wrong) takes it.
            result = self._fast(args, kwargs.get("out"))
            if result is not _SLOW:
                return result
        # A parameter named `out` takes the keyword; results then go through `into`.
        out = None if "out" in self._index else kwargs.pop("out", None)
        return self._call(args, kwargs, out)

    def into(self, out, /, *args, **kwargs):
        """Calls the step writing its results into ``out`` (a tensor, or one entry per
        result, ``None`` to allocate that one): ``step(..., out=out)`` for a step that has
        a parameter named ``out``."""
        if self._fast is not None and not kwargs:
            result = self._fast(args, out)
            if result is not _SLOW:
                return result
        return self._call(args, kwargs, out)

    def _call(self, args, kwargs, out):
        values = self._bind(args, kwargs)
        torch = _torch()
        is_torch = [torch is not None and isinstance(v, torch.Tensor) for v in values]
        cuda = [t and v.is_cuda for t, v in zip(is_torch, values)]
        if any(cuda):
            first = cuda.index(True)
            for p, v, c in zip(self.params, values, cuda):
                if not c:
                    raise ArgumentError(
                        f"`{p.name}` is {_describe(v)}, but `{self.params[first].name}` is on "
                        f"{values[first].device}: pass every argument on the same CUDA device"
                    )
            return self._run_cuda(torch, values, out)
        return self._run_cpu(values, out, any(is_torch))

    # -- checks -----------------------------------------------------------------------------

    def _check_torch(self, torch, what: str, spec, v, device=None):
        if not isinstance(v, torch.Tensor):
            raise ArgumentError(f"`{what}` must be a torch.Tensor, given {_describe(v)}")
        want = getattr(torch, _DTYPES[spec.dtype])
        if v.dtype != want:
            raise ArgumentError(
                f"`{what}` must be {spec.dtype} ({want}), given {_describe(v)}"
            )
        if tuple(v.shape) != spec.shape:
            raise ArgumentError(f"`{what}` must have shape {list(spec.shape)}, given {_describe(v)}")
        if device is not None and v.device != device:
            raise ArgumentError(f"`{what}` is on {v.device}, the other arguments on {device}")
        if not v.is_contiguous():
            raise ArgumentError(
                f"`{what}` is not contiguous (strides {list(v.stride())}); pass "
                f"`{what}.contiguous()`"
            )
        if v.is_cuda and v.data_ptr() % _ALIGN:
            raise ArgumentError(
                f"`{what}` starts at address {v.data_ptr():#x}, not {_ALIGN}-byte aligned "
                f"(a view at an offset?); pass `{what}.clone()`"
            )

    def _check_numpy(self, what: str, spec, v):
        np = _numpy()
        if not isinstance(v, np.ndarray) or isinstance(v, np.ma.MaskedArray):
            raise ArgumentError(
                f"`{what}` must be a torch.Tensor or numpy.ndarray, given {_describe(v)}"
            )
        want = _numpy_dtype(spec.dtype)
        if v.dtype != want:
            raise ArgumentError(f"`{what}` must be {spec.dtype} ({want}), given {_describe(v)}")
        if tuple(v.shape) != spec.shape:
            raise ArgumentError(f"`{what}` must have shape {list(spec.shape)}, given {_describe(v)}")
        if not v.flags["C_CONTIGUOUS"]:
            raise ArgumentError(
                f"`{what}` is not C-contiguous; pass `numpy.ascontiguousarray({what})`"
            )

    def _check_overlap(self, values, outs):
        """Refuses memory the step writes (an ``inout`` parameter, an ``out=`` tensor) that
        overlaps any other argument: the kernels would read what they are overwriting (as
        torch refuses an in-place op whose input aliases its output)."""
        if not self._has_inout and all(o is None for o in outs):
            return  # nothing is written but the step's own results
        named = [(p.name, v, p.inout) for p, v in zip(self.params, values)]
        named += [(f"out[{r.name}]", o, True) for r, o in zip(self.results, outs) if o is not None]
        for i, (a, va, wa) in enumerate(named):
            for b, vb, wb in named[i + 1 :]:
                if (wa or wb) and _overlap(va, vb):
                    raise ArgumentError(
                        f"`{a}` and `{b}` share memory, and the step writes "
                        f"`{a if wa else b}`: pass separate tensors"
                    )

    def _outs(self, out) -> list:
        """``out`` as one entry (or ``None``) per result."""
        n = len(self.results)
        if out is None:
            return [None] * n
        if not isinstance(out, (list, tuple)):
            out = [out]
        if len(out) != n:
            raise ArgumentError(f"`out` has {len(out)} entries; step `{self.name}` has {n} results")
        for r, o in zip(self.results, out):
            if o is not None and r.memory is not None:
                whose = "a parameter's" if r.memory[0] == "param" else "an earlier result's"
                raise ArgumentError(
                    f"`out` for result `{r.name}`: it is {whose} memory, pass None"
                )
        return list(out)

    def _finish(self, values, own):
        """The results in order: each of its own memory (``own``), a parameter's, or an
        earlier result's."""
        results = []
        for r, o in zip(self.results, own):
            if r.memory is None:
                results.append(o)
            elif r.memory[0] == "param":
                results.append(values[r.memory[1]])
            else:
                results.append(results[r.memory[1]])
        return results[0] if len(results) == 1 else tuple(results)

    # -- the GPU ----------------------------------------------------------------------------

    def _run_cuda(self, torch, values, out):
        device = values[0].device
        for p, v in zip(self.params, values):
            self._check_torch(torch, p.name, p, v, device)
        outs = self._outs(out)
        for r, o in zip(self.results, outs):
            if o is not None:
                self._check_torch(torch, f"out[{r.name}]", r, o, device)
        self._check_overlap(values, outs)
        own = []
        for r, o in zip(self.results, outs):
            if r.memory is not None:
                own.append(None)
            elif o is None:
                own.append(
                    torch.empty(r.shape, dtype=getattr(torch, _DTYPES[r.dtype]), device=device)
                )
            else:
                own.append(o)
        index = device.index if device.index is not None else torch.cuda.current_device()
        self._enqueue(torch, index, device, values, [v.data_ptr() for v in values], own)
        return self._finish(values, own)

    def _enqueue(self, torch, index, device, values, ptrs, own):
        """Enqueues the step on device ``index``'s current stream over the arguments at
        ``ptrs`` and the results ``own`` (``None`` for a result that is other memory), with
        a workspace from torch's caching allocator; a failed launch raises with a
        reproducer of ``values``."""
        workspace = None
        if self._c.workspace_bytes:
            workspace = torch.empty(self._c.workspace_bytes, dtype=torch.uint8, device=device)
        try:
            self._c.launch(
                index,
                _current_stream(torch)(index),
                ptrs,
                [0 if o is None else o.data_ptr() for o in own],
                0 if workspace is None else workspace.data_ptr(),
            )
        except _tessel.DeviceError as e:
            raise self._reproducer(e, list(values)) from None
        # The workspace is freed here, after its launches are enqueued on the stream it was
        # allocated on: torch's caching allocator reuses it only for later work of that
        # stream, which runs after them.

    # -- failures ---------------------------------------------------------------------------

    def _reproducer(self, error, values):
        """``error`` (a failed launch or executor run) with a reproducer bundle written
        under ``$TESSEL_REPRO_DIR`` (default ``./tessel-repro``) and its path appended to the
        message: the call's inputs as a safetensors file beside the bundle, and the bundle
        (tessel-driver ``repro``: sources, IR stages, PTX, ptxas command) that names it.
        ``TESSEL_REPRO_DIR=off`` writes nothing."""
        parent = os.environ.get("TESSEL_REPRO_DIR", "tessel-repro")
        if parent.strip().lower() in ("", "0", "off", "none"):
            return error
        try:
            parent = pathlib.Path(parent).resolve()
            where, inputs = self._c.write_repro(str(parent), str(error), _input_bytes(values))
            note = f"reproducer written to {where} (inputs: {inputs})"
        except Exception as e:  # noqa: BLE001 - the original error matters more
            note = f"(writing a reproducer failed: {e})"
        return type(error)(f"{error}\n{note}")

    # -- the CPU executor ---------------------------------------------------------------------

    def _run_cpu(self, values, out, as_torch: bool):
        torch = _torch() if as_torch else None
        np = _numpy()
        # A numpy scalar (`np.float32(2.0)`) for a 0-d parameter is the 0-d array it holds.
        values = [
            np.asarray(v) if isinstance(v, np.generic) and not p.inout else v
            for p, v in zip(self.params, values)
        ]
        for p, v in zip(self.params, values):
            if torch is not None and isinstance(v, torch.Tensor):
                self._check_torch(torch, p.name, p, v)
            else:
                self._check_numpy(p.name, p, v)
        data = _input_bytes(values)
        outs = self._outs(out)
        for r, o in zip(self.results, outs):
            if o is None:
                continue
            if torch is not None and isinstance(o, torch.Tensor):
                self._check_torch(torch, f"out[{r.name}]", r, o)
            else:
                self._check_numpy(f"out[{r.name}]", r, o)
        written = [(p.name, v) for p, v in zip(self.params, values) if p.inout]
        written += [(f"out[{r.name}]", o) for r, o in zip(self.results, outs) if o is not None]
        for what, v in written:
            if isinstance(v, np.ndarray) and not v.flags["WRITEABLE"]:
                raise ArgumentError(f"`{what}` is read-only, and the step writes it")
        self._check_overlap(values, outs)
        try:
            raw = self._c.run_executor(data)
        except _tessel.DeviceError as e:
            raise self._reproducer(e, values) from None
        own = []
        for i, (r, o, b) in enumerate(zip(self.results, outs, raw)):
            if r.memory is None:
                if o is not None:
                    kind = torch if torch is not None and isinstance(o, torch.Tensor) else None
                    self._copy_into(kind, o, self._from_bytes(kind, np, b, r))
                    value = o
                else:
                    value = self._from_bytes(torch, np, b, r)
                own.append(value)
            else:
                own.append(None)
                if r.memory[0] == "param" and self.params[r.memory[1]].inout:
                    # The executor ran on a copy: update the caller's tensor in place.
                    v = values[r.memory[1]]
                    kind = torch if torch is not None and isinstance(v, torch.Tensor) else None
                    self._copy_into(kind, v, self._from_bytes(kind, np, b, r))
        return self._finish(values, own)

    @staticmethod
    def _from_bytes(torch, np, b: bytes, spec):
        if torch is not None:
            dtype = getattr(torch, _DTYPES[spec.dtype])
            return torch.frombuffer(bytearray(b), dtype=dtype).reshape(spec.shape)
        return np.frombuffer(bytearray(b), dtype=_numpy_dtype(spec.dtype)).reshape(spec.shape)

    @staticmethod
    def _copy_into(torch, dst, value):
        """Writes an executor result into ``dst`` (an ``out=`` entry or an ``inout``
        argument, both checked before the step ran)."""
        if torch is not None and isinstance(dst, torch.Tensor):
            with torch.no_grad():
                dst.copy_(value if isinstance(value, torch.Tensor) else torch.from_numpy(value))
        else:
            dst[...] = value


def _overlap(a, b) -> bool:
    """Whether two tensors (torch or numpy) may share memory."""
    torch = _torch()
    if torch is not None and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.device != b.device or a.numel() == 0 or b.numel() == 0:
            return False
        a0, b0 = a.data_ptr(), b.data_ptr()
        return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()
    np = _numpy()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    return False


def _current_stream(torch):
    """A function of a device index giving its current CUDA stream (a ``CUstream``):
    torch's raw accessor, as Triton's launcher reads it (0.09 µs a call against 2.8 for
    ``torch.cuda.current_stream(i).cuda_stream``, run 22), or the public one where torch
    has no raw accessor."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)


def _input_bytes(values) -> list:
    """Each argument's bytes (little-endian, row-major): torch tensors on any device (CUDA
    ones copied to the host) and numpy arrays, as the executor and the reproducer take them."""
    torch = _torch()
    out = []
    for v in values:
        if torch is not None and isinstance(v, torch.Tensor):
            t = v.detach().contiguous().cpu()
            if t.dtype == torch.bfloat16:
                t = t.view(torch.int16)
            out.append(t.numpy().tobytes())
        else:
            out.append(v.tobytes())
    return out


class _FastPath:
    """The common call of a :class:`Step`, ``step(a, b, ...)`` (or ``step(a, b, out=o)``,
    ``step.into(o, a, b)``) with every argument a CUDA
    tensor of the right dtype and shape, contiguous, 16-byte aligned and on one device, in as
    few Python operations as it can: per argument one ``isinstance`` and five tensor
    attributes compared with what was worked out at compile time, the written memory checked
    for overlap on integers, results allocated with precomputed shapes and dtypes, the stream
    read with torch's raw-stream accessor (as Triton's launcher does). A call that misses any
    of it returns ``_SLOW`` before anything is allocated or launched, and
    :meth:`Step._call` checks it again, argument by argument, and names what is wrong."""

    def __init__(self, step: "Step"):
        torch = _torch()
        self.torch = torch
        self.step = step
        self.tensor = torch.Tensor
        self.params = [(getattr(torch, _DTYPES[p.dtype]), torch.Size(p.shape)) for p in step.params]
        # Which parameters the step writes, and their byte sizes for the overlap check.
        self.inout = [p.inout for p in step.params]
        self.nbytes = [
            torch.empty((), dtype=dt).element_size() * shape.numel() for dt, shape in self.params
        ]
        # One entry per result: (shape, dtype) to allocate, or None for a result that is a
        # parameter's or an earlier result's memory.
        self.results = [
            None if r.memory is not None else (tuple(r.shape), getattr(torch, _DTYPES[r.dtype]))
            for r in step.results
        ]
        self.devices: Dict[int, Any] = {}

    def __call__(self, args, out=None):
        if len(args) != len(self.params) or not args:
            return _SLOW
        tensor = self.tensor
        first = args[0]
        if not isinstance(first, tensor) or not first.is_cuda:
            return _SLOW
        index = first.get_device()
        ptrs = []
        for v, (dtype, shape) in zip(args, self.params):
            if not (
                isinstance(v, tensor)
                and v.dtype is dtype
                and v.shape == shape
                and v.get_device() == index
                and v.is_contiguous()
            ):
                return _SLOW
            p = v.data_ptr()
            if p % _ALIGN:
                return _SLOW
            ptrs.append(p)
        # `out`: one tensor or one entry per result (None to allocate it), each checked as
        # a parameter is, and only for a result of its own memory.
        outs = None
        if out is not None:
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(outs) != len(self.results):
                return _SLOW
            for o, r in zip(outs, self.results):
                if o is None:
                    continue
                if r is None or not (
                    isinstance(o, tensor)
                    and o.dtype is r[1]
                    and o.shape == r[0]
                    and o.get_device() == index
                    and o.is_contiguous()
                    and not o.data_ptr() % _ALIGN
                ):
                    return _SLOW
        # Memory the step writes (inout parameters, `out` tensors) overlapping any other
        # argument: the general path names the two.
        spans = list(zip(ptrs, self.nbytes, self.inout))
        if outs is not None:
            spans += [(o.data_ptr(), o.numel() * o.element_size(), True) for o in outs if o is not None]
        if self.step._has_inout or outs is not None:
            for i, (lo, n, w) in enumerate(spans):
                if not w or not n:
                    continue
                for j, (p, m, _) in enumerate(spans):
                    if j != i and m and p < lo + n and lo < p + m:
                        return _SLOW
        device = self.devices.get(index)
        if device is None:
            device = self.devices[index] = self.torch.device("cuda", index)
        empty = self.torch.empty
        own = [
            None if r is None else (
                outs[i] if outs is not None and outs[i] is not None
                else empty(r[0], dtype=r[1], device=device)
            )
            for i, r in enumerate(self.results)
        ]
        self.step._enqueue(self.torch, index, device, args, ptrs, own)
        return self.step._finish(args, own)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
# What `_FastPath` returns for a call it leaves to the general path.
_SLOW = _Missing()
