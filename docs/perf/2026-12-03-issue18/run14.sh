#!/bin/bash
# Issue 18, device run 14 (one H200): the fused attention backward (fuse rule 10: the
# attention_dq and attention_dkv kernels, scores recomputed block by block, masked blocks
# skipped).
#   1. tessel check on the GPU: grad_small's attention_grads (T = 40, 130, 296), the
#      prefill backward at the head shape (T = 40, 200), the small LoRA layer's
#      grads and train steps, per profile;
#   2. two runs of the same step give the same bits (fast, invariant);
#   3. compute-sanitizer memcheck and racecheck on both new kernels;
#   4. bench: prefill_grads at T = 2048 and 4096 beside torch SDPA's backward in the same
#      run, and the Qwen3-14B LoRA grads and train steps at T = 2048.
# Usage (device): bash docs/perf/2026-12-03-issue18/run14.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact invariant fast; do
  for T in 40 130 296; do
    TMO=120 t check $B check tests/programs/grad_small.tsl --step attention_grads --profile $p --dim T=$T
  done
  for T in 40 200; do
    [ $p != exact ] && TMO=150 t check $B check tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=$T
  done
  for s in qwen3_grads qwen3_train; do
    TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step $s --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  done
done
for p in invariant fast; do
  for i in 1 2; do
    TMO=60 t rerun $B run tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=300 --seed 5 -o /tmp/rr_${p}_$i.safetensors
  done
  cmp /tmp/rr_${p}_1.safetensors /tmp/rr_${p}_2.safetensors >> $L/rerun.txt 2>&1 && echo "prefill_grads T=300 $p: two runs identical" >> $L/rerun.txt
done
for tool in memcheck racecheck; do
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=130 -o /tmp/san.safetensors
  TMO=200 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=72 -o /tmp/san2.safetensors
done
TMO=200 t sdpa python3 tests/gpu/sdpa_bench.py $L/sdpa_backward.json --backward
for T in 2048 4096; do
  for p in fast invariant; do
    TMO=200 t bench $B bench tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=$T
  done
done
for s in grads train; do
  TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step $s --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
done
