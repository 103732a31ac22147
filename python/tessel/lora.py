"""``tessel.lora``: PEFT's LoRA linear layer with tessel's compiled forward and backward.

>>> model = peft.get_peft_model(base, peft.LoraConfig(r=16, lora_alpha=32, target_modules=[...]))
>>> swapped = tessel.lora.apply(model, profile="invariant")   # every lora.Linear replaced

:class:`Linear` computes what ``peft.tuners.lora.Linear.forward`` computes for one active
adapter without dropout — ``base(x) + lora_B(lora_A(x)) * scaling`` on a bf16 base layer with
f32 adapters (PEFT's default ``autocast_adapter_dtype``), rounded as PEFT rounds (the
``fn lora_linear`` of ``lora.tsl`` beside this file, which examples/lib/lora.tsl imports) —
as one compiled step per token count, its backward tessel's ``grad`` of the same ``fn``
(gradients for x, lora_A and lora_B; the base weight stays frozen).

It uses the PEFT layer's own parameters (the same ``torch.nn.Parameter`` objects, nothing
copied), so an optimizer built on the PEFT model before or after :func:`apply` trains them,
and the PEFT model saves and loads its adapters as before.

What the ``invariant`` profile promises here (docs/numerics.md): each row of the layer's
output, and of the gradient of its input, has the same bits whatever the number of tokens in
the call and wherever the row sits among them. The adapters' gradients sum over the tokens:

- ``grad_order="call"`` (the default): the backward step returns the call's sum, and torch's
  autograd adds it to ``.grad`` — the same bits run to run, not across micro-batch sizes
  (``(g0 + g1) + (g2 + g3)`` is not ``((g0 + g1) + g2) + g3``);
- ``grad_order="sequence"`` (``invariant`` only): each sequence's part (a row of ``x``'s
  leading dims but the last: ``x`` is ``[..., L, in_features]``) is added to ``.grad`` in
  sequence order, ``((grad + s0) + s1) + ...``, by a step of its own (``lora_adapter_grads``
  in ``lora.tsl``). So the gradient accumulated over a batch, and the training run, have
  the same bits whether the batch runs as one call or as micro-batches of whole sequences in
  order (examples/python/lora_train.py). The backward then returns no gradient for the
  adapters to autograd: it writes ``.grad`` itself (allocating zeros where it is None), so
  hooks on the adapters' gradients do not run; the cost is a second pass over ``x`` and
  ``dy`` in the backward.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any, Dict, List, Tuple

from ._step import Step, _torch, compile
from ._tessel import ArgumentError
from .autograd import Function

SOURCE = pathlib.Path(__file__).with_name("lora.tsl")


def _peft_linear():
    try:
        from peft.tuners.lora import Linear as PeftLinear
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ArgumentError("tessel.lora needs peft (pip install peft)") from e
    return PeftLinear


def _refusal(layer, name: str) -> str:
    """Why tessel's layer cannot stand in for the PEFT layer `layer`, or ""."""
    torch = _torch()
    adapters = list(layer.active_adapters)
    if len(adapters) != 1:
        return f"{name}: {len(adapters)} active adapters; tessel.lora takes one"
    a = adapters[0]
    if getattr(layer, "merged", False):
        return f"{name}: the adapter is merged into the base weight"
    if getattr(layer, "use_dora", {}).get(a, False):
        return f"{name}: DoRA is not supported"
    dropout = layer.lora_dropout[a]
    if not isinstance(dropout, torch.nn.Identity) and not (
        isinstance(dropout, torch.nn.Dropout) and dropout.p == 0
    ):
        return f"{name}: lora_dropout p={getattr(dropout, 'p', '?')}; tessel.lora takes none"
    base = layer.get_base_layer()
    if not isinstance(base, torch.nn.Linear):
        return f"{name}: the base layer is {type(base).__name__}, not torch.nn.Linear"
    if base.weight.dtype != torch.bfloat16:
        return f"{name}: the base weight is {base.weight.dtype}; tessel.lora takes bf16"
    if base.bias is not None and base.bias.dtype != torch.bfloat16:
        return f"{name}: the base bias is {base.bias.dtype}; tessel.lora takes bf16"
    for m in (layer.lora_A[a], layer.lora_B[a]):
        if m.weight.dtype != torch.float32:
            return (
                f"{name}: the adapter weights are {m.weight.dtype}; tessel.lora takes f32 "
                "(PEFT's default autocast_adapter_dtype=True)"
            )
        if m.bias is not None:
            return f"{name}: an adapter has a bias (lora_bias)"
    return ""


class Linear:
    """Stands in for a ``peft.tuners.lora.Linear`` (see the module docstring). Built by
    :func:`apply`, or directly: ``tessel.lora.Linear(peft_layer, profile="invariant")``.
    Raises :class:`tessel.ArgumentError` naming what the PEFT layer has that this layer does
    not compute (several active adapters, dropout, DoRA, a merged adapter, non-bf16 base or
    non-f32 adapters)."""

    def __new__(
        cls,
        peft_layer,
        *,
        profile: str = "invariant",
        grad_order: str = "call",
        name: str = "layer",
        **compile_kw,
    ):
        torch = _torch()
        if torch is None:
            raise ArgumentError("tessel.lora needs torch")
        _check_grad_order(grad_order, profile)
        why = _refusal(peft_layer, name)
        if why:
            raise ArgumentError(why)
        return _module_class(torch)(peft_layer, profile, grad_order, compile_kw)


GRAD_ORDERS = ("call", "sequence")

# Sequences per call of `lora_adapter_grads`: its fold is cumsum's left-to-right order along an
# axis of at most 32 (the accumulator and 31 parts; docs/numerics.md, "Cumsum").
_SEQUENCES_PER_FOLD = 31


def _check_grad_order(grad_order: str, profile: str) -> None:
    if grad_order not in GRAD_ORDERS:
        raise ArgumentError(f"grad_order={grad_order!r}: one of {', '.join(map(repr, GRAD_ORDERS))}")
    if grad_order == "sequence" and profile != "invariant":
        raise ArgumentError(
            f'grad_order="sequence" needs profile="invariant" (given {profile!r}): only there '
            "is each sequence's part of the gradient the same bits whatever the batch"
        )


_MODULE = None


def _module_class(torch):
    global _MODULE
    if _MODULE is not None:
        return _MODULE

    class TesselLoraLinear(torch.nn.Module):
        """tessel's LoRA linear; its parameters are the PEFT layer's."""

        def __init__(self, peft_layer, profile: str, grad_order: str, compile_kw: Dict[str, Any]):
            super().__init__()
            adapter = peft_layer.active_adapters[0]
            self.base_layer = peft_layer.get_base_layer()
            self.lora_A = peft_layer.lora_A
            self.lora_B = peft_layer.lora_B
            self.adapter = adapter
            self.scaling = float(peft_layer.scaling[adapter])
            self.profile = profile
            self.grad_order = grad_order
            self.compile_kw = compile_kw
            self.in_features = self.base_layer.in_features
            self.out_features = self.base_layer.out_features
            self.r = self.lora_A[adapter].weight.shape[0]
            self._fns: Dict[int, Function] = {}
            self._folds: Dict[Tuple[int, int], Step] = {}
            self._scale = {}

        def extra_repr(self) -> str:
            return (
                f"in_features={self.in_features}, out_features={self.out_features}, "
                f"r={self.r}, scaling={self.scaling}, profile={self.profile}, "
                f"grad_order={self.grad_order}, tessel"
            )

        def step(self, tokens: int) -> Function:
            """The compiled forward/backward pair for `tokens` rows (compiled once each)."""
            fn = self._fns.get(tokens)
            if fn is None:
                biased = self.base_layer.bias is not None
                # In sequence order the adapters' gradients come from `fold`'s step.
                wrt = ["x", "a", "b"] if self.grad_order == "call" else ["x"]
                fn = Function(
                    SOURCE,
                    "lora_linear_bias" if biased else "lora_linear",
                    wrt=wrt,
                    dims={"T": tokens, "E": self.in_features, "N": self.out_features, "R": self.r},
                    profile=self.profile,
                    **self.compile_kw,
                )
                self._fns[tokens] = fn
            return fn

        def fold(self, sequences: int, length: int) -> Step:
            """The step adding `sequences` sequences of `length` tokens to the adapters'
            gradients in order (`lora_adapter_grads`; compiled once per shape)."""
            key = (sequences, length)
            step = self._folds.get(key)
            if step is None:
                dims = {"S": sequences, "L": length, "E": self.in_features,
                        "N": self.out_features, "R": self.r}
                step = compile(SOURCE, "lora_adapter_grads", dims=dims, profile=self.profile,
                               **self.compile_kw)
                self._folds[key] = step
            return step

        def accumulate(self, rows, a, b, scale, dy, sequences: int) -> None:
            """Adds the adapters' gradients of the call (`rows`, `dy`: `[T, in]`, `[T, out]`
            bf16, T = sequences · length) to `.grad` of lora_A and lora_B, sequence after
            sequence (`grad_order="sequence"`)."""
            length = rows.shape[0] // sequences
            x3 = rows.view(sequences, length, self.in_features)
            dy3 = dy.view(sequences, length, self.out_features)
            acc = []
            for p in (self.lora_A[self.adapter].weight, self.lora_B[self.adapter].weight):
                if p.grad is None:
                    p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
                elif not p.grad.is_contiguous():  # torch keeps .grad in p's dtype, f32
                    p.grad = p.grad.contiguous()
                acc.append(p.grad)
            for at in range(0, sequences, _SEQUENCES_PER_FOLD):
                n = min(_SEQUENCES_PER_FOLD, sequences - at)
                part = (x3[at : at + n], dy3[at : at + n])
                if at:  # a view at an offset may not be 16-byte aligned: the step refuses it
                    part = tuple(t.clone() for t in part)
                self.fold(n, length)(part[0], a, b, scale, part[1], acc[0], acc[1])

        def forward(self, x):
            if x.shape[-1] != self.in_features:
                raise ArgumentError(
                    f"x has {x.shape[-1]} features; the layer takes {self.in_features}"
                )
            lead = x.shape[:-1]
            rows = x.reshape(-1, self.in_features)
            if x.dtype != torch.bfloat16:
                rows = rows.to(torch.bfloat16)
            rows = rows.contiguous()
            fn = self.step(rows.shape[0])
            key = (rows.device, self.scaling)
            scale = self._scale.get(key)
            if scale is None:
                scale = torch.tensor(self.scaling, dtype=torch.float32, device=rows.device)
                self._scale[key] = scale
            a = self.lora_A[self.adapter].weight
            b = self.lora_B[self.adapter].weight
            w = self.base_layer.weight
            biased = () if self.base_layer.bias is None else (self.base_layer.bias,)
            if self.grad_order == "call":
                y = fn(rows, w, *biased, a, b, scale)
            else:
                sequences = math.prod(lead[:-1]) if len(lead) > 1 else 1
                y = _ordered(torch)(self, fn, sequences, rows, w, *biased, a, b, scale)
            return y.reshape(*lead, self.out_features)

    _MODULE = TesselLoraLinear
    return TesselLoraLinear


_ORDERED = None


def _ordered(torch):
    """The ``torch.autograd.Function`` of ``grad_order="sequence"``: the forward step, then
    in the backward the gradient of x from the backward step (``wrt=["x"]``) and the
    adapters' gradients added to their ``.grad`` by :meth:`TesselLoraLinear.accumulate`;
    autograd gets no gradient for the adapters."""
    global _ORDERED
    if _ORDERED is not None:
        return _ORDERED.apply

    class Ordered(torch.autograd.Function):
        @staticmethod
        def forward(ctx, layer, fn: Function, sequences: int, *values):
            ctx.layer, ctx.fn, ctx.sequences = layer, fn, sequences
            ctx.save_for_backward(*values)
            return fn.forward_step(*values)

        @staticmethod
        def backward(ctx, dy):
            values = ctx.saved_tensors
            dy = dy.contiguous()
            dx = ctx.fn.backward_step(*values, dy) if ctx.needs_input_grad[3] else None
            rows, a, b, scale = values[0], values[-3], values[-2], values[-1]
            if a.requires_grad or b.requires_grad:
                ctx.layer.accumulate(rows, a, b, scale, dy, ctx.sequences)
            return (None, None, None, dx) + (None,) * (len(values) - 1)

    _ORDERED = Ordered
    return Ordered.apply


def apply(model, *, profile: str = "invariant", grad_order: str = "call", **compile_kw) -> List[str]:
    """Replaces every ``peft.tuners.lora.Linear`` in ``model`` (a PEFT model, or any module
    holding such layers) by tessel's :class:`Linear` over the same parameters, and returns
    the names of the layers replaced. Checks every layer before replacing any: an
    :class:`tessel.ArgumentError` lists each layer tessel cannot stand in for, and the model
    is left as it was. ``grad_order``: how the adapters' gradients are summed (the module
    docstring)."""
    _check_grad_order(grad_order, profile)
    PeftLinear = _peft_linear()
    found = [(n, m) for n, m in model.named_modules() if isinstance(m, PeftLinear)]
    if not found:
        raise ArgumentError("the model has no peft LoRA Linear layer")
    refusals = [why for n, m in found if (why := _refusal(m, n))]
    if refusals:
        raise ArgumentError("tessel.lora cannot replace:\n  " + "\n  ".join(refusals))
    for name, layer in found:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(
            parent,
            child,
            Linear(layer, profile=profile, grad_order=grad_order, name=name, **compile_kw),
        )
    return [n for n, _ in found]
