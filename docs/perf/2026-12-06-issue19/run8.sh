#!/bin/bash
# Device run 8 of issue 19 (third session), same binary as run 7 (B = tessel_s), on the
# card run 7 had: the baselines beside it —
#   1. the HF Qwen3-14B prefill layer, plain and torch.compile (bench_torch.py);
#   2. tessel prefill attention (tests/programs/attention_bench.tsl, T = 2048, 4096, 16384)
#      with and without --wgmma-attention, and torch SDPA at 2048 / 4096 (sdpa_bench.py);
#   3. the projections at T = 4096 with --wgmma-pingpong (bench prints cuBLAS beside each
#      GEMM), and the Qwen3-32B prefill layer at T = 2048 (default and the new flags).
# Usage (device): bash docs/perf/2026-12-06-issue19/run8.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=150 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases prefill --rounds 20
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
for T in 2048 4096 16384; do
  t attention $B bench $AB --dim T=$T
  t attention $B bench $AB --dim T=$T --wgmma-attention
done
TMO=60 t sdpa python3 tests/gpu/sdpa_bench.py $L/sdpa.json
t prefill $B bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=4096 --fill pos=iota:0 --wgmma-pingpong
t prefill $B bench examples/qwen3_32b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0
t prefill $B bench examples/qwen3_32b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --wgmma-pingpong --wgmma-attention
