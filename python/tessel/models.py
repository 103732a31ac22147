"""``tessel.models``: a transformers Qwen3 or Qwen2 causal LM whose decoder layers run as
tessel's compiled steps.

>>> lm = tessel.models.Qwen(model, profile="fast")      # Qwen3ForCausalLM / Qwen2ForCausalLM
>>> tokens = lm.generate(input_ids, max_new_tokens=32)   # greedy, as model.generate(do_sample=False)

Each decoder layer is one compiled step, ``layer`` (:func:`layer_source`), built from the
package's ``qwen.tsl`` — the functions examples/qwen3_14b/layer.tsl is built from — with the
model's numbers (hidden size, heads, intermediate size, ``rms_norm_eps``, ``rope_theta``): T
new tokens of each of B sequences at positions ``len[b] ..``, their keys and values written
into the layer's KV cache in place, attention over the cache's first ``len[b] + T`` rows.
The prompt runs through it with ``len = 0`` (the prefill into the cache), each new token
with T = 1 (decode). The weights are the model's own tensors (passed by address, nothing
copied); the embedding, the final norm and the LM head are the model's modules.

Supported: ``head_dim`` 128 (the RoPE of ``qwen.tsl``), default RoPE (no ``rope_scaling``),
bf16 weights, Qwen3 without attention bias, Qwen2 with q/k/v bias; every sequence of a batch
the same prompt length. Anything else is an :class:`tessel.ArgumentError` saying what.
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
from typing import Any, Dict, List

from ._step import Step, _torch, compile
from ._tessel import ArgumentError
from .autograd import _generated_dir, _write_once

LIB = pathlib.Path(__file__).with_name("qwen.tsl")


def _config(cfg) -> Dict[str, Any]:
    """The numbers a layer is built from, checked: a transformers config, or any object
    with its attributes."""
    kind = getattr(cfg, "model_type", None)
    if kind not in ("qwen3", "qwen2"):
        raise ArgumentError(f"tessel.models takes qwen3 and qwen2 configs, given {kind!r}")

    def need(name):
        if not hasattr(cfg, name):
            raise ArgumentError(f"the config has no `{name}`")
        return getattr(cfg, name)

    def size(name):
        v = need(name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArgumentError(f"`{name}` = {v!r}: a positive integer")
        return v

    def positive(name, v):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ArgumentError(f"`{name}` = {v!r}: a finite positive number")
        return float(v)

    e, heads, kv, f = (size(n) for n in ("hidden_size", "num_attention_heads",
                                          "num_key_value_heads", "intermediate_size"))
    if heads % kv:
        raise ArgumentError(f"{heads} attention heads are not a multiple of {kv} key/value heads")
    head_dim = getattr(cfg, "head_dim", None) or e // heads
    if head_dim != 128:
        raise ArgumentError(f"head_dim {head_dim}: tessel's RoPE (qwen.tsl) is written for 128")
    params = getattr(cfg, "rope_parameters", None) or {}
    scaling = getattr(cfg, "rope_scaling", None) or {}
    rope_type = (scaling.get("rope_type") or scaling.get("type") or params.get("rope_type")
                 or "default")
    if rope_type != "default":
        raise ArgumentError(f"RoPE type {rope_type!r}: only the default RoPE is supported")
    theta = getattr(cfg, "rope_theta", None)
    if theta is None:
        theta = params.get("rope_theta")
    if theta is None:
        raise ArgumentError("the config has no rope_theta")
    if kind == "qwen3" and getattr(cfg, "attention_bias", False):
        raise ArgumentError("a Qwen3 with attention_bias is not supported")
    return {
        "kind": kind,
        "E": e,
        "H": heads,
        "KV": kv,
        "F": f,
        "eps": positive("rms_norm_eps", need("rms_norm_eps")),
        "theta": positive("rope_theta", theta),
        "scale": head_dim**-0.5,
    }


def layer_params(kind: str) -> List[str]:
    """The layer step's weight parameters in order (after x, len, k_cache, v_cache)."""
    attn = ["wq", "wk", "wv"] + (["bq", "bk", "bv"] if kind == "qwen2" else ["q_norm", "k_norm"])
    return ["input_norm", *attn, "wo", "post_norm", "wg", "wu", "wd"]


def layer_source(cfg, lib: str = None) -> str:
    """The decoder layer of the transformers config ``cfg`` as a tessel source: one step,
    ``layer(x: bf16[B, T, E], len: i32[B], k_cache: inout bf16[B, KV, S, 128], v_cache:
    inout ..., <weights>) -> bf16[B, T, E]`` (weights in :func:`layer_params` order), the
    body examples/qwen3_14b/layer.tsl's ``decode`` (examples/qwen2_5_14b/layer.tsl's for
    Qwen2). ``lib`` is the path its ``import`` names (the package's ``qwen.tsl``)."""
    c = _config(cfg)
    e, h, kv, f = c["E"], c["H"], c["KV"], c["F"]
    qd, kd = h * 128, kv * 128
    lib = os.fspath(lib or LIB.resolve())
    if any(c in lib for c in '"\\\n\r'):
        # The language's string literals have no escapes (E0005).
        raise ArgumentError(f"the package's path {lib!r} has a quote, backslash or line break, "
                            "which an `import` cannot name")
    if c["kind"] == "qwen3":
        weights = (
            f"wq: bf16[{qd}, {e}], wk: bf16[{kd}, {e}], wv: bf16[{kd}, {e}], "
            "q_norm: bf16[128], k_norm: bf16[128]"
        )
        q = f"rms_norm(reshape(h @ wq^T, [B * T, {h}, 128]), q_norm, EPS)"
        k = f"rms_norm(reshape(h @ wk^T, [B * T, {kv}, 128]), k_norm, EPS)"
        v = f"reshape(h @ wv^T, [B * T, {kv}, 128])"
    else:
        weights = (
            f"wq: bf16[{qd}, {e}], wk: bf16[{kd}, {e}], wv: bf16[{kd}, {e}], "
            f"bq: bf16[{qd}], bk: bf16[{kd}], bv: bf16[{kd}]"
        )
        q = f"reshape(linear_bias(h, wq, bq), [B * T, {h}, 128])"
        k = f"reshape(linear_bias(h, wk, bk), [B * T, {kv}, 128])"
        v = f"reshape(linear_bias(h, wv, bv), [B * T, {kv}, 128])"
    return f"""// A {c['kind']} decoder layer generated by tessel.models (hidden {e}, {h} query and {kv}
// key/value heads of dim 128, intermediate {f}).
import "{lib}";

const EPS = {c['eps']!r};
const THETA = {c['theta']!r};
const SCALE = {c['scale']!r};

step layer(
    x: bf16[B, T, {e}], len: i32[B],
    k_cache: inout bf16[B, {kv}, S, 128], v_cache: inout bf16[B, {kv}, S, 128],
    input_norm: bf16[{e}], {weights},
    wo: bf16[{e}, {qd}], post_norm: bf16[{e}], wg: bf16[{f}, {e}], wu: bf16[{f}, {e}], wd: bf16[{e}, {f}],
) -> bf16[B, T, {e}] {{
    let xt = reshape(x, [B * T, {e}]);
    let h = rms_norm(xt, input_norm, EPS);
    let pos = reshape(len[:, None] + iota(T)[None, :], [B * T]);
    let qr = rope({q}, pos, THETA);
    let kr = rope({k}, pos, THETA);
    let v = {v};
    let kc = update(k_cache, permute(reshape(kr, [B, T, {kv}, 128]), [0, 2, 1, 3]), at: len, axis: 2);
    let vc = update(v_cache, permute(reshape(v, [B, T, {kv}, 128]), [0, 2, 1, 3]), at: len, axis: 2);
    let heads = attention_cached(reshape(qr, [B, T, {h}, 128]), kc, vc, len, SCALE);
    let mid = xt + reshape(heads, [B * T, {qd}]) @ wo^T;
    reshape(mid + mlp(rms_norm(mid, post_norm, EPS), wg, wu, wd), [B, T, {e}])
}}
"""


def write_layer_source(cfg, cache: bool = True) -> pathlib.Path:
    """:func:`layer_source` written to a file beside the cache (named by its hash)."""
    text = layer_source(cfg)
    path = _generated_dir(cache) / f"layer.{hashlib.sha256(text.encode()).hexdigest()[:16]}.tsl"
    _write_once(path, text)
    return path


class Qwen:
    """``model`` (a transformers Qwen3ForCausalLM or Qwen2ForCausalLM) with its decoder
    layers run by tessel; see the module docstring. ``compile_kw`` are
    :func:`tessel.compile`'s (``target``, ``cache``, schedule options)."""

    def __init__(self, model, *, profile: str = "fast", **compile_kw):
        torch = _torch()
        if torch is None:
            raise ArgumentError("tessel.models needs torch")
        self.torch = torch
        self.model = model
        self.cfg = _config(model.config)
        self.source = write_layer_source(model.config, compile_kw.get("cache", True))
        self.profile = profile
        self.compile_kw = compile_kw
        self._steps: Dict[tuple, Step] = {}
        inner = model.model
        self.layers = []
        for i, layer in enumerate(inner.layers):
            a, m = layer.self_attn, layer.mlp
            w = {
                "input_norm": layer.input_layernorm.weight,
                "wq": a.q_proj.weight, "wk": a.k_proj.weight, "wv": a.v_proj.weight,
                "wo": a.o_proj.weight, "post_norm": layer.post_attention_layernorm.weight,
                "wg": m.gate_proj.weight, "wu": m.up_proj.weight, "wd": m.down_proj.weight,
            }
            if self.cfg["kind"] == "qwen2":
                w.update(bq=a.q_proj.bias, bk=a.k_proj.bias, bv=a.v_proj.bias)
            else:
                w.update(q_norm=a.q_norm.weight, k_norm=a.k_norm.weight)
            for name, t in w.items():
                if t is None or t.dtype != torch.bfloat16:
                    raise ArgumentError(f"layer {i}: `{name}` must be a bf16 tensor, given {t!r:.60}")
            self.layers.append([w[n].detach() for n in layer_params(self.cfg["kind"])])

    def step(self, batch: int, tokens: int, capacity: int) -> Step:
        """The layer step for B = ``batch``, T = ``tokens`` and a cache of ``capacity``
        positions (compiled once per shape)."""
        key = (batch, tokens, capacity)
        s = self._steps.get(key)
        if s is None:
            s = compile(self.source, "layer", dims={"B": batch, "T": tokens, "S": capacity},
                        profile=self.profile, **self.compile_kw)
            self._steps[key] = s
        return s

    def new_cache(self, batch: int, capacity: int):
        """Zeroed K and V caches, one pair per layer, [batch, KV, capacity, 128] bf16 on the
        model's device."""
        t = self.torch
        dev = self.layers[0][0].device
        shape = (batch, self.cfg["KV"], capacity, 128)
        return [(t.zeros(shape, dtype=t.bfloat16, device=dev), t.zeros(shape, dtype=t.bfloat16, device=dev))
                for _ in self.layers]

    def forward(self, hidden, lens, caches):
        """Runs every decoder layer on ``hidden`` [B, T, E] bf16 (the embeddings of T new
        tokens per sequence), at positions ``lens`` [B] int32 onwards, appending to
        ``caches`` in place; returns the last layer's hidden states."""
        b, t, _ = hidden.shape
        s = self.step(b, t, caches[0][0].shape[2])
        x = hidden.contiguous()
        for (kc, vc), weights in zip(caches, self.layers):
            x = s(x, lens, kc, vc, *weights)[0]
        return x

    def generate(self, input_ids, max_new_tokens: int, capacity: int = None):
        """Greedy decoding as ``model.generate(input_ids, max_new_tokens=N, do_sample=False)``
        (no stop on the EOS token): ``input_ids`` [B, P] → [B, P + N]. The KV caches hold
        ``capacity`` positions (default P + N; a fixed capacity reuses the compiled steps
        across calls of other lengths)."""
        t = self.torch
        if input_ids.dim() != 2:
            raise ArgumentError(f"input_ids must be [batch, length], given {list(input_ids.shape)}")
        b, p = input_ids.shape
        capacity = capacity or p + max_new_tokens
        if capacity < p + max_new_tokens:
            raise ArgumentError(f"capacity {capacity} < {p} prompt + {max_new_tokens} new tokens")
        caches = self.new_cache(b, capacity)
        lens = t.zeros(b, dtype=t.int32, device=input_ids.device)
        inner, out = self.model.model, [input_ids]
        ids = input_ids
        with t.no_grad():
            for _ in range(max_new_tokens):
                x = self.forward(inner.embed_tokens(ids).to(t.bfloat16), lens, caches)
                lens += ids.shape[1]
                logits = self.model.lm_head(inner.norm(x[:, -1:]))
                ids = logits[:, -1].argmax(dim=-1, keepdim=True)
                out.append(ids)
        return t.cat(out, dim=1)
