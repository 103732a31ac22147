"""``tessel.models`` on the GPU (issue 20): transformers Qwen3 and Qwen2 models whose decoder
layers run as tessel's compiled steps.

1. greedy tokens: a small random-weight Qwen3 and Qwen2 (head_dim 128), a prompt of 12
   tokens, 24 new tokens: ``tessel.models.Qwen(model).generate`` against
   ``model.generate(do_sample=False)``, in ``fast`` and ``invariant``; the first step's
   last-position logits compared too (rel-RMS);
2. the weights are the model's tensors: no allocation of a weight's size when the layers are
   attached;
3. time on the real Qwen3-14B configuration with 2 decoder layers (random weights): prompt
   128, 64 new tokens, greedy, B = 1: transformers' generate (sdpa, its default dynamic
   cache) against tessel's, milliseconds per new token and per layer.

Prints PASS/FAIL lines; writes OUT/python_models.json.
Usage (device): python3 tests/gpu/python_models.py OUTDIR
"""
import gc
import sys
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

import tessel
from python_checks import Report, rel_rms

OUT = sys.argv[1]
R = Report(OUT, "python_models")
report = R.data
verdict = R.verdict




def small(kind):
    torch.manual_seed(0)
    common = dict(vocab_size=512, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512, attn_implementation="sdpa")
    if kind == "qwen3":
        m = Qwen3ForCausalLM(Qwen3Config(hidden_size=256, head_dim=128, **common))
    else:
        m = Qwen2ForCausalLM(Qwen2Config(hidden_size=512, **common))
    m = m.to(device="cuda", dtype=torch.bfloat16).eval()
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


def hf_generate(m, ids, n):
    return m.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)


# -- 1. greedy tokens, 2. no weight copies ------------------------------------------------------

for kind in ("qwen3", "qwen2"):
    m = small(kind)
    ids = torch.randint(0, 512, (1, 12), device="cuda", generator=torch.Generator("cuda").manual_seed(3))
    want = hf_generate(m, ids, 24)
    for profile in ("fast", "invariant"):
        gc.collect()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        lm = tessel.models.Qwen(m, profile=profile)
        grew = torch.cuda.memory_allocated() - before
        if profile == "fast":
            # Run 19 saw -3282432 bytes here for qwen2 (the previous model's tensors freed in
            # between, before gc.collect() was added): nothing allocated is <= 0.
            verdict(f"{kind}: attaching allocates nothing", grew <= 0, f"{grew} bytes")
        got = lm.generate(ids, 24)
        same = int((got[0, 12:] == want[0, 12:]).sum())
        # The first step's logits at the last prompt position.
        with torch.no_grad():
            ref = m(input_ids=ids).logits[0, -1].float()
            caches = lm.new_cache(1, 12)
            x = lm.forward(m.model.embed_tokens(ids), torch.zeros(1, dtype=torch.int32, device="cuda"), caches)
            mine = m.lm_head(m.model.norm(x[:, -1:]))[0, -1].float()
        err = rel_rms(mine, ref)
        verdict(f"{kind} {profile}: 24 greedy tokens as transformers'", same == 24,
                f"{same}/24 equal, first-step logits rel-RMS {err:.2e}")
        report["checks"][f"{kind} {profile}: 24 greedy tokens as transformers'"]["logits_rel_rms"] = err

# -- 3. time on the Qwen3-14B configuration, 2 layers -------------------------------------------

cfg = Qwen3Config.from_pretrained("examples/qwen3_14b")
cfg.num_hidden_layers = 2
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
with torch.device("cuda"):
    big = Qwen3ForCausalLM(cfg).to(torch.bfloat16).eval()
for p in big.parameters():
    p.data.normal_(0, 0.02)
big.generation_config.eos_token_id = None
big.generation_config.pad_token_id = 0
ids = torch.randint(0, cfg.vocab_size, (1, 128), device="cuda")


def timed(f, n):
    f(8)  # warm-up (compiles, loads modules, allocates)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = f(n)
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


lm = tessel.models.Qwen(big, profile="fast")
hf_out, hf_ms = timed(lambda n: hf_generate(big, ids, n), 64)
ts_out, ts_ms = timed(lambda n: lm.generate(ids, n, capacity=192), 64)
report["timings"] = {
    "transformers_generate_ms_64_tokens": hf_ms,
    "tessel_generate_ms_64_tokens": ts_ms,
    "tokens_equal": int((hf_out[0, 128:] == ts_out[0, 128:]).sum()),
}
print(f"Qwen3-14B config, 2 layers, prompt 128, 64 new tokens (B=1): transformers {hf_ms:.1f} ms "
      f"({hf_ms / 64:.2f} ms/token), tessel {ts_ms:.1f} ms ({ts_ms / 64:.2f} ms/token); "
      f"{report['timings']['tokens_equal']}/64 tokens equal")

sys.exit(R.finish())
