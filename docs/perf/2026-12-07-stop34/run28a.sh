#!/bin/bash
# Device run 28a (stop 34): what run 27 did not reach — the MN-major wgmma tiles' sanitizers
# and benchmarks, the LoRA grads step in `fast`, and the Qwen3-14B decode layer at B = 1 and 8
# as this stop's baseline (binary of 716af2b stripped to tessel_mnb_s).
# Usage (device): bash docs/perf/2026-12-07-stop34/run28a.sh   (writes under $OUT/logs)
B=./target/release/tessel_mnb_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
P="tests/programs/matmul_mn.tsl --profile fast"
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/m.safetensors
TMO=120 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $P --step xw --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/r.safetensors
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --no-wgmma-pingpong --dim M=1030 --dim K=136 --dim N=4101 -o /tmp/m2.safetensors
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $P --step xw --no-wgmma-pingpong --wgmma-tma --dim M=1030 --dim K=136 --dim N=4104 -o /tmp/m3.safetensors
G="--dim M=2048 --dim K=5120 --dim N=5120"
t bench $B bench $P --step xw $G
t bench $B bench $P --step xwt $G
t bench $B bench $P --step xw $G --no-wgmma-pingpong
TMO=150 t bench $B bench examples/lora/qwen3_14b_lora.tsl --step grads --profile fast --dim T=2048 --dim R=16 --fill pos=iota:0
for b in 1 8; do
  TMO=60 t decode $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21
done
