#!/usr/bin/env python3
"""A LoRA training step on one Qwen decoder layer, tessel's `grad` against PEFT + torch autograd.

The steps compared are `grads` and `mse_grads` of examples/lora/qwen3_14b_lora.tsl (and
qwen2_5_14b_lora.tsl): the layer with rank-R LoRA adapters on q, k, v, o, gate, up and down
(examples/lib/lora.tsl), its output and the gradients of the layer input and every adapter.
Two phases, so that the tessel binary runs between them:

  lora_layer.py inputs --checkpoint CKPT --layer N [--config C] --T 2048 --R 16
                       [--alpha 32] [--loss dot|mse] [--b-init normal|zero] [--b-std 0.02]
                       [--no-f64] --seed 1 --out DIR
      writes DIR/inputs.safetensors (x, pos and dy or target), DIR/adapters.safetensors (the
      adapters under PEFT's names), DIR/weights/ (the checkpoint tessel reads: an index over
      CKPT's shards and adapters.safetensors), DIR/hf_eager.safetensors,
      DIR/hf_sdpa.safetensors and DIR/hf_f64.safetensors (PEFT's results), DIR/meta.json.
      Needs torch, transformers 5.x and peft; a GPU unless --device cpu (plumbing only).
  tessel run examples/lora/qwen3_14b_lora.tsl --step grads|mse_grads --weights DIR/weights \\
      --layer N --inputs DIR/inputs.safetensors --dim T=2048 --dim R=16 -o DIR/tessel.safetensors
  lora_layer.py compare --out DIR [--tessel FILE] [--json FILE] [--max-rel-rms 1e-1]
      prints the statistics below and writes DIR/compare.json. numpy only.

How tessel gets the adapters. The step declares them `from "base_model.model.model.layers.
{layer}.<module>.lora_A.weight"` (lora_B likewise: PEFT's adapter_model.safetensors names).
With --weights, `tessel run` reads EVERY `from` parameter from that checkpoint and refuses a
parameter that --inputs gives too ("has two sources"; crates/tessel/src/weights.rs). So the
adapters cannot go in inputs.safetensors: they go in DIR/adapters.safetensors, and
DIR/weights/model.safetensors.index.json maps each base tensor of CKPT (`model.layers.*`,
by relative path to CKPT's own shard files, nothing copied) and each adapter to its file.
adapters.safetensors holds the adapters of layer 0 too (other values), so a loader that takes
the wrong layer shows. inputs.safetensors holds only the step's plain inputs.

Tensors (H hidden, QD = heads * head_dim, KD = kv_heads * head_dim, F intermediate):
  inputs.safetensors      x      bf16[T, H]  ~ N(0, 1), seeded
                          pos    i32[T]      0 .. T-1
                          dy     bf16[T, H]  ~ N(0, 1) (--loss dot: the upstream gradient)
                          target bf16[T, H]  ~ N(0, 1) (--loss mse)
  adapters.safetensors    base_model.model.model.layers.L.self_attn.{q,k,v,o}_proj.lora_{A,B}.weight,
                          base_model.model.model.layers.L.mlp.{gate,up,down}_proj.lora_{A,B}.weight;
                          f32, A [R, in], B [out, R]; L = N and 0
  hf_{eager,sdpa}.safetensors, tessel.safetensors (tessel's names are the tail names of the
  step, crates/tessel-passes/src/check/signature.rs `output_names`):
      --loss dot (step grads):  out bf16[T, H], dx bf16[T, H], daq f32[R, H], dbq f32[QD, R],
          dak [R, H], dbk [KD, R], dav [R, H], dbv [KD, R], dao [R, QD], dbo [H, R],
          dag [R, H], dbg [F, R], dau [R, H], dbu [F, R], dad [R, F], dbd [H, R]
      --loss mse (step mse_grads): loss f32[] and daq .. dbd
  hf_f64.safetensors      the same names, every tensor F32 (rounded from f64)

What PEFT runs. transformers' Qwen3DecoderLayer / Qwen2DecoderLayer loaded as hf_layer.py
loads it (HFLayer: model.layers.N.* strictly, bf16), inside a one-attribute nn.Module
wrapper, given to peft.get_peft_model with LoraConfig(r=R, lora_alpha=alpha,
target_modules=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj],
lora_dropout=0, bias="none") and PEFT's default autocast_adapter_dtype=True, which keeps the
adapters f32 on the bf16 base (meta.json records the dtype PEFT chose; it is forced to f32,
with a note, if it was not). The adapters' values are then overwritten with seeded ones: A ~
U(-1/sqrt(in), 1/sqrt(in)) (the bound of PEFT's kaiming_uniform(a=sqrt(5)) init), B ~ N(0,
b_std^2) (--b-init normal: B non-zero so every gradient is informative; PEFT itself starts B
at zero) or B = 0 (--b-init zero: PEFT's start, where every dA must be exactly 0 and out is
the base layer's). Only the adapters require grad; x is a bf16 leaf that requires grad.
Mask and RoPE tables as the model makes them (hf_layer.py). Forward and backward:
  --loss dot: out = layer(x); out.backward(dy)            (the gradient of sum(dy * out))
  --loss mse: loss = F.mse_loss(out.float(), target.float()); loss.backward()
with attn_implementation "eager" (transformers' eager_attention_forward, the math tessel
follows) and "sdpa"; the eager run is repeated to record HF's own run-to-run differences
(meta.json "eager_rerun_differ": differing elements per tensor; 0 when deterministic).
Then (unless --no-f64) the same module is converted to float64 (weights exactly, as are
the inputs) and run with sdpa: a high-precision reference, f64 everywhere except where HF
casts to f32 itself (RMSNorm's variance, the RoPE tables), accurate to ~1e-6 relative: the
distance of each bf16 implementation to it is its rounding error.

Statistics (compare), for every tensor and pair: tessel vs eager, tessel vs sdpa, eager vs
sdpa (HF's own spread, the yardstick), and with hf_f64: tessel vs f64, eager vs f64, sdpa vs
f64 (accuracy): max |a - b|, rel-RMS ||a - b|| / ||b|| in float64 (b the second; 0 when both
are 0, inf when only b is), how many values differ (NaN == NaN, +0 == -0) and what fraction,
for same-dtype pairs the largest ulp distance (bf16 or f32 ulps) and for bf16 an ulp
histogram; "yardstick" = rel-RMS(tessel, eager) / rel-RMS(eager, sdpa) (<= 1: tessel is as
close to eager as sdpa is, or closer) and, with f64, "accuracy" = rel-RMS(tessel, f64) /
rel-RMS(eager, f64) (<= 1: tessel is at least as accurate as PEFT's eager path). out and dx
also get rel-RMS per block of 256 positions (attention is causal: later rows sum more).
A tensor that is exactly zero in both HF paths (dA with --b-init zero) is reported as
"expected exactly 0" with tessel's count of non-zero values.
Exit code of compare: 1 if a file or tensor is missing, has another dtype or shape than the
step declares, tessel has a NaN/inf where HF is finite, or tessel's rel-RMS against the
nearer HF path exceeds --max-rel-rms (default 1e-1: a sanity bound above bf16 rounding — on
a tiny config the adapter gradients of PEFT's own bf16 paths are up to 3e-2 from the f64
reference, at Qwen3-14B size and T = 8 up to 2e-2 — while a real bug, a wrong transpose, a
missing scale, a gradient of the wrong adapter, lands at O(1)); else 0. The numbers are the
result.
"""

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import safetensors_np as st  # noqa: E402
from hf_layer import bf16_stats, checkpoint_files, load_config, normal_bf16, rng_for  # noqa: E402
from make_checkpoint import layer_spec  # noqa: E402

IMPLS = ("eager", "sdpa")
TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# tessel's letter for each adapted projection (aq/bq, ..., ad/bd) and its module path in the layer.
ADAPTERS = (("q", "self_attn.q_proj"), ("k", "self_attn.k_proj"), ("v", "self_attn.v_proj"),
            ("o", "self_attn.o_proj"), ("g", "mlp.gate_proj"), ("u", "mlp.up_proj"),
            ("d", "mlp.down_proj"))
PEFT_PREFIX = "base_model.model.model.layers.{layer}."
BLOCK = 256
DEFAULT_MAX_REL_RMS = 1e-1

# ========================================================================================
# numpy only: adapters, the merged checkpoint, statistics, compare


def adapter_shapes(spec):
    """{letter: (in, out)} of the seven adapted projections."""
    H, F, d = spec["hidden"], spec["inter"], spec["head_dim"]
    qd, kd = spec["heads"] * d, spec["kv_heads"] * d
    return {"q": (H, qd), "k": (H, kd), "v": (H, kd), "o": (qd, H), "g": (H, F), "u": (H, F), "d": (F, H)}


def peft_name(layer, module, ab):
    """PEFT's adapter_model.safetensors name, as the step's `from` strings spell it."""
    return f"{PEFT_PREFIX.format(layer=layer)}{module}.lora_{ab}.weight"


def output_names(loss):
    """The step's outputs in order: tessel's tail names."""
    grads = [f"d{ab}{c}" for c, _ in ADAPTERS for ab in ("a", "b")]
    return (["out", "dx"] if loss == "dot" else ["loss"]) + grads


def expected_types(spec, R, T, loss):
    """{output name: (safetensors dtype, shape)} as the step declares them."""
    H = spec["hidden"]
    types = {"out": ("BF16", (T, H)), "dx": ("BF16", (T, H))} if loss == "dot" else {"loss": ("F32", ())}
    for c, (i, o) in adapter_shapes(spec).items():
        types[f"da{c}"] = ("F32", (R, i))
        types[f"db{c}"] = ("F32", (o, R))
    return types


def make_adapters(spec, R, layer, seed, b_init, b_std):
    """{letter: (A f32 [R, in], B f32 [out, R])}: A ~ U(-1/sqrt(in), 1/sqrt(in)); B ~ N(0,
    b_std^2) or zero. A function of (seed, layer, letter) alone."""
    out = {}
    for j, (c, _) in enumerate(ADAPTERS):
        i, o = adapter_shapes(spec)[c]
        bound = 1.0 / np.sqrt(i)
        a = rng_for(seed, "lora_A", layer, j).uniform(-bound, bound, size=(R, i)).astype(np.float32)
        if b_init == "zero":
            b = np.zeros((o, R), dtype=np.float32)
        else:
            b = (b_std * rng_for(seed, "lora_B", layer, j).standard_normal((o, R))).astype(np.float32)
        out[c] = (a, b)
    return out


def write_weights(ckpt, adapter_file, weights_dir):
    """DIR/weights/model.safetensors.index.json: every tensor of checkpoint `ckpt` (by path
    relative to weights_dir, nothing copied) plus every tensor of adapter_file. Returns the
    index path. Raises ValueError if a name is in both."""
    os.makedirs(weights_dir, exist_ok=True)
    wm, total, seen_files = {}, 0, set()
    for n, f in checkpoint_files(ckpt).items():
        wm[n] = os.path.relpath(os.path.abspath(f), os.path.abspath(weights_dir))
        seen_files.add(os.path.abspath(f))
    header, _, _ = st.read_header(adapter_file)
    for n in header:
        if n in wm:
            raise ValueError(f"{n} is in both {ckpt} and {adapter_file}")
        wm[n] = os.path.relpath(os.path.abspath(adapter_file), os.path.abspath(weights_dir))
    seen_files.add(os.path.abspath(adapter_file))
    for f in seen_files:
        h, _, _ = st.read_header(f)
        total += sum(e["data_offsets"][1] - e["data_offsets"][0] for e in h.values())
    path = os.path.join(weights_dir, "model.safetensors.index.json")
    with open(path, "w") as fh:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(wm.items()))}, fh, indent=1)
    return path


def write_case_files(out_dir, ckpt, spec, layer, T, R, seed, loss, b_init, b_std):
    """The numpy half of `inputs`: inputs.safetensors, adapters.safetensors (layers `layer`
    and 0) and weights/. Returns (inputs {name: array}, adapters of `layer`)."""
    os.makedirs(out_dir, exist_ok=True)
    H = spec["hidden"]
    x = normal_bf16(rng_for(seed, "x"), (T, H))
    pos = np.arange(T, dtype=np.int32)
    extra = "dy" if loss == "dot" else "target"
    e = normal_bf16(rng_for(seed, extra), (T, H))
    inputs = {"x": x, "pos": pos, extra: e}
    st.write(os.path.join(out_dir, "inputs.safetensors"),
             [("x", "BF16", x), ("pos", "I32", pos), (extra, "BF16", e)])
    entries, mine = [], None
    for L in sorted({layer, 0}):
        ad = make_adapters(spec, R, L, seed, b_init, b_std)
        if L == layer:
            mine = ad
        for c, module in ADAPTERS:
            a, b = ad[c]
            entries += [(peft_name(L, module, "A"), "F32", a), (peft_name(L, module, "B"), "F32", b)]
    adapter_file = os.path.join(out_dir, "adapters.safetensors")
    st.write(adapter_file, entries, {"format": "pt", "note": "PEFT adapter names, f32, for tessel --weights"})
    write_weights(ckpt, adapter_file, os.path.join(out_dir, "weights"))
    return inputs, mine


def scalar_safe(arr):
    """safetensors_np.write cannot write a 0-d array (np.ascontiguousarray makes it [1]):
    scalars (the mse loss) are stored as [1], and compare reads them back as []."""
    return arr.reshape(1) if arr.ndim == 0 else arr


def as_f64(dtype, arr):
    """A tensor read by safetensors_np as float64 values."""
    if dtype == "BF16":
        return st.bf16_to_f32(arr).astype(np.float64)
    return np.asarray(arr, dtype=np.float64)


def ordered_f32(arr):
    """f32 values -> int64 keys monotone in the value, +0 and -0 both 0 (f32 ulps apart)."""
    b = np.ascontiguousarray(np.asarray(arr, dtype=np.float32)).view(np.uint32).astype(np.int64)
    return np.where(b & 0x80000000, -(b & 0x7FFFFFFF), b)


def float_stats(a, b):
    """Statistics of tensor a against reference b, each (safetensors dtype, array) of one
    shape: {"n", "max_abs", "rel_rms", "differ", "differ_frac", "nonfinite_mismatch",
    "worst"} and, when both dtypes are BF16, bf16_stats' "max_ulp" and "ulp_hist"; both F32,
    "max_ulp" in f32 ulps. Raises ValueError on a shape mismatch."""
    (da, xa), (db, xb) = a, b
    if tuple(np.shape(xa)) != tuple(np.shape(xb)):
        raise ValueError(f"shapes differ: {list(np.shape(xa))} vs {list(np.shape(xb))}")
    if da == db == "BF16":
        return bf16_stats(xa, xb)
    fa, fb = as_f64(da, xa), as_f64(db, xb)
    finite = np.isfinite(fa) & np.isfinite(fb)
    with np.errstate(invalid="ignore"):
        equal = (fa == fb) | (np.isnan(fa) & np.isnan(fb))
        diff = np.where(finite, fa - fb, 0.0)
    n = int(fa.size)
    absd = np.abs(diff)
    num = float(np.sqrt(np.sum(diff * diff)))
    den = float(np.sqrt(np.sum(np.where(finite, fb, 0.0) ** 2)))
    rel = 0.0 if num == 0 else (num / den if den > 0 else float("inf"))
    worst = None
    if n and absd.max() > 0:
        i = np.unravel_index(int(np.argmax(absd)), fa.shape)
        worst = {"index": [int(v) for v in i], "a": float(fa[i]), "b": float(fb[i])}
    s = {"n": n, "max_abs": float(absd.max()) if n else 0.0, "rel_rms": rel,
         "differ": int(n - np.count_nonzero(equal)), "differ_frac": (n - int(np.count_nonzero(equal))) / n if n else 0.0,
         "nonfinite_mismatch": int(np.count_nonzero(~finite & ~equal)), "worst": worst}
    if da == db == "F32":
        ulps = np.abs(ordered_f32(xa) - ordered_f32(xb))[finite]
        s["max_ulp"] = int(ulps.max()) if ulps.size else 0
    return s


def bad_nonfinite(a, b):
    """Positions where a is NaN/inf and b is finite."""
    return int(np.count_nonzero(~np.isfinite(as_f64(*a)) & np.isfinite(as_f64(*b))))


def rel_rms_blocks(a, b, block=BLOCK):
    """{"t0-255": rel-RMS, ...} over blocks of the leading axis."""
    n = np.shape(a[1])[0]
    return {f"t{s}-{min(s + block, n) - 1}": float_stats((a[0], a[1][s:s + block]), (b[0], b[1][s:s + block]))["rel_rms"]
            for s in range(0, n, block)}


def fmt(label, s):
    ulp = f"{s['max_ulp']:>9d}" if "max_ulp" in s else f"{'-':>9}"
    hist = " ".join(f"{k}:{v}" for k, v in s.get("ulp_hist", {}).items() if v)
    extra = f"  nonfinite mismatch {s['nonfinite_mismatch']}" if s["nonfinite_mismatch"] else ""
    return (f"  {label:<15} {s['max_abs']:>10.3e} {s['rel_rms']:>10.3e} {s['differ']:>10d} "
            f"{100 * s['differ_frac']:>8.3f}% {ulp}   {hist}{extra}")


HEAD = (f"  {'pair':<15} {'max_abs':>10} {'rel_rms':>10} {'differ':>10} {'frac':>9} {'max_ulp':>9}   "
        f"ulp histogram (bf16 pairs)")


def ratio(num, den):
    if den > 0:
        return num / den
    return 0.0 if num == 0 else float("inf")


def compare_tensor(name, want, tessel, hf, failures, max_rel):
    """One output: prints its table, returns its JSON entry. want = (dtype, shape) declared;
    tessel = (dtype, array) or None; hf = {"eager", "sdpa"[, "f64"]: (dtype, array)}."""
    dtype, shape = want
    print(f"\n{name}  {dtype.lower()}{list(shape)}")
    print(HEAD)
    entry = {}
    refs = {k: v for k, v in hf.items() if v is not None}
    for impl, (d, arr) in list(refs.items()):
        if arr.shape != tuple(shape) and arr.size == int(np.prod(shape, dtype=np.int64)) and len(shape) == 0:
            refs[impl] = (d, arr.reshape(shape))  # a scalar, stored as [1] (see scalar_safe)
            continue
        if tuple(arr.shape) != tuple(shape):
            failures.append(f"{name}: HF {impl} is {list(arr.shape)}, the step declares {list(shape)}")
            return entry
    ok = False
    if tessel is None:
        failures.append(f"{name}: tessel wrote no `{name}`")
    elif tessel[0] != dtype:
        failures.append(f"{name}: tessel's is {tessel[0]}, the step declares {dtype}")
    elif tuple(tessel[1].shape) != tuple(shape):
        if tessel[1].size == int(np.prod(shape, dtype=np.int64)) and (len(shape) == 0 or tessel[1].ndim == 0):
            print(f"  note: tessel's `{name}` {list(tessel[1].shape)} read as {list(shape)}")
            tessel = (tessel[0], tessel[1].reshape(shape))
            ok = True
        else:
            failures.append(f"{name}: tessel's is {list(tessel[1].shape)}, the step declares {list(shape)}")
    else:
        ok = True
    pairs = {}
    if ok:
        pairs["tessel_vs_eager"] = (tessel, refs["eager"])
        pairs["tessel_vs_sdpa"] = (tessel, refs["sdpa"])
        bad = bad_nonfinite(tessel, refs["eager"])
        if bad:
            failures.append(f"{name}: tessel has {bad} NaN/inf values where HF eager's are finite")
    pairs["eager_vs_sdpa"] = (refs["eager"], refs["sdpa"])
    if "f64" in refs:
        if ok:
            pairs["tessel_vs_f64"] = (tessel, refs["f64"])
        pairs["eager_vs_f64"] = (refs["eager"], refs["f64"])
        pairs["sdpa_vs_f64"] = (refs["sdpa"], refs["f64"])
    for label, (a, b) in pairs.items():
        entry[label] = float_stats(a, b)
        print(fmt(label.replace("_vs_", " vs "), entry[label]))
    zero_ref = all(not np.any(as_f64(*refs[k])) for k in IMPLS)
    if zero_ref:
        nz = int(np.count_nonzero(as_f64(*tessel))) if ok else None
        entry["expected_zero"] = {"tessel_nonzero": nz}
        print(f"  expected exactly 0 (both HF paths are): tessel has {nz} non-zero values")
    if ok:
        e = entry
        entry["yardstick"] = ratio(e["tessel_vs_eager"]["rel_rms"], e["eager_vs_sdpa"]["rel_rms"])
        line = f"  yardstick rel(tessel, eager) / rel(eager, sdpa) = {entry['yardstick']:.3g}"
        if "tessel_vs_f64" in e:
            entry["accuracy"] = ratio(e["tessel_vs_f64"]["rel_rms"], e["eager_vs_f64"]["rel_rms"])
            line += f"; accuracy rel(tessel, f64) / rel(eager, f64) = {entry['accuracy']:.3g}"
        print(line)
        best = min(e["tessel_vs_eager"]["rel_rms"], e["tessel_vs_sdpa"]["rel_rms"])
        if max_rel is not None and not best <= max_rel:
            failures.append(f"{name}: rel-RMS {best:.3e} against the nearer HF path exceeds {max_rel:g}")
    if name in ("out", "dx") and len(shape) == 2 and shape[0] > BLOCK:
        by = {label: rel_rms_blocks(a, b) for label, (a, b) in pairs.items() if not label.endswith("f64")}
        entry["rel_rms_by_block"] = by
        for label, vals in by.items():
            print(f"  rel_rms by block ({label.replace('_vs_', ' vs ')}): "
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
    names, types = meta["outputs"], {k: (v[0], tuple(v[1])) for k, v in meta["types"].items()}
    hf = {impl: st.read(os.path.join(d, f"hf_{impl}.safetensors")) for impl in IMPLS}
    f64_path = os.path.join(d, "hf_f64.safetensors")
    hf["f64"] = st.read(f64_path) if os.path.exists(f64_path) and not args.no_f64 else None
    tessel_all = st.read(tessel_path)
    failures = []
    report = {"dir": d, "tessel": tessel_path, "meta": meta, "max_rel_rms": args.max_rel_rms, "outputs": {},
              "failures": failures}
    print(f"tessel: {tessel_path}; HF: {', '.join(k for k, v in hf.items() if v is not None)}; "
          f"loss {meta['loss']}, B init {meta['b_init']}, T {meta['T']}, R {meta['R']}")
    for i, n in enumerate(names):
        t = tessel_all.get(n) or tessel_all.get(f"out{i}")
        refs = {k: (v[n] if v is not None and n in v else None) for k, v in hf.items()}
        if refs["eager"] is None or refs["sdpa"] is None:
            failures.append(f"{n}: missing from HF's files")
            continue
        report["outputs"][n] = compare_tensor(n, types[n], t, refs, failures, args.max_rel_rms)
    extra = sorted(set(tessel_all) - set(names) - {f"out{i}" for i in range(len(names))})
    if extra:
        print(f"\nnote: tessel also wrote {extra} (not compared)")
    summary = []
    print(f"\n{'tensor':<7} {'rel(t,eager)':>12} {'rel(t,sdpa)':>12} {'rel(e,sdpa)':>12} {'yardstick':>10}"
          f" {'rel(t,f64)':>11} {'rel(e,f64)':>11} {'accuracy':>9}")
    for n, e in report["outputs"].items():
        g = lambda p: e[p]["rel_rms"] if p in e else None  # noqa: E731
        row = {"tensor": n, "tessel_vs_eager": g("tessel_vs_eager"), "tessel_vs_sdpa": g("tessel_vs_sdpa"),
               "eager_vs_sdpa": g("eager_vs_sdpa"), "yardstick": e.get("yardstick"),
               "tessel_vs_f64": g("tessel_vs_f64"), "eager_vs_f64": g("eager_vs_f64"), "accuracy": e.get("accuracy")}
        summary.append(row)
        f = lambda v, w: f"{v:>{w}.3e}" if isinstance(v, float) else f"{'-':>{w}}"  # noqa: E731
        print(f"{n:<7} {f(row['tessel_vs_eager'], 12)} {f(row['tessel_vs_sdpa'], 12)} {f(row['eager_vs_sdpa'], 12)}"
              f" {f(row['yardstick'], 10)} {f(row['tessel_vs_f64'], 11)} {f(row['eager_vs_f64'], 11)}"
              f" {f(row['accuracy'], 9)}")
    report["summary"] = summary
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
# torch + transformers + peft: the reference


def lora_environment(device):
    import torch
    from hf_layer import environment
    env = environment(device)
    try:
        import peft
        env["peft"] = peft.__version__
    except ImportError:
        env["peft"] = None
    fp = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    if fp is not None:
        env["matmul_fp32_precision"] = str(fp)
    return env


def make_peft(layer, R, alpha):
    """Wraps decoder layer `layer` (in place) with PEFT's LoRA on the seven projections, as
    the module docstring says. Returns (peft_model, wrapper, {letter: lora.Linear}, scale);
    calling wrapper(hidden_states=, attention_mask=, position_ids=, position_embeddings=)
    runs the adapted layer and returns its hidden states. Raises RuntimeError if PEFT did
    not adapt a projection or its scaling is not alpha / R."""
    import torch
    from peft import LoraConfig, get_peft_model

    class Wrap(torch.nn.Module):
        """A bare decoder layer as a model PEFT can adapt: forward returns the hidden states."""

        def __init__(self, lay):
            super().__init__()
            self.layer = lay

        def forward(self, hidden_states, attention_mask=None, position_ids=None, position_embeddings=None):
            out = self.layer(hidden_states, attention_mask=attention_mask, position_ids=position_ids,
                             past_key_values=None, use_cache=False, position_embeddings=position_embeddings)
            return out[0] if isinstance(out, tuple) else out

    wrap = Wrap(layer)
    cfg = LoraConfig(r=R, lora_alpha=alpha, target_modules=list(TARGET_MODULES), lora_dropout=0.0, bias="none")
    model = get_peft_model(wrap, cfg)  # autocast_adapter_dtype=True (the default): f32 adapters
    model.eval()
    modules, scale = {}, None
    for c, path in ADAPTERS:
        m = wrap.layer.get_submodule(path)
        if not hasattr(m, "lora_A"):
            raise RuntimeError(f"PEFT did not adapt {path} ({type(m).__name__})")
        modules[c] = m
        sc = m.scaling["default"]
        scale = sc if scale is None else scale
        if abs(sc - alpha / R) > 1e-12:
            raise RuntimeError(f"{path}: PEFT's scaling {sc}, expected alpha / r = {alpha / R}")
    return model, wrap, modules, scale


class PeftLayer:
    """The HF decoder layer of a checkpoint under PEFT's LoRA, with seeded adapters.

    torch is imported here, so that `compare` runs without it."""

    def __init__(self, config_path, ckpt, layer, device, R, alpha, adapters):
        import torch
        from hf_layer import HFLayer

        self.torch = torch
        self.hf = HFLayer(config_path, ckpt, layer, device)
        self.notes = []

        self.model, self.wrap, self.modules, self.scale = make_peft(self.hf.layer, R, alpha)
        self.peft_dtype = {c: str(m.lora_A["default"].weight.dtype) for c, m in self.modules.items()}
        with torch.no_grad():
            for c, m in self.modules.items():
                a, b = adapters[c]
                for lin, val in ((m.lora_A["default"], a), (m.lora_B["default"], b)):
                    w = lin.weight
                    if w.dtype != torch.float32:
                        self.notes.append(f"{c}: PEFT made the adapter {w.dtype}; forced to float32")
                        lin.to(torch.float32)
                        w = lin.weight
                    if tuple(w.shape) != val.shape:
                        raise RuntimeError(f"{c}: PEFT's adapter is {list(w.shape)}, ours {list(val.shape)}")
                    w.copy_(torch.from_numpy(val))
        trainable = [n for n, p in self.model.named_parameters() if p.requires_grad]
        if any("lora_" not in n for n in trainable):
            raise RuntimeError(f"non-adapter parameters require grad: {[n for n in trainable if 'lora_' not in n]}")
        if len(trainable) != 2 * len(ADAPTERS):
            raise RuntimeError(f"expected {2 * len(ADAPTERS)} trainable adapter tensors, PEFT has {trainable}")

    def params(self):
        """[(output name, parameter)] in the step's output order."""
        out = []
        for c, _ in ADAPTERS:
            m = self.modules[c]
            out += [(f"da{c}", m.lora_A["default"].weight), (f"db{c}", m.lora_B["default"].weight)]
        return out

    def run(self, inputs, loss, impl, dtype=None):
        """Forward and backward; {output name: torch tensor} (out, dx or loss; every adapter
        gradient). dtype: run in that float dtype (the module must have been converted)."""
        torch, hf = self.torch, self.hf
        hf.config._attn_implementation = impl
        dev = hf.device
        cast = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
        x = cast(hf.to_torch(inputs["x"])).clone().requires_grad_(True)
        pos = torch.as_tensor(inputs["pos"].astype(np.int64), device=dev)[None]
        for _, p in self.params():
            p.grad = None
        xb = x[None]
        with torch.no_grad():
            mask = hf.create_causal_mask(config=hf.config, inputs_embeds=xb, attention_mask=None,
                                         past_key_values=None, position_ids=pos, layer_idx=hf.layer_idx)
            cos_sin = hf.rotary(xb, pos)
        out = self.model(hidden_states=xb, attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        res = {}
        if loss == "dot":
            out.backward(cast(hf.to_torch(inputs["dy"]))[None])
            res["out"], res["dx"] = out[0].detach(), x.grad.detach()
        else:
            tgt = cast(hf.to_torch(inputs["target"]))[None]
            lv = torch.nn.functional.mse_loss(out.float() if dtype is None else out, tgt.float() if dtype is None else tgt)
            lv.backward()
            res["loss"] = lv.detach()
        for n, p in self.params():
            if p.grad is None:
                raise RuntimeError(f"{n}: no gradient reached the adapter")
            res[n] = p.grad.detach().clone()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        return res

    def to_np(self, name, t, want_dtype):
        """A result as (safetensors dtype, numpy array): BF16 bits for bf16, F32 otherwise."""
        torch = self.torch
        if want_dtype == "BF16" and t.dtype == torch.bfloat16:
            return "BF16", self.hf.to_bits(t)
        return "F32", scalar_safe(t.detach().to(torch.float32).cpu().numpy())


def cmd_inputs(args):
    try:
        import torch
        import transformers  # noqa: F401
        import peft  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"lora_layer.py inputs needs torch, transformers 5.x and peft ({e}); compare needs only numpy")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on the GPU machine, or pass --device cpu to check the plumbing")
    config_path = args.config or os.path.join(args.checkpoint, "config.json")
    spec = layer_spec(load_config(config_path))
    inputs, adapters = write_case_files(args.out, args.checkpoint, spec, args.layer, args.T, args.R, args.seed,
                                        args.loss, args.b_init, args.b_std)
    pl = PeftLayer(config_path, args.checkpoint, args.layer, args.device, args.R, args.alpha, adapters)
    names = output_names(args.loss)
    types = expected_types(spec, args.R, args.T, args.loss)
    meta = {"config": config_path, "checkpoint": args.checkpoint, "layer": args.layer, "seed": args.seed,
            "T": args.T, "R": args.R, "alpha": args.alpha, "scale": pl.scale, "loss": args.loss,
            "b_init": args.b_init, "b_std": args.b_std if args.b_init == "normal" else 0.0, "spec": spec,
            "outputs": names, "types": {k: [v[0], list(v[1])] for k, v in types.items()},
            "step": "grads" if args.loss == "dot" else "mse_grads",
            "peft_adapter_dtype": pl.peft_dtype, "notes": pl.notes, "env": lora_environment(pl.hf.device)}
    results = {}
    for impl in IMPLS:
        r = pl.run(inputs, args.loss, impl)
        results[impl] = {n: pl.to_np(n, r[n], types[n][0]) for n in names}
        print(f"  {impl}: done", flush=True)
    rerun = pl.run(inputs, args.loss, "eager")
    rerun = {n: pl.to_np(n, rerun[n], types[n][0]) for n in names}
    meta["eager_rerun_differ"] = {n: float_stats(rerun[n], results["eager"][n])["differ"] for n in names}
    for impl in IMPLS:
        st.write(os.path.join(args.out, f"hf_{impl}.safetensors"),
                 [(n, *results[impl][n]) for n in names], {"attn_implementation": impl})
    if not args.no_f64:
        pl.model.to(torch.float64)
        r = pl.run(inputs, args.loss, "sdpa", dtype=torch.float64)
        f64 = [(n, "F32", scalar_safe(r[n].to(torch.float32).cpu().numpy())) for n in names]
        st.write(os.path.join(args.out, "hf_f64.safetensors"), f64, {"attn_implementation": "sdpa", "dtype": "float64"})
        meta["f64"] = True
        print("  f64: done", flush=True)
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {args.out}: inputs.safetensors ({', '.join(inputs)}), adapters.safetensors, weights/, "
          f"hf_eager/hf_sdpa{'' if args.no_f64 else '/hf_f64'}.safetensors, meta.json; "
          f"eager rerun differences: {meta['eager_rerun_differ']}")
    return 0


# ========================================================================================


def main(argv=None):
    os.environ.setdefault("USE_HUB_KERNELS", "0")
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inputs", help="write tessel's inputs and PEFT's results (torch, peft, GPU)")
    p.add_argument("--checkpoint", required=True, help="checkpoint directory or .safetensors file")
    p.add_argument("--config", help="model config JSON (default: CHECKPOINT/config.json)")
    p.add_argument("--layer", type=int, required=True)
    p.add_argument("--T", type=int, required=True, help="tokens")
    p.add_argument("--R", type=int, default=16, help="LoRA rank (tessel's --dim R)")
    p.add_argument("--alpha", type=float, default=32.0, help="lora_alpha (the step's ALPHA)")
    p.add_argument("--loss", choices=("dot", "mse"), default="dot",
                   help="dot: step grads (out.backward(dy)); mse: step mse_grads")
    p.add_argument("--b-init", choices=("normal", "zero"), default="normal")
    p.add_argument("--b-std", type=float, default=0.02)
    p.add_argument("--no-f64", action="store_true", help="skip the float64 reference")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="compare tessel's outputs with PEFT's (numpy only)")
    c.add_argument("--out", required=True, help="the directory `inputs` wrote")
    c.add_argument("--tessel", help="tessel's outputs (default OUT/tessel.safetensors)")
    c.add_argument("--json", help="summary (default OUT/compare.json)")
    c.add_argument("--max-rel-rms", type=float, default=DEFAULT_MAX_REL_RMS,
                   help=f"fail if tessel is further than this from both HF paths (default {DEFAULT_MAX_REL_RMS:g})")
    c.add_argument("--no-f64", action="store_true", help="ignore hf_f64.safetensors")
    args = ap.parse_args(argv)
    if args.cmd == "compare":
        return cmd_compare(args)
    if args.T < 1 or args.R < 1:
        ap.error("--T and --R must be positive")
    try:
        return cmd_inputs(args)
    except ValueError as e:
        ap.error(str(e))


if __name__ == "__main__":
    sys.exit(main())
