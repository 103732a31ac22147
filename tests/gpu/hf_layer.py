#!/usr/bin/env python3
"""A whole Qwen decoder layer, tessel against Hugging Face transformers, on the same inputs.

Two phases, so that the tessel binary runs between them:

  hf_layer.py inputs --checkpoint CKPT --layer N [--config C] --mode prefill --T 2048
                     [--offset 0] --seed 1 --out DIR
  hf_layer.py inputs --checkpoint CKPT --layer N [--config C] --mode decode --T 1|8
                     --batch B [--capacity 4096] [--lens L1,..,LB] --seed 1 --out DIR
      writes DIR/inputs.safetensors (tessel's inputs), DIR/hf_eager.safetensors and
      DIR/hf_sdpa.safetensors (HF's outputs), DIR/meta.json. Needs torch + transformers 5.x;
      a GPU unless --device cpu (which only checks the plumbing: CPU kernels differ).
  tessel run LAYER.tsl --step prefill|decode --weights CKPT --layer N \\
      --inputs DIR/inputs.safetensors --dim ... -o DIR/tessel.safetensors
  hf_layer.py compare --out DIR [--tessel FILE] [--json FILE] [--max-rel-rms X]
      prints the statistics below and writes DIR/compare.json. numpy only.

CKPT is a checkpoint directory (model.safetensors, or model.safetensors.index.json + shards,
as scripts/make_checkpoint.py writes) or a single .safetensors file; --config defaults to
CKPT/config.json. H = hidden_size, nq/nkv = attention / key-value heads, d = head_dim.

Files and tensor names (every bf16 tensor is stored as BF16):

  prefill, T tokens at positions offset .. offset+T-1, causal attention among themselves:
    inputs.safetensors   x    bf16[T, H]    hidden states ~ N(0, 1), seeded
                         pos  i32[T]        offset + arange(T)
                                            (--batched: x [1, T, H], pos [1, T])
    hf_*.safetensors     attn bf16[T, nq*d] attention output, the input of o_proj
                         out  bf16[T, H]    the layer's output (residual stream)
    tessel.safetensors   attn, out          (or out0, out1: tessel's names for an unnamed
                                             tuple; --names overrides)

  decode, B sequences, sequence b with L_b cached tokens and T new ones at L_b .. L_b+T-1:
    inputs.safetensors   x        bf16[B, T, H]
                         len      i32[B]               L_b
                         k_cache  bf16[B, nkv, S, d]   rows < L_b: HF's cached keys (after
                                                       k_norm and RoPE); rows >= L_b: zero
                         v_cache  bf16[B, nkv, S, d]   likewise the values
    hf_*.safetensors     attn     bf16[B, T, nq*d]
                         out      bf16[B, T, H]
                         k_new    bf16[B, nkv, T, d]   the rows HF appended to its cache
                         v_new    bf16[B, nkv, T, d]
    tessel.safetensors   attn, out, and either k_cache, v_cache (the whole updated
                         buffers: rows L_b .. L_b+T-1 are compared with k_new / v_new, every
                         other row must be unchanged, bit for bit) or k_new, v_new.

What Hugging Face runs (transformers.models.qwen3.modeling_qwen3 / qwen2.modeling_qwen2 /
llama.modeling_llama, chosen by the config's architecture): Qwen3DecoderLayer /
Qwen2DecoderLayer / LlamaDecoderLayer(config, N) with
the checkpoint's model.layers.N.* loaded strictly (a missing or extra tensor is an error), in
bf16 on --device, in eval mode under no_grad; position embeddings from Qwen3RotaryEmbedding /
Qwen2RotaryEmbedding (inv_freq computed on the CPU, as from_pretrained does) for
position_ids; the mask from transformers.masking_utils.create_causal_mask exactly as
Qwen3Model.forward makes it (for sdpa a plain causal prefill gets no mask and SDPA's
is_causal; eager gets an additive bf16 mask). The layer is run twice, with
config._attn_implementation "eager" (transformers' eager_attention_forward: bf16 matmuls, f32
softmax) and "sdpa" (torch.nn.functional.scaled_dot_product_attention). attn is captured by a
forward pre-hook on self_attn.o_proj.

Decode, per sequence b at batch 1: the L_b context tokens (~ N(0, 1), seeded) go through the
layer once (sdpa) into a transformers.cache_utils.DynamicCache; its keys and values (which do
not depend on the attention implementation) fill k_cache/v_cache[b] and, through
DynamicCache.update, a fresh cache for each implementation; the T new tokens then run with
that cache, and the cache rows they append are k_new/v_new.

Statistics (compare), for each output and each pair (tessel vs eager, tessel vs sdpa, and
eager vs sdpa: how far HF's own two paths are apart, the yardstick for tessel's
differences): max |a - b|; rel-RMS ||a - b|| / ||b|| over all elements in float64 (b the
second of the pair); how many bf16 values differ (NaN equals NaN, +0 equals -0) and what
fraction; the largest distance in bf16 ulps (steps in the ordered bf16 encoding) and a
histogram of it. Near zero that distance is large for a small error: two tiny values of
opposite sign are as many ulps apart as there are bf16 values between them (~30000 for
+-1e-5), so read max_ulp together with the histogram and max_abs. Decode adds rel-RMS per sequence, prefill per block of 256 positions.
Exit code of compare: 1 if a file or tensor is missing or mis-shaped, tessel has a NaN/inf
where HF has a finite value, a cache row outside the new ones changed, or (with
--max-rel-rms) tessel is further than that from both HF paths; else 0.
"""

import argparse
import json
import os
import sys
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import safetensors_np as st  # noqa: E402
from make_checkpoint import layer_spec  # noqa: E402

IMPLS = ("eager", "sdpa")
ULP_BUCKETS = ((0, 0), (1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 64), (65, None))
PREFILL_BLOCK = 256

# ========================================================================================
# numpy only: configs, inputs, statistics, compare


def load_config(path):
    with open(path) as f:
        return json.load(f)


def rng_for(seed, tag, *ints):
    """A generator for one input, a function of (seed, tag, ints) alone."""
    return np.random.default_rng([seed, zlib.crc32(tag.encode()), *ints])


def normal_bf16(rng, shape):
    """~ N(0, 1) rounded to bf16, as uint16 bits."""
    return st.f32_to_bf16(rng.standard_normal(shape, dtype=np.float32))


def decode_lengths(batch, new, capacity, seed, lens=None):
    """L_b for each sequence: the given list, else seeded uniform in [1, capacity - new].
    Raises ValueError if a length is negative or L_b + new exceeds the capacity."""
    if lens is None:
        lens = rng_for(seed, "len").integers(1, capacity - new, size=batch, endpoint=True).tolist()
    lens = [int(v) for v in lens]
    if len(lens) != batch:
        raise ValueError(f"--lens gives {len(lens)} lengths for --batch {batch}")
    for v in lens:
        if v < 0 or v + new > capacity:
            raise ValueError(f"length {v}: need 0 <= L and L + T ({new}) <= capacity ({capacity})")
    return lens


def ordered(bits):
    """bf16 bits -> int32 keys monotone in the value, +0 and -0 both 0: the difference of
    two keys is the distance in bf16 ulps (steps between adjacent bf16 values)."""
    b = bits.astype(np.int32)
    return np.where(b & 0x8000, -(b & 0x7FFF), b)


def ulp_histogram(ulps):
    """{"0": n, "1": n, "2": n, "3-4": n, ...}: counts of ulp distances per bucket."""
    out = {}
    for lo, hi in ULP_BUCKETS:
        label = str(lo) if lo == hi else (f"{lo}-{hi}" if hi else f">={lo}")
        sel = ulps >= lo if hi is None else (ulps >= lo) & (ulps <= hi)
        out[label] = int(np.count_nonzero(sel))
    return out


def bf16_stats(a, b):
    """Statistics of bf16 tensor a against reference b (uint16 bits, same shape).

    Returns {"n", "max_abs", "rel_rms", "differ", "differ_frac", "max_ulp", "ulp_hist",
    "nonfinite_mismatch", "worst": {"index", "a", "b"}}:
      differ: values that are not equal (NaN == NaN and +0 == -0 count as equal);
      nonfinite_mismatch: positions where a or b is NaN/inf and the two differ (these are
        in differ but left out of every number below);
      max_abs, rel_rms (||a - b||_2 / ||b||_2, float64; 0 when both are 0, inf when only b
        is), max_ulp, ulp_hist: over the positions where both are finite;
      worst: the position of max_abs and the two values there (None when all agree).
    """
    a = np.asarray(a, dtype=np.uint16)
    b = np.asarray(b, dtype=np.uint16)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {list(a.shape)} vs {list(b.shape)}")
    fa = st.bf16_to_f32(a).astype(np.float64)
    fb = st.bf16_to_f32(b).astype(np.float64)
    finite = np.isfinite(fa) & np.isfinite(fb)
    nan_a, nan_b = np.isnan(fa), np.isnan(fb)
    with np.errstate(invalid="ignore"):
        equal = (fa == fb) | (nan_a & nan_b)
        diff = np.where(finite, fa - fb, 0.0)
    n = int(a.size)
    differ = int(n - np.count_nonzero(equal))
    absd = np.abs(diff)
    num = float(np.sqrt(np.sum(diff * diff)))
    den = float(np.sqrt(np.sum(np.where(finite, fb, 0.0) ** 2)))
    rel = 0.0 if num == 0 else (num / den if den > 0 else float("inf"))
    ulps = np.abs(ordered(a) - ordered(b))[finite]
    worst = None
    if n and absd.max() > 0:
        i = np.unravel_index(int(np.argmax(absd)), a.shape)
        worst = {"index": [int(v) for v in i], "a": float(fa[i]), "b": float(fb[i])}
    return {
        "n": n,
        "max_abs": float(absd.max()) if n else 0.0,
        "rel_rms": rel,
        "differ": differ,
        "differ_frac": differ / n if n else 0.0,
        "max_ulp": int(ulps.max()) if ulps.size else 0,
        "ulp_hist": ulp_histogram(ulps),
        "nonfinite_mismatch": int(np.count_nonzero(~finite & ~equal)),
        "worst": worst,
    }


def rel_rms_by(a, b, axis_blocks):
    """rel-RMS of a against b for each block of the leading axis: axis_blocks is a list of
    (label, slice)."""
    return {label: bf16_stats(a[s], b[s])["rel_rms"] for label, s in axis_blocks}


def bad_nonfinite(a, b):
    """Positions where a is NaN/inf and b is finite: tessel broke what HF kept finite."""
    return int(np.count_nonzero(~np.isfinite(st.bf16_to_f32(a)) & np.isfinite(st.bf16_to_f32(b))))


def cache_rows_check(updated, original, lens, new):
    """Splits tessel's updated cache [B, nkv, S, d] into its new rows [B, nkv, new, d] and
    counts the elements outside them that changed bitwise from the input cache.
    Returns (new_rows, changed, first_changed) with first_changed a [b, h, s, j] index or
    None."""
    if updated.shape != original.shape:
        raise ValueError(f"updated cache is {list(updated.shape)}, the input was {list(original.shape)}")
    rows = np.stack([updated[b, :, L:L + new, :] for b, L in enumerate(lens)])
    keep = np.ones(updated.shape[:3], dtype=bool)
    for b, L in enumerate(lens):
        keep[b, :, L:L + new] = False
    changed = (updated != original) & keep[..., None]
    count = int(np.count_nonzero(changed))
    first = [int(v) for v in np.argwhere(changed)[0]] if count else None
    return rows, count, first


def fmt_stats(label, s):
    frac = f"{100 * s['differ_frac']:.3f}%"
    extra = f"  nonfinite mismatch {s['nonfinite_mismatch']}" if s["nonfinite_mismatch"] else ""
    return (f"  {label:<17} {s['max_abs']:>10.3e} {s['rel_rms']:>10.3e} {s['differ']:>10d} {frac:>9} "
            f"{s['max_ulp']:>7d}   {' '.join(f'{k}:{v}' for k, v in s['ulp_hist'].items() if v)}{extra}")


TABLE_HEAD = (f"  {'pair':<17} {'max_abs':>10} {'rel_rms':>10} {'differ':>10} {'frac':>9} "
              f"{'max_ulp':>7}   ulp histogram (distance:count)")


def pick(tensors, name, fallback, names_override):
    """tessel's tensor for output `name`: --names override, else the name itself, else the
    default tuple name (out0, out1)."""
    for cand in (names_override.get(name), name, fallback):
        if cand and cand in tensors:
            return cand
    return None


def parse_names(text):
    """"attn=out0,out=out1" -> {"attn": "out0", "out": "out1"}."""
    out = {}
    for part in filter(None, (text or "").split(",")):
        k, sep, v = part.partition("=")
        if not sep:
            raise argparse.ArgumentTypeError(f"--names {text!r}: expected NAME=TESSEL_NAME,...")
        out[k.strip()] = v.strip()
    return out


def tessel_outputs(tessel_all, hf_ref, names, failures):
    """tessel's attn and out as bf16 bits shaped like HF's ({name: array}); a missing,
    non-bf16 or mis-sized tensor is recorded in failures and left out."""
    fallback = {"attn": "out0", "out": "out1"}
    out = {}
    for o in ("attn", "out"):
        n = pick(tessel_all, o, fallback[o], names)
        if n is None:
            failures.append(f"tessel wrote no `{o}` (nor {fallback[o]}); it has {sorted(tessel_all)}")
            continue
        dtype, arr = tessel_all[n]
        if dtype != "BF16":
            failures.append(f"tessel's `{n}` is {dtype}, expected BF16")
            continue
        want = hf_ref[o].shape
        if arr.shape != want:
            if arr.size != int(np.prod(want)):
                failures.append(f"tessel's `{n}` is {list(arr.shape)}, HF's `{o}` {list(want)}")
                continue
            print(f"note: tessel's `{n}` {list(arr.shape)} read as {list(want)}")
            arr = arr.reshape(want)
        out[o] = arr
    return out


def tessel_new_rows(tessel_all, inputs, names, allow_missing, failures):
    """tessel's new cache rows ({"k_new", "v_new": [B, nkv, T, d]}) and a report of the
    updated caches: from k_cache/v_cache (whose other rows must equal the input's, bit for
    bit) or from k_new/v_new."""
    lens, new = inputs["len"].tolist(), inputs["x"].shape[1]
    rows, report = {}, {}
    for kv in ("k", "v"):
        full = pick(tessel_all, f"{kv}_cache", None, names)
        direct = pick(tessel_all, f"{kv}_new", None, names)
        if full is not None:
            try:
                r, changed, first = cache_rows_check(tessel_all[full][1], inputs[f"{kv}_cache"], lens, new)
            except ValueError as e:
                failures.append(f"tessel's `{full}`: {e}")
                continue
            rows[f"{kv}_new"] = r
            report[f"{kv}_cache"] = {"changed_outside_new_rows": changed, "first_changed": first}
            if changed:
                failures.append(f"tessel's `{full}`: {changed} elements outside rows [L_b, L_b+T) "
                                f"changed, first at [b, h, s, j] = {first}")
        elif direct is not None:
            rows[f"{kv}_new"] = tessel_all[direct][1]
        elif allow_missing:
            print(f"note: tessel wrote neither {kv}_cache nor {kv}_new; not compared (--allow-missing-cache)")
        else:
            failures.append(f"tessel wrote neither `{kv}_cache` nor `{kv}_new`; it has {sorted(tessel_all)}")
    return rows, report


def compare_output(o, tessel, hf, blocks, failures):
    """Statistics of one output for every pair, printed as a table; returns the JSON entry."""
    ref = hf["sdpa"][o]
    print(f"\n{o}  bf16{list(ref.shape)}")
    print(TABLE_HEAD)
    pairs = {}
    if o in tessel:
        if tessel[o].shape != ref.shape:
            failures.append(f"tessel's {o} is {list(tessel[o].shape)}, HF's {list(ref.shape)}")
        else:
            pairs["tessel_vs_eager"] = (tessel[o], hf["eager"][o])
            pairs["tessel_vs_sdpa"] = (tessel[o], ref)
            bad = bad_nonfinite(tessel[o], ref)
            if bad:
                failures.append(f"{o}: tessel has {bad} NaN/inf values where HF's are finite")
    pairs["eager_vs_sdpa"] = (hf["eager"][o], ref)
    entry = {}
    for label, (a, b) in pairs.items():
        entry[label] = bf16_stats(a, b)
        print(fmt_stats(label.replace("_vs_", " vs "), entry[label]))
    kind, blocks = blocks
    by = {label: rel_rms_by(a, b, blocks) for label, (a, b) in pairs.items()}
    entry[f"rel_rms_by_{kind}"] = by
    if len(blocks) > 1:
        for label, vals in by.items():
            print(f"  rel_rms by {kind} ({label.replace('_vs_', ' vs ')}): "
                  + " ".join(f"{k}={v:.2e}" for k, v in vals.items()))
    return entry


def cmd_compare(args):
    d = args.out
    tessel_path = args.tessel or os.path.join(d, "tessel.safetensors")
    for path in (os.path.join(d, "meta.json"), tessel_path):
        if not os.path.exists(path):
            print(f"compare: {path} does not exist")
            return 1
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    mode = meta["mode"]
    hf = {impl: {k: v for k, (_, v) in st.read(os.path.join(d, f"hf_{impl}.safetensors")).items()}
          for impl in IMPLS}
    tessel_all = st.read(tessel_path)
    failures = []
    tessel = tessel_outputs(tessel_all, hf["sdpa"], args.names, failures)
    outputs, cache_report = ["attn", "out"], {}
    if mode == "decode":
        inputs = {k: v for k, (_, v) in st.read(os.path.join(d, "inputs.safetensors")).items()}
        rows, cache_report = tessel_new_rows(tessel_all, inputs, args.names, args.allow_missing_cache, failures)
        tessel.update(rows)
        outputs += ["k_new", "v_new"]
        blocks = ("sequence", [(f"b{b}_L{L}", slice(b, b + 1)) for b, L in enumerate(meta["lens"])])
    else:
        n = hf["sdpa"]["out"].shape[0]
        blocks = ("block", [(f"t{s}-{min(s + PREFILL_BLOCK, n) - 1}", slice(s, s + PREFILL_BLOCK))
                            for s in range(0, n, PREFILL_BLOCK)])
    report = {"dir": d, "tessel": tessel_path, "meta": meta, "outputs": {}, "cache": cache_report,
              "failures": failures}
    for o in outputs:
        entry = compare_output(o, tessel, hf, blocks, failures)
        if args.max_rel_rms is not None and "tessel_vs_sdpa" in entry:
            best = min(entry["tessel_vs_eager"]["rel_rms"], entry["tessel_vs_sdpa"]["rel_rms"])
            if best > args.max_rel_rms:
                failures.append(f"{o}: rel-RMS {best:.3e} against the nearer HF path exceeds {args.max_rel_rms:g}")
        report["outputs"][o] = entry
    for k, v in cache_report.items():
        print(f"\n{k}: {v['changed_outside_new_rows']} elements changed outside the new rows")
    json_path = args.json or os.path.join(d, "compare.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nwrote {json_path}")
    if failures:
        print("\nFAILED:")
        for msg in failures:
            print(f"  {msg}")
        return 1
    print("compare: done, no failure (the numbers above are the result)")
    return 0


# ========================================================================================
# torch + transformers: the Hugging Face reference


def hf_modules(config):
    """(ConfigClass, DecoderLayerClass, RotaryEmbeddingClass) for the config's architecture."""
    arch = config.get("architecture") or (config.get("architectures") or [None])[0]
    if arch == "Qwen3ForCausalLM":
        from transformers.models.qwen3 import configuration_qwen3 as c, modeling_qwen3 as m
        return c.Qwen3Config, m.Qwen3DecoderLayer, m.Qwen3RotaryEmbedding
    if arch == "Qwen2ForCausalLM":
        from transformers.models.qwen2 import configuration_qwen2 as c, modeling_qwen2 as m
        return c.Qwen2Config, m.Qwen2DecoderLayer, m.Qwen2RotaryEmbedding
    if arch == "LlamaForCausalLM":
        from transformers.models.llama import configuration_llama as c, modeling_llama as m
        return c.LlamaConfig, m.LlamaDecoderLayer, m.LlamaRotaryEmbedding
    raise ValueError(f"unsupported architecture {arch!r}")


def checkpoint_files(ckpt):
    """{tensor name: file} for a .safetensors file, or a directory with
    model.safetensors.index.json (sharded) or model.safetensors."""
    if os.path.isfile(ckpt):
        return {n: ckpt for n in st.read_header(ckpt)[0]}
    index = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wm = json.load(f)["weight_map"]
        return {n: os.path.join(ckpt, f) for n, f in wm.items()}
    single = os.path.join(ckpt, "model.safetensors")
    if os.path.exists(single):
        return {n: single for n in st.read_header(single)[0]}
    raise FileNotFoundError(f"{ckpt}: no model.safetensors.index.json nor model.safetensors")


class HFLayer:
    """One Hugging Face decoder layer with a checkpoint's weights, and how the model runs it.

    torch is imported here, not at module level, so that `compare` runs without it."""

    def __init__(self, config_path, ckpt, layer, device):
        import torch
        from safetensors import safe_open
        from transformers.cache_utils import DynamicCache
        from transformers.masking_utils import create_causal_mask

        self.torch, self.DynamicCache, self.create_causal_mask = torch, DynamicCache, create_causal_mask
        raw = load_config(config_path)
        self.spec = layer_spec(raw)
        config_cls, layer_cls, rotary_cls = hf_modules(raw)
        self.config = config_cls.from_dict(raw)
        self.layer_idx, self.device = layer, torch.device(device)
        if layer >= self.config.num_hidden_layers:
            raise ValueError(f"--layer {layer}: the model has {self.config.num_hidden_layers} layers")
        prefix = f"model.layers.{layer}."
        files = {n: f for n, f in checkpoint_files(ckpt).items() if n.startswith(prefix)}
        if not files:
            raise ValueError(f"{ckpt} has no tensor named {prefix}*")
        state = {}
        for path in sorted(set(files.values())):
            with safe_open(path, framework="pt", device=str(self.device)) as f:
                for n in f.keys():
                    if n in files and files[n] == path:
                        state[n[len(prefix):]] = f.get_tensor(n)
        for n, t in state.items():
            if t.dtype != torch.bfloat16:
                raise ValueError(f"{prefix}{n} is {t.dtype}, expected bfloat16")
        with torch.device("meta"):
            self.layer = layer_cls(self.config, layer)
        # strict: a tensor the module lacks, or one it needs and the checkpoint lacks, raises.
        self.layer.load_state_dict(state, strict=True, assign=True)
        self.layer.eval()
        # from_pretrained computes inv_freq on the CPU (PreTrainedModel._init_weights), then moves it.
        self.rotary = rotary_cls(config=self.config).to(self.device)
        self.attn_capture = None
        self.layer.self_attn.o_proj.register_forward_pre_hook(self._capture)

    def _capture(self, module, args):
        self.attn_capture = args[0].detach().clone()

    def _run(self, x, position_ids, impl, cache=None):
        """Runs the layer on x [1, T, H] as Qwen{2,3}Model.forward does; returns
        (attn [1, T, nq*d], out [1, T, H])."""
        torch = self.torch
        self.config._attn_implementation = impl
        with torch.no_grad():
            mask = self.create_causal_mask(config=self.config, inputs_embeds=x, attention_mask=None,
                                           past_key_values=cache, position_ids=position_ids,
                                           layer_idx=self.layer_idx)
            cos_sin = self.rotary(x, position_ids)
            self.attn_capture = None
            out = self.layer(x, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                             use_cache=cache is not None, position_embeddings=cos_sin)
        if isinstance(out, tuple):  # transformers 4.x returned (hidden_states, ...)
            out = out[0]
        if self.attn_capture is None:
            raise RuntimeError("the o_proj pre-hook did not fire")
        return self.attn_capture, out

    def to_torch(self, bits):
        """bf16 bits (numpy uint16) -> torch bf16 on the device."""
        return self.torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(self.torch.bfloat16).to(self.device)

    def to_bits(self, t):
        return t.detach().to("cpu").contiguous().view(self.torch.int16).numpy().view(np.uint16)

    def prefill(self, x_bits, pos, impl):
        """x_bits [T, H] bf16 bits, pos int [T] -> (attn [T, nq*d], out [T, H]) as bits."""
        x = self.to_torch(x_bits)[None]
        position_ids = self.torch.as_tensor(np.asarray(pos, dtype=np.int64), device=self.device)[None]
        attn, out = self._run(x, position_ids, impl)
        return self.to_bits(attn[0]), self.to_bits(out[0])

    def context_kv(self, ctx_bits):
        """The keys and values HF caches for context tokens ctx_bits [L, H] at positions
        0..L-1: (k, v) torch bf16 [1, nkv, L, d]."""
        cache = self.DynamicCache(config=self.config)
        L = ctx_bits.shape[0]
        x = self.to_torch(ctx_bits)[None]
        self._run(x, self.torch.arange(L, device=self.device)[None], "sdpa", cache)
        lay = cache.layers[self.layer_idx]
        return lay.keys, lay.values

    def decode(self, x_bits, k_ctx, v_ctx, impl):
        """The new tokens x_bits [T, H] after a cache holding k_ctx, v_ctx [1, nkv, L, d]
        (None when L = 0) -> (attn [T, nq*d], out [T, H], k_new, v_new [nkv, T, d]) as bits."""
        torch = self.torch
        cache = self.DynamicCache(config=self.config)
        L = 0
        if k_ctx is not None and k_ctx.shape[2] > 0:
            cache.update(k_ctx.clone(), v_ctx.clone(), self.layer_idx)
            L = k_ctx.shape[2]
        T = x_bits.shape[0]
        position_ids = torch.arange(L, L + T, device=self.device)[None]
        attn, out = self._run(self.to_torch(x_bits)[None], position_ids, impl, cache)
        lay = cache.layers[self.layer_idx]
        if lay.keys.shape[2] != L + T:
            raise RuntimeError(f"the cache holds {lay.keys.shape[2]} rows after decode, expected {L + T}")
        return (self.to_bits(attn[0]), self.to_bits(out[0]),
                self.to_bits(lay.keys[0, :, L:]), self.to_bits(lay.values[0, :, L:]))


def environment(device):
    import torch
    import transformers
    env = {"torch": torch.__version__, "transformers": transformers.__version__, "device": str(device),
           "numpy": np.__version__}
    if str(device).startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["allow_bf16_reduced_precision_reduction"] = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        env["allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
    return env


def cmd_inputs(args):
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"hf_layer.py inputs needs torch and transformers 5.x ({e}); compare needs only numpy")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on the GPU machine, or pass --device cpu to check the plumbing")
    config_path = args.config or os.path.join(args.checkpoint, "config.json")
    hf = HFLayer(config_path, args.checkpoint, args.layer, args.device)
    H = hf.spec["hidden"]
    os.makedirs(args.out, exist_ok=True)
    meta = {"mode": args.mode, "config": config_path, "checkpoint": args.checkpoint, "layer": args.layer,
            "seed": args.seed, "T": args.T, "spec": hf.spec, "env": environment(hf.device)}
    results = {impl: {} for impl in IMPLS}
    if args.mode == "prefill":
        x = normal_bf16(rng_for(args.seed, "x"), (args.T, H))
        pos = (args.offset + np.arange(args.T)).astype(np.int32)
        # --batched: the step takes a batch of one sequence, x [1, T, H] and pos [1, T]
        # (examples/llama3_8b/layer.tsl); HF's outputs keep [T, ..], compare reads tessel's
        # [1, T, ..] as those.
        lead = (1,) if args.batched else ()
        inputs = [("x", "BF16", x.reshape(lead + x.shape)), ("pos", "I32", pos.reshape(lead + pos.shape))]
        for impl in IMPLS:
            attn, out = hf.prefill(x, pos, impl)
            results[impl] = {"attn": attn, "out": out}
        meta["offset"] = args.offset
        meta["batched"] = args.batched
    else:
        B, T, S = args.batch, args.T, args.capacity
        lens = decode_lengths(B, T, S, args.seed, args.lens)
        nkv, d = hf.spec["kv_heads"], hf.spec["head_dim"]
        x = normal_bf16(rng_for(args.seed, "x"), (B, T, H))
        k_cache = np.zeros((B, nkv, S, d), dtype=np.uint16)
        v_cache = np.zeros_like(k_cache)
        per = {impl: {"attn": [], "out": [], "k_new": [], "v_new": []} for impl in IMPLS}
        for b, L in enumerate(lens):
            k_ctx = v_ctx = None
            if L > 0:
                k_ctx, v_ctx = hf.context_kv(normal_bf16(rng_for(args.seed, "ctx", b), (L, H)))
                k_cache[b, :, :L] = hf.to_bits(k_ctx[0])
                v_cache[b, :, :L] = hf.to_bits(v_ctx[0])
            for impl in IMPLS:
                for name, val in zip(("attn", "out", "k_new", "v_new"), hf.decode(x[b], k_ctx, v_ctx, impl)):
                    per[impl][name].append(val)
            print(f"  sequence {b}: L = {L}", flush=True)
        inputs = [("x", "BF16", x), ("len", "I32", np.asarray(lens, dtype=np.int32)),
                  ("k_cache", "BF16", k_cache), ("v_cache", "BF16", v_cache)]
        results = {impl: {k: np.stack(v) for k, v in per[impl].items()} for impl in IMPLS}
        meta.update(batch=B, capacity=S, lens=lens)
    st.write(os.path.join(args.out, "inputs.safetensors"), inputs)
    for impl in IMPLS:
        st.write(os.path.join(args.out, f"hf_{impl}.safetensors"),
                 [(k, "BF16", v) for k, v in results[impl].items()], {"attn_implementation": impl})
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    shapes = ", ".join(f"{n} {t.lower()}{list(a.shape)}" for n, t, a in inputs)
    print(f"wrote {args.out}/inputs.safetensors ({shapes}), hf_eager/hf_sdpa.safetensors, meta.json")
    return 0


# ========================================================================================


def parse_lens(text):
    try:
        return [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--lens {text!r}: expected integers like 17,4000") from None


def main(argv=None):
    os.environ.setdefault("USE_HUB_KERNELS", "0")  # no downloaded kernels in place of HF's modules
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs", help="write tessel's inputs and HF's outputs (torch, GPU)")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory or .safetensors file")
    p.add_argument("--config", help="model config JSON (default: CHECKPOINT/config.json)")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--mode", choices=("prefill", "decode"), required=True)
    p.add_argument("--T", type=int, required=True, help="tokens per sequence in this step")
    p.add_argument("--offset", type=int, default=0, help="prefill: position of the first token")
    p.add_argument("--batched", action="store_true",
                   help="prefill: inputs of one sequence as a batch, x [1, T, H] and pos [1, T]")
    p.add_argument("--batch", type=int, default=1, help="decode: sequences B")
    p.add_argument("--capacity", type=int, default=4096, help="decode: cache rows S")
    p.add_argument("--lens", type=parse_lens, help="decode: L_b for each sequence (default: seeded)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="compare tessel's outputs with HF's (numpy only)")
    c.add_argument("--out", required=True, help="the directory `inputs` wrote")
    c.add_argument("--tessel", help="tessel's outputs (default OUT/tessel.safetensors)")
    c.add_argument("--json", help="summary (default OUT/compare.json)")
    c.add_argument("--names", type=parse_names, default={},
                   help="tessel's tensor names, e.g. attn=out0,out=out1,k_cache=kc")
    c.add_argument("--max-rel-rms", type=float, help="fail if tessel is further than this from both HF paths")
    c.add_argument("--allow-missing-cache", action="store_true",
                   help="decode: do not fail when tessel wrote no cache")
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        return cmd_compare(args)
    if args.T < 1 or args.batch < 1 or args.capacity < 1:
        ap.error("--T, --batch and --capacity must be positive")
    if args.mode == "decode" and args.offset:
        ap.error("--offset is for prefill; decode positions start at each sequence's length")
    try:
        return cmd_inputs(args)
    except ValueError as e:
        ap.error(str(e))


if __name__ == "__main__":
    sys.exit(main())
