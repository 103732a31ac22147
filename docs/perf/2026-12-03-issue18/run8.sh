#!/bin/bash
# Issue 18, device run 8 (one H200), after af81daa (tensor-core GEMMs read strided views
# in place: the unfused attention backward's batched matmuls on mma.sync, not SIMT):
#   1. tessel check on the GPU of step heads of tests/programs/matmul.tsl (odd shapes) and
#      of the small layer's grads and train steps, every profile;
#   2. compute-sanitizer memcheck and racecheck on heads and the small grads step (fast);
#   3. benchmarks: the Qwen3-14B grads and train steps at T = 2048 (R 16), fast;
#   4. (PEFT=1, a second call) the PEFT comparison at T = 2048 and ten AdamW steps.
# Usage (device): bash docs/perf/2026-12-03-issue18/run8.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
if [ -z "$PEFT" ]; then
  for p in exact invariant fast; do
    for s in "70 104 33" "17 64 130" "128 128 2048"; do set -- $s
      TMO=100 t check $B check tests/programs/matmul.tsl --step heads --profile $p --dim M=$1 --dim K=$2 --dim N=$3
    done
    TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_grads --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
    TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  done
  for tool in memcheck racecheck; do
    TMO=100 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/matmul.tsl --step heads --profile fast --dim M=70 --dim K=104 --dim N=33 -o /tmp/san0.safetensors
    TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/lora_layer_small.tsl --step qwen3_grads --profile fast --dim T=33 --dim R=4 --fill pos=iota:0 -o /tmp/san.safetensors
  done
  for s in grads train; do
    TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step $s --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
  done
  exit 0
fi
PROFILES="fast" TMO=330 t peft bash tests/gpu/run_lora_checks.sh $B /tmp/lora qwen3_14b
mkdir -p $OUT/lora; cp /tmp/lora/summary.txt $OUT/lora/ 2>/dev/null
for d in /tmp/lora/*/; do n=$(basename $d); [ $n = checkpoint ] && continue; [ $n = weights ] && continue; mkdir -p $OUT/lora/$n; cp $d/meta.json $d/compare.*.json $OUT/lora/$n/ 2>/dev/null; done
python3 tests/gpu/lora_train_compare.py --tessel $B --checkpoint /tmp/lora/checkpoint --config examples/qwen3_14b/config.json \
  --layer 1 --T 2048 --R 16 --steps 10 --profile fast --out /tmp/train --json $OUT/train_compare.json > $L/train_compare.txt 2>&1
echo "rc $?" >> $L/train_compare.txt
