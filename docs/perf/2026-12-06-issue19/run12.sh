#!/bin/bash
# Device run 12 of issue 19 (fourth session): the SIMT GEMV's columns per warp at M = 1
# (Nsight Compute, run 10: the q and down GEMVs stall on L1TEX loads with 2.4 CTAs per SM
# resident, DRAM at 66-75%). B = this session's binary (columns chosen for >= 2 CTAs per
# SM: 4 at N = 5120); X3 = >= 8 CTAs per SM (1 column, unroll 8, 1280 CTAs at N = 5120);
# X4 = >= 4 per SM (2 columns at N = 5120, 1 at N = 1024). Alternated twice. Then torch
# SDPA at T = 2048, 4096, 16384 beside tessel's attention at 2048 and 4096 (16384: run 11).
# Usage (device): bash docs/perf/2026-12-06-issue19/run12.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
D="examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --rounds 21 --dim B=1 --fill len=iota:4095"
for round in 1 2; do
  for bin in $B ./target/release/tessel_x3_s ./target/release/tessel_x4_s; do
    t decode $bin bench $D
  done
done
t check ./target/release/tessel_x3_s check examples/qwen3_14b/layer.tsl --step decode --profile exact --dim B=1 --dim T=1 --dim S=64 --fill len=iota:40
for T in 2048 4096; do
  t attention $B bench tests/programs/attention_bench.tsl --step prefill --profile fast --dim T=$T
done
timeout 150 python3 tests/gpu/sdpa_bench.py $L/sdpa.json > $L/sdpa.txt 2>&1
