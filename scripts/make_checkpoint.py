#!/usr/bin/env python3
"""Writes a seeded random checkpoint of a few Qwen decoder layers, in Hugging Face's layout.

    scripts/make_checkpoint.py CONFIG OUT_DIR --layers 0[,1,...] --seed S [--shards K]
                               [--score-std 3.0]

CONFIG: a model config (examples/<model>/config.json, or shared/models/<model>.json).
OUT_DIR gets what a Hugging Face model directory holds for those layers:
  * --shards 1 (default): model.safetensors;
  * --shards K > 1: model-0000i-of-0000K.safetensors, i = 1..K, and
    model.safetensors.index.json = {"metadata": {"total_size": BYTES}, "weight_map":
    {tensor name: shard file}} (transformers' ``save_pretrained`` layout; total_size is the
    sum of the tensors' bytes). Tensors go to shards in state-dict order (layer by layer, each
    layer in module order), cut where the bytes are closest to even, so one layer's tensors
    may straddle two shards, as they do in real checkpoints. In each file tensors are sorted
    by name, as the safetensors writer sorts them;
  * config.json, a byte copy of CONFIG.
Only the listed layers are written: one Qwen3-14B layer is 0.66 GB, the whole model 29 GB.

Tensors of layer N (all bf16, nn.Linear weights stored [out_features, in_features]; H =
hidden_size, I = intermediate_size, nq = num_attention_heads, nkv = num_key_value_heads,
d = head_dim), named as transformers' Qwen2DecoderLayer / Qwen3DecoderLayer name them
(transformers/models/qwen{2,3}/modeling_qwen{2,3}.py):

    model.layers.N.input_layernorm.weight            [H]
    model.layers.N.self_attn.q_proj.weight           [nq*d, H]    (+ .bias [nq*d]  if qkv_bias)
    model.layers.N.self_attn.k_proj.weight           [nkv*d, H]   (+ .bias [nkv*d] if qkv_bias)
    model.layers.N.self_attn.v_proj.weight           [nkv*d, H]   (+ .bias [nkv*d] if qkv_bias)
    model.layers.N.self_attn.o_proj.weight           [H, nq*d]
    model.layers.N.self_attn.q_norm.weight           [d]          (if qk_norm)
    model.layers.N.self_attn.k_norm.weight           [d]          (if qk_norm)
    model.layers.N.post_attention_layernorm.weight   [H]
    model.layers.N.mlp.gate_proj.weight              [I, H]
    model.layers.N.mlp.up_proj.weight                [I, H]
    model.layers.N.mlp.down_proj.weight              [H, I]

qkv_bias and qk_norm come from the config's fields of those names; where absent, from the
architecture (Qwen2: bias, no norm; Qwen3: attention_bias, norm).

Magnitudes, chosen so that a layer fed hidden states ~ N(0, 1) keeps every activation O(1),
as in a trained model, and so that attention is peaked rather than uniform (a uniform
softmax averages errors away and would test little):
  * Linear weights ~ N(0, std^2) with std = 1/sqrt(in_features): a row of n inputs of RMS 1
    gives outputs of RMS 1 (variance n * 1/n).
  * RMSNorm weights (input_layernorm, post_attention_layernorm) = 1 + 0.1 * N(0, 1).
  * Attention scores q.k/sqrt(d) get standard deviation --score-std (default 3, so the
    largest of 4096 scores sits ~10 above the mean and a few keys take most of the weight):
    each of q and k gets RMS g = sqrt(score_std), through q_norm / k_norm weights =
    g * (1 + 0.1 * N(0, 1)) when the model has QK-norm, else through q_proj / k_proj with
    std g/sqrt(H) (q.k of independent entries has variance d * g^2 * g^2).
  * q/k/v biases ~ N(0, 0.5^2), the order of the weight term, so a missing bias shows.
Seen through transformers' layers (tests/gpu/hf_layer.py on the CPU, x ~ N(0, 1), 8 tokens
at positions 100..107): Qwen3-14B attention output RMS 0.85, layer output RMS 1.44 (max 6.4),
keys RMS 1.77; Qwen2.5-14B 0.97, 1.52 (max 6.3). An attention output RMS near that of V (1)
means each query takes most of its weight from a few keys.
The values of a tensor depend only on (--seed, its layer, its name): the same seed gives the
same layer 3 whether written alone or with others, in one file or in shards.

numpy and this directory's safetensors_np.py only (bf16 is rounded from float32 with
round-to-nearest-even and written as raw bits); no torch, so it also runs without a GPU.
"""

import argparse
import json
import os
import shutil
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_np as st  # noqa: E402

# Elements drawn per call: bounds the float32 scratch at 64 MiB per tensor.
CHUNK = 1 << 24
BIAS_STD = 0.5
NORM_SPREAD = 0.1


def layer_spec(config):
    """Shapes of one decoder layer from a config dict: {"hidden", "inter", "heads",
    "kv_heads", "head_dim", "qkv_bias", "qk_norm"}. Raises ValueError on an unknown
    architecture or missing field."""
    arch = config.get("architecture") or (config.get("architectures") or [None])[0]
    if arch not in ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM"):
        raise ValueError(f"unsupported architecture {arch!r} "
                         "(Qwen2ForCausalLM, Qwen3ForCausalLM or LlamaForCausalLM)")
    # Qwen2 has q/k/v biases; Qwen3 and Llama have them only with attention_bias.
    qwen3 = arch in ("Qwen3ForCausalLM", "LlamaForCausalLM")
    try:
        heads = int(config["num_attention_heads"])
        spec = {
            "hidden": int(config["hidden_size"]),
            "inter": int(config["intermediate_size"]),
            "heads": heads,
            "kv_heads": int(config.get("num_key_value_heads") or heads),
        }
    except KeyError as e:
        raise ValueError(f"config lacks {e.args[0]!r}") from None
    spec["head_dim"] = int(config.get("head_dim") or spec["hidden"] // heads)
    spec["qkv_bias"] = bool(config.get("qkv_bias", config.get("attention_bias", False) if qwen3 else True))
    spec["qk_norm"] = bool(config.get("qk_norm", arch == "Qwen3ForCausalLM"))
    return spec


def layer_tensors(spec, score_std):
    """One layer's tensors in state-dict (module registration) order:
    [(local name, shape, kind, scale)] with kind "normal" (scale * N(0,1)) or "norm"
    (scale * (1 + 0.1 N(0,1)))."""
    H, I, d = spec["hidden"], spec["inter"], spec["head_dim"]
    q_out, kv_out = spec["heads"] * d, spec["kv_heads"] * d
    g = float(np.sqrt(score_std))
    qk_std = 1.0 / np.sqrt(H) if spec["qk_norm"] else g / np.sqrt(H)
    t = []
    for proj, out, std in (("q", q_out, qk_std), ("k", kv_out, qk_std), ("v", kv_out, 1.0 / np.sqrt(H))):
        t.append((f"self_attn.{proj}_proj.weight", (out, H), "normal", std))
        if spec["qkv_bias"]:
            t.append((f"self_attn.{proj}_proj.bias", (out,), "normal", BIAS_STD))
    t.append(("self_attn.o_proj.weight", (H, q_out), "normal", 1.0 / np.sqrt(q_out)))
    if spec["qk_norm"]:
        t.append(("self_attn.q_norm.weight", (d,), "norm", g))
        t.append(("self_attn.k_norm.weight", (d,), "norm", g))
    t.append(("mlp.gate_proj.weight", (I, H), "normal", 1.0 / np.sqrt(H)))
    t.append(("mlp.up_proj.weight", (I, H), "normal", 1.0 / np.sqrt(H)))
    t.append(("mlp.down_proj.weight", (H, I), "normal", 1.0 / np.sqrt(I)))
    t.append(("input_layernorm.weight", (H,), "norm", 1.0))
    t.append(("post_attention_layernorm.weight", (H,), "norm", 1.0))
    return t


def tensor_rng(seed, layer, local_name):
    """The generator of one tensor: a function of (seed, layer, name) alone."""
    return np.random.default_rng([seed, layer, zlib.crc32(local_name.encode())])


def make_values(seed, layer, local_name, shape, kind, scale, chunk=CHUNK):
    """The tensor's bf16 bits (uint16, ``shape``), drawn in chunks of ``chunk`` elements;
    the chunk size does not change the values (numpy's Generator draws one stream)."""
    rng = tensor_rng(seed, layer, local_name)
    n = int(np.prod(shape))
    out = np.empty(n, dtype=np.uint16)
    scale = np.float32(scale)
    for at in range(0, n, chunk):
        z = rng.standard_normal(min(chunk, n - at), dtype=np.float32)
        if kind == "norm":
            v = scale * (np.float32(1.0) + np.float32(NORM_SPREAD) * z)
        else:
            v = scale * z
        out[at:at + len(z)] = st.f32_to_bf16(v)
    return out.reshape(shape)


def split_shards(sizes, k):
    """Contiguous shard index of each tensor: cut where the cumulative bytes are closest to
    k even parts (a tensor goes where its middle byte falls); if that leaves a shard empty
    (a few huge tensors), cut by count instead. sizes: bytes per tensor in order."""
    n = len(sizes)
    if not 1 <= k <= n:
        raise ValueError(f"--shards {k}: must be between 1 and the number of tensors ({n})")
    total = float(sum(sizes))
    cum, idx = 0, []
    for s in sizes:
        idx.append(min(k - 1, int(k * (cum + s / 2) / total)))
        cum += s
    if len(set(idx)) < k:
        idx = [i * k // n for i in range(n)]
    return idx


def write_checkpoint(config_path, out_dir, layers, seed, shards=1, score_std=3.0, log=print):
    """Writes the checkpoint (see the module doc); returns {"files": [...], "total_size": bytes,
    "weight_map": {name: file}}."""
    with open(config_path) as f:
        config = json.load(f)
    spec = layer_spec(config)
    entries = []  # (full name, shape, maker), state-dict order
    for layer in layers:
        for local, shape, kind, scale in layer_tensors(spec, score_std):
            make = (lambda la=layer, n=local, s=shape, k=kind, c=scale:
                    make_values(seed, la, n, s, k, c))
            entries.append((f"model.layers.{layer}.{local}", shape, make))
    sizes = [int(np.prod(s)) * 2 for _, s, _ in entries]
    part = split_shards(sizes, shards)
    os.makedirs(out_dir, exist_ok=True)
    meta = {"format": "pt", "generator": "tessel scripts/make_checkpoint.py", "seed": str(seed),
            "layers": ",".join(map(str, layers)), "score_std": repr(score_std),
            "config": os.path.basename(config_path)}
    names = ["model.safetensors"] if shards == 1 else \
        [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    weight_map = {}
    for i, fname in enumerate(names):
        mine = sorted((e for e, p in zip(entries, part) if p == i), key=lambda e: e[0])
        st.write(os.path.join(out_dir, fname), [(n, "BF16", s, m) for n, s, m in mine], meta)
        for n, _, _ in mine:
            weight_map[n] = fname
        log(f"  wrote {os.path.join(out_dir, fname)} ({len(mine)} tensors, "
            f"{sum(int(np.prod(s)) * 2 for _, s, _ in mine) / 2**20:.1f} MiB)")
    total = sum(sizes)
    if shards > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
    shutil.copyfile(config_path, os.path.join(out_dir, "config.json"))
    return {"files": names, "total_size": total, "weight_map": weight_map}


def parse_layers(text):
    """"0,3,5" -> [0, 3, 5]: distinct non-negative integers, in the order given."""
    try:
        layers = [int(s) for s in text.split(",") if s.strip() != ""]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--layers {text!r}: expected integers like 0,1,2") from None
    if not layers or min(layers) < 0 or len(set(layers)) != len(layers):
        raise argparse.ArgumentTypeError(f"--layers {text!r}: expected distinct non-negative integers")
    return layers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", help="model config JSON (examples/<model>/config.json)")
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=parse_layers, required=True, help="e.g. 0 or 0,1,5")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--shards", type=int, default=1, help="K > 1 writes K shards and an index")
    ap.add_argument("--score-std", type=float, default=3.0,
                    help="standard deviation of the attention scores q.k/sqrt(d) (default 3)")
    args = ap.parse_args(argv)
    with open(args.config) as f:
        n_layers = json.load(f).get("num_hidden_layers")
    if n_layers is not None and max(args.layers) >= n_layers:
        ap.error(f"--layers: the model has {n_layers} layers (0..{n_layers - 1})")
    try:
        r = write_checkpoint(args.config, args.out_dir, args.layers, args.seed, args.shards, args.score_std)
    except ValueError as e:
        ap.error(str(e))
    print(f"{len(r['weight_map'])} tensors, {r['total_size'] / 2**20:.1f} MiB in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
