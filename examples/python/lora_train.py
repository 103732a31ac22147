"""Trains rank-16 LoRA adapters on a small random-weight Qwen3 (transformers'
Qwen3ForCausalLM) with PEFT's stock LoRA layer and with tessel's (``tessel.lora.apply``), each
at two micro-batch sizes over the same batches, and reports what is bit-identical.

    python3 examples/python/lora_train.py [--steps 200] [--out DIR] [--grad-order sequence|call]

Each run: the same initial weights and adapters (B initialised normal, not zero, so the
adapters matter from the first step), AdamW (lr 1e-3), a batch of 8 sequences of 64 random
tokens per step, the mean over the batch of each sequence's mean cross-entropy; with
micro-batch size m the batch is cut into 8 / m micro-batches whose summed sequence losses
(divided by 8, a power of two: exact) are backpropagated one after another, gradients
accumulating, then one optimizer step. The loss of a step is the mean of the 8 sequence
losses, taken once from all of them in sequence order, so it is one function of the
sequence losses at every micro-batch size.

What is compared, and what to expect (docs/numerics.md):
- per-sequence losses at the initial weights, computed inside micro-batches of 8 and of 1
  (the forward's batch invariance: tessel's ``invariant`` layers give each row the same bits
  whatever the batch; cuBLAS under PEFT's stock layer may pick another kernel per batch
  size);
- the loss curves of the two micro-batch sizes, step by step. The adapters' gradients are
  sums over the batch's tokens. PEFT's layer leaves them to torch's autograd, which adds
  each micro-batch's sum to ``.grad``: another association per micro-batch size, so its
  curves part after the first update. tessel's layer with ``grad_order="sequence"`` (the
  default here) adds each sequence's part in sequence order, so the accumulated gradient has
  the same bits at every micro-batch size — and so does the whole run, if every other op of
  the model (transformers' attention, norms, lm_head under cuBLAS) gives each sequence the
  same bits at either micro-batch size, which this example measures rather than assumes.
  ``--grad-order call`` shows tessel's layer under autograd's sums, parting like PEFT's.

Writes DIR/lora_train.json (curves and statistics) when --out is given. Needs a GPU, torch,
transformers 5.x, peft, and the tessel package (pip install .).
"""

import argparse
import copy
import json
import math
import os
import time

import torch

import tessel

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--out", default=None)
p.add_argument("--profile", default="invariant")
p.add_argument("--grad-order", default="sequence", choices=["sequence", "call"])
args = p.parse_args()

from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import Qwen3Config, Qwen3ForCausalLM  # noqa: E402

torch.manual_seed(0)
config = Qwen3Config(
    vocab_size=1024, hidden_size=256, intermediate_size=768, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=256,
    attn_implementation="sdpa",
)
base = Qwen3ForCausalLM(config).to(device="cuda", dtype=torch.bfloat16)
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
template = get_peft_model(base, lora)
for name, param in template.named_parameters():
    if "lora_B" in name:
        torch.nn.init.normal_(param, std=0.02)

BATCH, SEQ = 8, 64
gen = torch.Generator(device="cuda").manual_seed(1)
batches = [torch.randint(0, config.vocab_size, (BATCH, SEQ), device="cuda", generator=gen)
           for _ in range(args.steps)]


def model_for(kind):
    m = copy.deepcopy(template)
    if kind == "tessel":
        swapped = tessel.lora.apply(m, profile=args.profile, grad_order=args.grad_order)
        assert len(swapped) == 7 * config.num_hidden_layers, swapped
    return m


def sequence_losses(m, ids):
    logits = m(input_ids=ids).logits.float()
    lp = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1), reduction="none")
    return lp.view(ids.shape[0], -1).mean(dim=1)


def train(kind, micro):
    m = model_for(kind)
    opt = torch.optim.AdamW([q for q in m.parameters() if q.requires_grad], lr=1e-3)
    curve = []
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for ids in batches:
        opt.zero_grad(set_to_none=True)
        losses = []
        for i in range(0, BATCH, micro):
            lp = sequence_losses(m, ids[i : i + micro])
            (lp.sum() / BATCH).backward()
            losses.append(lp.detach())
        opt.step()
        curve.append(float(torch.cat(losses).mean()))
    torch.cuda.synchronize()
    return curve, (time.perf_counter() - t0) / len(batches) * 1e3


report = {"steps": args.steps, "profile": args.profile, "grad_order": args.grad_order, "runs": {},
          "forward": {}}
with torch.no_grad():
    ids = batches[0]
    for kind in ("peft", "tessel"):
        m = model_for(kind)
        whole = sequence_losses(m, ids)
        alone = torch.cat([sequence_losses(m, ids[i : i + 1]) for i in range(BATCH)])
        same = torch.equal(whole, alone)
        report["forward"][kind] = {
            "per_sequence_losses_bit_identical_batch_8_vs_1": same,
            "max_abs_difference": float((whole - alone).abs().max()),
        }
        print(f"{kind:>6}: per-sequence losses, batch of 8 vs one at a time: "
              f"{'bit-identical' if same else 'differ'} (max |diff| {float((whole - alone).abs().max()):.3e})")

# The accumulated gradients of one batch at micro-batch sizes 8 and 2, adapter by adapter: the
# curves below can only be identical if these are.
report["gradients"] = {}
for kind in ("peft", "tessel"):
    grads = {}
    for micro in (8, 2):
        m = model_for(kind)
        for i in range(0, BATCH, micro):
            (sequence_losses(m, batches[0][i : i + micro]).sum() / BATCH).backward()
        grads[micro] = {n: q.grad for n, q in m.named_parameters() if q.requires_grad}
    differ = [n for n in grads[8] if not torch.equal(grads[8][n], grads[2][n])]
    report["gradients"][kind] = {"adapters": len(grads[8]), "differ": differ}
    print(f"{kind:>6}: accumulated gradients of batch 0, micro-batch 8 vs 2: "
          f"{len(grads[8]) - len(differ)} of {len(grads[8])} adapter tensors bit-identical"
          + (f" (first that differs: {differ[0]})" if differ else ""))

for kind in ("peft", "tessel"):
    curves = {}
    for micro in (8, 2):
        curve, ms = train(kind, micro)
        curves[micro] = curve
        report["runs"][f"{kind} micro-batch {micro}"] = {"curve": curve, "ms_per_step": ms}
        print(f"{kind:>6} micro-batch {micro}: loss {curve[0]:.6f} -> {curve[-1]:.6f}, {ms:.1f} ms/step")
    a, b = curves[8], curves[2]
    first_diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    worst = max(abs(x - y) for x, y in zip(a, b))
    report["runs"][f"{kind} comparison"] = {"first_step_that_differs": first_diff, "max_abs_difference": worst}
    where = "never" if first_diff is None else f"from step {first_diff}"
    print(f"{kind:>6}: curves of micro-batch 8 and 2 differ {where}; max |diff| {worst:.3e}")

t, pe = report["runs"]["tessel micro-batch 8"]["curve"], report["runs"]["peft micro-batch 8"]["curve"]
report["tessel_vs_peft_max_abs_loss_difference"] = max(abs(x - y) for x, y in zip(t, pe))
print(f"tessel vs PEFT (micro-batch 8): max |loss diff| over {args.steps} steps "
      f"{report['tessel_vs_peft_max_abs_loss_difference']:.3e}; final {t[-1]:.6f} vs {pe[-1]:.6f}")
assert all(math.isfinite(x) for x in t), "tessel's loss is not finite"
if args.out:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "lora_train.json"), "w") as f:
        json.dump(report, f, indent=1)
