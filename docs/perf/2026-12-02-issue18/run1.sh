#!/bin/bash
# Issue 18, device run 1 (one H200): the training steps from `grad` on the GPU.
#   1. tessel check (GPU vs executor: bits in exact; both judged by the dtype-following
#      reference) of the gradient programs and the LoRA examples, every profile;
#   2. batch invariance of the LoRA delta (invariant): 4 shapes x 5 seeds x 5 sub-batches
#      against M = 2048, forward (ΔY, U) and backward (dX and every row tensor);
# Usage (device): bash docs/perf/2026-12-02-issue18/run1.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
D="--dim M=8192 --dim K=4096 --dim N=4096 --dim R=16"
# 1. checks
for p in exact invariant fast; do
  TMO=120 t check $B check tests/programs/grad_small.tsl --profile $p --dim T=37
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --profile $p --dim T=7 --dim R=4 --fill pos=iota:0
  TMO=120 t check $B check examples/lora/lora_delta.tsl --profile $p --dim M=300 --dim K=512 --dim N=256 --dim R=16
  TMO=120 t check $B check examples/lora/lora_delta.tsl --profile $p --dim M=1 --dim K=136 --dim N=72 --dim R=8
  TMO=120 t check $B check examples/lora/lora_grad_f32.tsl --profile $p --dim M=257 --dim K=384 --dim N=200 --dim R=16
done
# 2. invariance probes
for kn in "128 64" "1024 512" "2048 1024" "4096 2048"; do
  set -- $kn
  for s in forward backward; do
    TMO=240 t invariance $B invariance examples/lora/lora_delta.tsl --step $s --profile invariant --batch-dim M --sizes 1,8,64,256,1000,2048 --seeds 5 --dim K=$1 --dim N=$2 --dim R=16
  done
done
tar czf $OUT/logs.tgz -C $OUT logs
