#!/bin/bash
# Device run 4 of issue 19's second session: the final tile choice (128 x 256 where it
# fills the SMs and N > 128, else 128 x 128 with 4 stages), the Qwen3-14B and Qwen3-32B
# prefill layers at T = 2048 (fast, one CUDA graph), beside run 2's binary on the same card.
#   B = target/release/tessel_s (final), R2 = target/release/tessel_r2_s (run 2)
# Usage (device): bash docs/perf/2026-12-06-issue19/run4.sh   (writes under $OUT)
B=./target/release/tessel_s
R2=./target/release/tessel_r2_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; timeout ${TMO:-200} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
M="--profile fast"
t check $B check tests/programs/layer_small.tsl --step qwen3 $M --dim T=300 --fill pos=iota:0
for bin in $R2 $B; do
  t bench $bin bench examples/qwen3_14b/layer.tsl --step prefill $M --dim T=2048 --fill pos=iota:0
  t bench $bin bench examples/qwen3_32b/layer.tsl --step prefill $M --dim T=2048 --fill pos=iota:0
done
