#!/bin/bash
# Issue 18, device run 2 (one H200): reruns, sanitizers and benchmarks of the training steps.
#   3. run-to-run identity: the backward at M = 8192 twice, every output's sha256;
#   4. compute-sanitizer memcheck and racecheck on the new steps;
#   5. tessel bench of the LoRA delta forward+backward and the seed shapes.
# Usage (device): bash docs/perf/2026-12-02-issue18/run2.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
D="--dim M=8192 --dim K=4096 --dim N=4096 --dim R=16"
# 3. reruns
for i in 1 2; do
  TMO=120 t rerun $B run examples/lora/lora_delta.tsl --step backward --profile invariant $D --seed 3 -o /tmp/rerun$i.safetensors
  TMO=120 t rerun $B run examples/lora/lora_delta.tsl --step backward --profile fast $D --seed 3 -o /tmp/rerunf$i.safetensors
done
sha256sum /tmp/rerun*.safetensors >> $L/rerun.txt
# 4. sanitizers
for tool in memcheck racecheck; do
  for p in invariant fast; do
    TMO=200 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run examples/lora/lora_delta.tsl --step backward --profile $p --dim M=300 --dim K=520 --dim N=264 --dim R=16 -o /tmp/san.safetensors
    TMO=200 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/lora_layer_small.tsl --step qwen3_grads --profile $p --dim T=33 --dim R=4 --fill pos=iota:0 -o /tmp/san.safetensors
    TMO=200 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/grad_small.tsl --profile $p --dim T=37 -o /tmp/san/g.safetensors
  done
done
# 5. benchmarks
for p in invariant fast; do
  TMO=200 t bench $B bench examples/lora/lora_delta.tsl --profile $p $D
done
for p in exact fast; do
  TMO=200 t bench $B bench examples/lora/lora_grad_f32.tsl --profile $p $D
done
for m in 1 8 64 256; do
  TMO=120 t bench_seed $B bench examples/lora/lora_grad_f32.tsl --profile invariant --dim M=$m --dim K=4096 --dim N=2048 --dim R=8
done
tar czf $OUT/logs.tgz -C $OUT logs
