#!/bin/bash
# Issue 18, device run 12 (one H200): row reductions hold up to 32 elements per thread in
# registers, and a short row read across memory (GQA's head sums of the attention backward:
# the heads permuted to the last axis) gets one thread per row, a warp's lanes on 32
# consecutive rows, so every load is contiguous across the warp.
#   1. tessel check on the GPU: prefill_grads of attention_bench.tsl (T = 40), grad_small's
#      attention_grads (T = 40, 296) and the small LoRA layer's qwen3_grads, per profile;
#   2. compute-sanitizer memcheck and racecheck on prefill_grads (T = 40, fast);
#   3. bench: prefill_grads at T = 2048 and 4096, the Qwen3-14B LoRA grads and train steps.
# Usage (device): bash docs/perf/2026-12-03-issue18/run12.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact invariant fast; do
  [ $p != exact ] && TMO=120 t check $B check tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=40
  for T in 40 296; do
    TMO=120 t check $B check tests/programs/grad_small.tsl --step attention_grads --profile $p --dim T=$T
  done
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_grads --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
done
for tool in memcheck racecheck; do
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=40 -o /tmp/san.safetensors
done
for T in 2048 4096; do
  TMO=200 t bench $B bench tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=$T
done
for s in grads train; do
  TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step $s --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
done
