#!/bin/bash
# Issue 18, device run 10 (one H200): row reductions with each thread's chunks held in
# registers (lower/rows.rs resident_rows: every row value loaded and computed once, the
# sums in the looped kernel's order). Old binary (d15fa8a + room commits, looped rows) and
# new side by side in one run:
#   1. tessel check on the GPU: the small layer's grads and train steps, the attention
#      backward of grad_small at T = 40 and 296 (sub-warp rows, rows past a warp with the
#      shared-memory combine, chunks past the row's end), the small prefill layer;
#   2. compute-sanitizer memcheck and racecheck on attention_grads T = 296 (fast);
#   3. bench, old then new: the Qwen3-14B LoRA grads and train steps (T = 2048, R = 16) and
#      the Qwen3-14B prefill layer (T = 2048), fast.
# Usage (device): bash docs/perf/2026-12-03-issue18/run10.sh   (writes under $OUT)
B=./target/release/tessel_s
OLD=./target/release/tessel_old_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact invariant fast; do
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_grads --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  for T in 40 296; do
    TMO=120 t check $B check tests/programs/grad_small.tsl --step attention_grads --profile $p --dim T=$T
  done
  TMO=120 t check $B check tests/programs/layer_small.tsl --step qwen3 --profile $p --dim T=37
done
for tool in memcheck racecheck; do
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=296 -o /tmp/san.safetensors
done
for bin in $OLD $B; do
  for s in grads train; do
    TMO=200 t bench $bin bench examples/lora/qwen3_14b_lora.tsl --step $s --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
  done
  TMO=200 t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
done
