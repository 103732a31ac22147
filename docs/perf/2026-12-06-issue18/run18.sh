#!/bin/bash
# Device run 18: main after merging the Target features / sm_90a header / ring layout split
# (target-ring) and the per-warp executor (exec-warps). Does the `.target sm_90a` PTX load and
# run, and does the GPU still give the new executor's bits in `exact`?
#   tessel check on the GPU (exact: GPU == executor bit for bit; fast: judged by the reference)
#   and `tessel fuzz` on the GPU (exact, GPU against the executor).
# Usage (device): bash docs/perf/2026-12-06-issue18/run18.sh   (writes under $OUT)
B=${B:-./target/release/tessel_s}
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; timeout ${TMO:-120} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact fast; do
  t check $B check examples/qwen3_14b/swiglu.tsl --profile $p --dim T=64
  t check $B check examples/qwen3_14b/rms_norm.tsl --profile $p --dim T=64
  t check $B check tests/programs/layer_small.tsl --step qwen3 --profile $p --dim T=40 --fill pos=iota:0
  t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
done
t check $B check tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=130
TMO=150 t fuzz $B fuzz --count 60 --seed 430000 --profile exact
