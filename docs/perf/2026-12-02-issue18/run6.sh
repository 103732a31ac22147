#!/bin/bash
# Issue 18, device run 6 (one H200), after d1ccd96 (attention row statistics, P recomputed
# from them) and the decompose merge of duplicate attentions:
#   1. tessel check on the GPU (GPU vs executor bit for bit in exact, the reference in
#      every profile) of the small layer's grads and train steps at T = 7 and 33;
#   2. compute-sanitizer memcheck and racecheck on the small grads step (fast: the
#      attention kernel writing its row statistics);
#   3. benchmarks: the Qwen3-14B grads and train steps at T = 2048 (R 16), fast;
#   4. the PEFT comparison at T = 2048 (tests/gpu/run_lora_checks.sh), fast.
# Usage (device): bash docs/perf/2026-12-02-issue18/run6.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
[ -z "$PEFT" ] && for p in exact invariant fast; do
  for T in 7 33; do
    TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_grads --profile $p --dim T=$T --dim R=4 --fill pos=iota:0
  done
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
done
[ -z "$PEFT" ] && for tool in memcheck racecheck; do
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/lora_layer_small.tsl --step qwen3_grads --profile fast --dim T=33 --dim R=4 --fill pos=iota:0 -o /tmp/san.safetensors
done
[ -z "$PEFT" ] && for s in grads train; do
  TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step $s --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
done
# Part 4 runs when PEFT=1 (a second device call: the whole script passes 600 s).
if [ -n "$PEFT" ]; then
  PROFILES="fast" TMO=400 t peft bash tests/gpu/run_lora_checks.sh $B /tmp/lora qwen3_14b
  mkdir -p $OUT/lora; cp /tmp/lora/*.log /tmp/lora/summary.txt $OUT/lora/ 2>/dev/null
  for d in /tmp/lora/*/; do n=$(basename $d); [ $n = checkpoint ] && continue; [ $n = weights ] && continue; mkdir -p $OUT/lora/$n; cp $d/meta.json $d/compare.*.json $OUT/lora/$n/ 2>/dev/null; done
  exit 0
fi
