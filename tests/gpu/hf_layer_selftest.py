#!/usr/bin/env python3
"""Checks hf_layer.py's Hugging Face reference against the whole HF model's own forward.

hf_layer.py calls one decoder layer by hand: it builds the mask, the RoPE tables and the
cache as it believes Qwen3Model.forward / Qwen2Model.forward does. This test runs the real
model forward instead (transformers' Qwen3Model / Qwen2Model, tiny configs, random weights
except layer N, which comes from the same checkpoint), with a forward pre-hook that swaps
layer N's input for hf_layer's x, and requires the two to agree bit for bit: attn (o_proj's
input), the layer output and, for decode, the cache rows appended. Covered: prefill at
position offsets 0 and 7; decode with cache lengths 0, 1 and 40, T = 1 and 3 new tokens;
attn_implementation eager and sdpa; Qwen3 (QK-norm) and Qwen2 (QKV bias); a sharded
checkpoint. Then the two-phase CLI end to end (inputs, a fake tessel output, compare).

    python3 tests/gpu/hf_layer_selftest.py [--device cpu|cuda]

Needs torch, transformers 5.x and safetensors; a GPU is optional (default: cuda if present).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
sys.path.insert(0, HERE)
import hf_layer  # noqa: E402
import make_checkpoint as mc  # noqa: E402
import safetensors_np as st  # noqa: E402

import torch  # noqa: E402

TINY = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}, "max_position_embeddings": 4096,
    "hidden_act": "silu", "vocab_size": 100, "use_sliding_window": False, "sliding_window": None,
    "tie_word_embeddings": False,
}
CONFIGS = {
    "qwen3": dict(TINY, architecture="Qwen3ForCausalLM", architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                  qkv_bias=False, qk_norm=True, attention_bias=False),
    "qwen2": dict(TINY, architecture="Qwen2ForCausalLM", architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                  qkv_bias=True, qk_norm=False, attention_bias=True, rms_norm_eps=1e-5),
}
LAYER = 2


class ModelOracle:
    """The whole HF model, layer LAYER from the checkpoint, its input replaced by ours."""

    def __init__(self, config_path, ckpt, device):
        from transformers.cache_utils import DynamicCache
        from transformers.models.qwen2.modeling_qwen2 import Qwen2Model
        from transformers.models.qwen3.modeling_qwen3 import Qwen3Model
        raw = json.load(open(config_path))
        config_cls, _, _ = hf_layer.hf_modules(raw)
        self.config = config_cls.from_dict(raw)
        self.DynamicCache = DynamicCache
        model_cls = Qwen3Model if raw["model_type"] == "qwen3" else Qwen2Model
        torch.manual_seed(0)
        self.model = model_cls(self.config).eval()
        for p in self.model.parameters():  # bf16 weights; the RoPE buffer stays f32 as in from_pretrained
            p.data = p.data.to(torch.bfloat16)
        self.model.to(device)
        prefix = f"model.layers.{LAYER}."
        state = {}
        for name, path in hf_layer.checkpoint_files(ckpt).items():
            if name.startswith(prefix):
                state[name[len(prefix):]] = torch.from_numpy(st.read(path, [name])[name][1].view(np.int16)).view(torch.bfloat16)
        self.model.layers[LAYER].load_state_dict(state, strict=True)
        self.device = device
        self.x, self.got = None, {}
        layer = self.model.layers[LAYER]
        layer.register_forward_pre_hook(lambda m, args: (self.x,) + tuple(args[1:]))
        layer.register_forward_hook(lambda m, args, out: self.got.__setitem__("out", out))
        layer.self_attn.o_proj.register_forward_pre_hook(lambda m, args: self.got.__setitem__("attn", args[0]))

    def run(self, x_bits, impl, position_ids=None, cache=None):
        self.config._attn_implementation = impl
        self.x = torch.from_numpy(x_bits.view(np.int16)).view(torch.bfloat16).to(self.device)[None]
        emb = torch.zeros_like(self.x)  # layers before LAYER see this; LAYER sees x
        with torch.no_grad():
            self.model(inputs_embeds=emb, position_ids=position_ids, past_key_values=cache,
                       use_cache=cache is not None)
        bits = lambda t: t[0].to("cpu").contiguous().view(torch.int16).numpy().view(np.uint16)  # noqa: E731
        return bits(self.got["attn"]), bits(self.got["out"])


def same(a, b, what):
    assert a.shape == b.shape, f"{what}: shapes {a.shape} vs {b.shape}"
    n = int(np.count_nonzero(a != b))
    assert n == 0, f"{what}: {n} of {a.size} bf16 values differ"


def check_against_model(name, d, device):
    cfg_path = os.path.join(d, "config.json")
    json.dump(CONFIGS[name], open(cfg_path, "w"))
    ckpt = os.path.join(d, "ck")
    mc.write_checkpoint(cfg_path, ckpt, [1, LAYER], seed=4, shards=2, log=lambda _: None)
    ref = hf_layer.HFLayer(cfg_path, ckpt, LAYER, device)
    oracle = ModelOracle(cfg_path, ckpt, device)
    H = CONFIGS[name]["hidden_size"]
    rng = np.random.default_rng(11)
    for impl in hf_layer.IMPLS:
        for offset in (0, 7):
            x = hf_layer.normal_bf16(rng, (20, H))
            pos = offset + np.arange(20)
            attn, out = ref.prefill(x, pos, impl)
            m_attn, m_out = oracle.run(x, impl, position_ids=torch.as_tensor(pos, device=device)[None])
            same(attn, m_attn, f"{name} prefill {impl} offset {offset}: attn")
            same(out, m_out, f"{name} prefill {impl} offset {offset}: out")
        for L in (0, 1, 40):
            for T in (1, 3):
                ctx, x = hf_layer.normal_bf16(rng, (L, H)), hf_layer.normal_bf16(rng, (T, H))
                k_ctx, v_ctx = ref.context_kv(ctx) if L else (None, None)
                attn, out, k_new, v_new = ref.decode(x, k_ctx, v_ctx, impl)
                cache = oracle.DynamicCache(config=oracle.config)
                if L:
                    oracle.run(ctx, impl, cache=cache)
                    lay = cache.layers[LAYER]
                    same(ref.to_bits(lay.keys[0]), ref.to_bits(k_ctx[0]), f"{name} L={L}: context keys")
                    same(ref.to_bits(lay.values[0]), ref.to_bits(v_ctx[0]), f"{name} L={L}: context values")
                m_attn, m_out = oracle.run(x, impl, cache=cache)
                lay = cache.layers[LAYER]
                what = f"{name} decode {impl} L={L} T={T}"
                same(attn, m_attn, what + ": attn")
                same(out, m_out, what + ": out")
                same(k_new, ref.to_bits(lay.keys[0, :, L:]), what + ": k_new")
                same(v_new, ref.to_bits(lay.values[0, :, L:]), what + ": v_new")
    print(f"ok   {name}: hf_layer's layer == the model's forward, bit for bit "
          f"(prefill offsets 0/7, decode L 0/1/40 x T 1/3, eager and sdpa)")


def check_cli(d, device):
    """inputs -> a fake tessel output (HF eager's, cache written in place) -> compare."""
    script = os.path.join(HERE, "hf_layer.py")
    cfg_path = os.path.join(d, "config.json")
    json.dump(CONFIGS["qwen3"], open(cfg_path, "w"))
    ckpt = os.path.join(d, "ck")
    mc.write_checkpoint(cfg_path, ckpt, [LAYER], seed=4, log=lambda _: None)
    for mode, extra in (("prefill", ["--T", "300", "--offset", "3"]),
                        ("decode", ["--T", "2", "--batch", "3", "--capacity", "64"])):
        out = os.path.join(d, mode)
        subprocess.run([sys.executable, script, "inputs", "--checkpoint", ckpt, "--layer", str(LAYER),
                        "--mode", mode, "--seed", "5", "--device", device, "--out", out] + extra,
                       check=True, stdout=subprocess.DEVNULL)
        hf = {k: v for k, (_, v) in st.read(os.path.join(out, "hf_eager.safetensors")).items()}
        inp = {k: v for k, (_, v) in st.read(os.path.join(out, "inputs.safetensors")).items()}
        tensors = [("attn", "BF16", hf["attn"]), ("out", "BF16", hf["out"])]
        if mode == "decode":
            for kv in "kv":
                cache = inp[f"{kv}_cache"].copy()
                for b, L in enumerate(inp["len"]):
                    cache[b, :, L:L + 2] = hf[f"{kv}_new"][b]
                tensors.append((f"{kv}_cache", "BF16", cache))
        st.write(os.path.join(out, "tessel.safetensors"), tensors)
        r = subprocess.run([sys.executable, script, "compare", "--out", out], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
        rep = json.load(open(os.path.join(out, "compare.json")))
        for o, entry in rep["outputs"].items():
            assert entry["tessel_vs_eager"]["differ"] == 0, (mode, o)
        if mode == "prefill":
            assert len(rep["outputs"]["out"]["rel_rms_by_block"]["tessel_vs_sdpa"]) == 2
    print("ok   the CLI end to end: inputs, fake tessel outputs, compare (prefill T=300, decode B=3 T=2)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()
    failed = 0
    checks = [("qwen3", lambda d: check_against_model("qwen3", d, args.device)),
              ("qwen2", lambda d: check_against_model("qwen2", d, args.device)),
              ("cli", lambda d: check_cli(d, args.device))]
    for name, f in checks:
        with tempfile.TemporaryDirectory() as d:
            try:
                f(d)
            except Exception as e:  # noqa: BLE001 -- report every failure, then go on
                failed += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
