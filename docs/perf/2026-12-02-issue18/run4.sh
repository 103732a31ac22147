#!/bin/bash
# Issue 18, device run 4 (one H200): AdamW and whole-tensor updates on the GPU.
#   1. ten AdamW steps of a LoRA pair (R 16, K = N = 4096) against torch.optim.AdamW
#      (tests/gpu/adamw_compare.py), exact and fast; the two profiles' final states compared;
#   2. tessel check on the GPU (GPU vs executor, and the reference) of the small layer's
#      `qwen3_train` step and of every whole-update program, in every profile;
#   3. compute-sanitizer memcheck and racecheck on the AdamW step and the whole updates;
#   4. benchmarks: the Qwen3-14B `train` step at T = 2048 (R 16), the seed shapes again
#      (after the invariant split-K change), the AdamW step alone.
# Usage (device): bash docs/perf/2026-12-02-issue18/run4.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
# 1.
for p in exact fast; do
  TMO=150 t adamw python3 tests/gpu/adamw_compare.py --tessel $B --profile $p --out /tmp/adamw_$p --json $L/adamw_$p.json
done
sha256sum /tmp/adamw_exact/out10.safetensors /tmp/adamw_fast/out10.safetensors >> $L/adamw.txt
# 2.
for p in exact invariant fast; do
  TMO=120 t check $B check tests/programs/lora_layer_small.tsl --step qwen3_train --profile $p --dim T=33 --dim R=4 --fill pos=iota:0
  for s in elementwise transposed normalized shifted gathered squared chain; do
    TMO=60 t check $B check tests/programs/whole_update.tsl --step $s --profile $p --dim M=96 --dim N=96
  done
done
# 3.
for tool in memcheck racecheck; do
  TMO=100 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run examples/lora/adamw.tsl --dim R=16 --dim K=520 --dim N=264 -o /tmp/san.safetensors
  TMO=100 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/whole_update.tsl --dim M=96 --dim N=96 -o /tmp/san/w.safetensors
  TMO=150 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/lora_layer_small.tsl --step qwen3_train --dim T=33 --dim R=4 --fill pos=iota:0 -o /tmp/san.safetensors
done
# 4.
for p in fast invariant; do
  TMO=200 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step train --profile $p --dim T=2048 --dim R=16 --fill pos=iota:0
done
TMO=60 t bench $B bench examples/lora/adamw.tsl --dim R=16 --dim K=4096 --dim N=4096
for m in 1 8 64 256; do
  TMO=60 t bench_seed $B bench examples/lora/lora_grad_f32.tsl --profile invariant --dim M=$m --dim K=4096 --dim N=2048 --dim R=8
done
tar czf $OUT/logs.tgz -C $OUT logs
