#!/bin/bash
# Device run 16 (one GPU; the card is in logs/nvidia-smi.txt): this session's changes against
# the binary they started from, on the same card in the same run.
#   B  = target/release/tessel_s      (this session: exp_f32 and rolled 16-column sub-blocks
#        in the attention backward, dkv blocks of 64; silu_f32 for 16-bit silu results)
#   B0 = target/release/tessel_base_s (main at 0e51af4, the session's start)
#   1. tessel check on the GPU (B): the attention backward (grad_small attention_grads T = 130,
#      296; prefill_grads at the Qwen3-14B head shape T = 200) in invariant and fast; the
#      small LoRA layer's train step and the small Qwen3 layer in exact, invariant, fast;
#      swiglu at T = 64 in every profile;
#   2. two runs of prefill_grads (T = 300) give the same bits (invariant, fast);
#   3. compute-sanitizer memcheck and racecheck on the backward kernels (B);
#   4. bench, B0 then B: prefill_grads T = 2048, 4096; the Qwen3-14B LoRA train step
#      T = 2048; the Qwen3-14B prefill layer T = 2048 (the gate and up GEMMs); torch SDPA's
#      backward in the same run;
#   5. the Qwen3-14B prefill layer against transformers (tests/gpu/run_hf_checks.sh, fast).
# Usage (device): bash docs/perf/2026-12-06-issue18/run16.sh   (writes under $OUT)
B=./target/release/tessel_s
B0=./target/release/tessel_base_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for bin in $B0 $B; do
  for T in 2048 4096; do
    TMO=120 t bench $bin bench tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=$T
  done
  TMO=150 t bench $bin bench examples/lora/qwen3_14b_lora.tsl --step train --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
  TMO=150 t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
done
TMO=120 t sdpa python3 tests/gpu/sdpa_bench.py $L/sdpa_backward.json --backward
for p in invariant fast; do
  for T in 130 296; do
    TMO=90 t check $B check tests/programs/grad_small.tsl --step attention_grads --profile $p --dim T=$T
  done
  TMO=120 t check $B check tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=200
done
for p in exact invariant fast; do
  TMO=90 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  TMO=90 t check $B check tests/programs/layer_small.tsl --step qwen3 --profile $p --dim T=40 --fill pos=iota:0
  TMO=90 t check $B check examples/qwen3_14b/swiglu.tsl --profile $p --dim T=64
done
for p in invariant fast; do
  for i in 1 2; do
    TMO=60 t rerun $B run tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=300 --seed 5 -o /tmp/rr_${p}_$i.safetensors
  done
  cmp /tmp/rr_${p}_1.safetensors /tmp/rr_${p}_2.safetensors >> $L/rerun.txt 2>&1 && echo "prefill_grads T=300 $p: two runs identical" >> $L/rerun.txt
done
for tool in memcheck racecheck; do
  TMO=120 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=130 -o /tmp/san.safetensors
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=72 -o /tmp/san2.safetensors
done
CASES=prefill TESSEL_ARGS="--profile fast" timeout 150 bash tests/gpu/run_hf_checks.sh $B $OUT/hf qwen3_14b > $L/hf.txt 2>&1; echo "rc $?" >> $L/hf.txt
cp $OUT/hf/summary.txt $L/hf_summary.txt 2>/dev/null
rm -rf $OUT/hf
