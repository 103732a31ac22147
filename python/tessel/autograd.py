"""``tessel.autograd``: a ``fn`` of a ``.tsl`` file as a differentiable torch function.

>>> mlp = tessel.autograd.function("model.tsl", "mlp", dims={"T": 4096}, profile="invariant")
>>> y = mlp(x, w_gate, w_up, w_down)          # torch tensors; y.requires_grad when any input does
>>> y.sum().backward()                          # x.grad, w_gate.grad, ... from tessel's backward step

The ``fn`` (one result) becomes two compiled steps (tessel-driver ``companion``): ``forward``,
which calls it, and ``backward``, which takes the forward's inputs and the gradient of the
result and returns the gradient of every floating-point parameter, differentiated by
tessel's ``grad`` pass (design §13: no float atomics, a fixed order of sums, so two runs give
the same bits in every profile). The ``torch.autograd.Function`` saves the inputs in the
forward (nothing else: the backward step recomputes what it needs from them, as activation
checkpointing does) and runs the backward step in the backward. Integer and ``bool``
parameters, and floating-point ones left out of ``wrt``, get no gradient (``None``).
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import threading
from typing import Any, Dict, Optional, Sequence

from . import _tessel
from ._step import Step, _torch, cache_dir, compile
from ._tessel import ArgumentError, CompileError


def _generated_dir(cache: bool = True) -> pathlib.Path:
    """Where generated sources are written: ``companions/`` in the cache, else (no cache,
    or one that cannot be written) a directory of this user's under the temporary
    directory."""
    base = cache_dir() if cache else None
    if base is not None:
        d = base / "companions"
        try:
            d.mkdir(parents=True, exist_ok=True)
            if os.access(d, os.W_OK):
                return d
        except OSError:
            pass
    d = pathlib.Path(tempfile.gettempdir()) / f"tessel-companions-{os.getuid()}"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write_once(path: pathlib.Path, text: str) -> None:
    """Writes ``text`` to ``path`` unless it already holds it, by a rename of a file unique
    to this process and thread (so that concurrent writers never see half a file)."""
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class Function:
    """A ``fn`` of a ``.tsl`` file, compiled into its forward and backward steps, called
    like a torch function (by position or by parameter name). See the module docstring."""

    def __init__(
        self,
        path,
        fn: str,
        *,
        wrt: Optional[Sequence[str]] = None,
        dims: Optional[Dict[str, int]] = None,
        profile: str = "exact",
        target: Optional[str] = None,
        cache: bool = True,
        **options: Any,
    ):
        if isinstance(wrt, (str, bytes)):
            raise ArgumentError(f"wrt: a list of parameter names, given the string {wrt!r}")
        text, differentiable = _tessel.grad_companion(
            os.fspath(path), fn, None if wrt is None else list(wrt)
        )
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        generated = _generated_dir(cache) / f"{fn}.{digest}.tsl"
        _write_once(generated, text)
        kw = dict(dims=dims, profile=profile, target=target, cache=cache, **options)
        self.name = fn
        self.source = text
        self.forward_step: Step = compile(generated, "forward", **kw)
        try:
            self.backward_step: Step = compile(generated, "backward", **kw)
        except CompileError as e:
            if wrt is None and "E0223" in str(e):
                # A floating-point parameter the result does not depend on differentiably
                # (a mask, an unused input): the default `wrt` includes it.
                raise ArgumentError(
                    f"`fn {fn}`: {str(e).splitlines()[0]}\n"
                    "name the parameters to differentiate with wrt=[...]"
                ) from e
            raise
        self.differentiable = list(differentiable)

    def __repr__(self) -> str:
        params = ", ".join(map(repr, self.forward_step.params))
        return f"<tessel.autograd.Function {self.name}({params}), {self.forward_step.profile}>"

    def __call__(self, *args, **kwargs):
        torch = _torch()
        if torch is None:
            raise ArgumentError("tessel.autograd needs torch; call .forward_step for numpy arrays")
        values = self.forward_step._bind(args, kwargs)
        return _apply(torch)(self, *values)


def function(path, fn: str, **kwargs) -> Function:
    """``fn`` of the file ``path`` as a differentiable torch function; ``wrt`` names the
    parameters that get gradients (by default every floating-point one; name them to skip a
    frozen weight's); the other ``kwargs`` are :func:`tessel.compile`'s (``dims``,
    ``profile``, ``target``, ``cache``, schedule options). Raises :class:`tessel.ArgumentError` for a ``fn`` of several results or
    without floating-point parameters, :class:`tessel.CompileError` for a source the
    compiler refuses."""
    return Function(path, fn, **kwargs)


_APPLY = None


def _apply(torch):
    """The ``torch.autograd.Function`` (made once, when torch is first needed)."""
    global _APPLY
    if _APPLY is not None:
        return _APPLY.apply

    class Apply(torch.autograd.Function):
        @staticmethod
        def forward(ctx, fn: Function, *values):
            ctx.fn = fn
            ctx.save_for_backward(*values)
            return fn.forward_step(*values)

        @staticmethod
        def backward(ctx, grad_output):
            fn: Function = ctx.fn
            values = ctx.saved_tensors
            # torch hands a gradient of the result's dtype and shape, possibly expanded
            # (the gradient of a sum): the step takes contiguous memory.
            grads = fn.backward_step(*values, grad_output.contiguous())
            grads = grads if isinstance(grads, tuple) else (grads,)
            it = iter(grads)
            out = []
            for i, d in enumerate(fn.differentiable):
                g = next(it) if d else None
                out.append(g if ctx.needs_input_grad[1 + i] else None)
            return (None, *out)

    _APPLY = Apply
    return Apply.apply
