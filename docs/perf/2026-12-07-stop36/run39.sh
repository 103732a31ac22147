#!/bin/bash
# Device run 39 (stop 36): the FA3-form warpgroup attention tile as the default.
# Binary: tessel_w_s (this stop: `Options::wgmma_attention` on by default; the flag
# --no-wgmma-attention keeps the mma.sync tile). Also gpu_driver_s (the driver's GPU tests,
# its layer sources now complete).
#   1. tessel check of the tile (the default now, no flag): causal GQA with tails (d 128),
#      128 keys a block, d 64, T = 1, the q prologue (d 128, 64), f16 without a mask, the
#      small Qwen3 layer at T = 130 and at positions past 131000; every check also runs the
#      step as one CUDA graph and requires the checked run's bits;
#   2. compute-sanitizer memcheck, racecheck and synccheck on the tile;
#   3. the driver's GPU tests; GPU fuzz --attention (the tile by default on this GPU);
#   4. bench, one card: the attention alone at T = 2048, 4096, 16384 at 64 and 128 keys a
#      block against the mma.sync tile, the Qwen3-14B and Qwen3-32B prefill layers at
#      T = 2048, transformers' layers (sdpa, torch.compile) beside them;
#   5. ncu of the tile at T = 2048 (what limits it).
# Usage (device): bash docs/perf/2026-12-07-stop36/run39.sh a|b|c   (a: 1-3, b: 4-5, c: torch; under $OUT/logs)
B=./target/release/tessel_w_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
A="tests/programs/attention.tsl --profile fast"
if [ "$1" = a ]; then
t check $B check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128 --wgmma-attention-keys 128
t check $B check $A --step prefill --dim T=70 --dim H=8 --dim KV=1 --dim D=64
t check $B check $A --step prefill --dim T=1 --dim H=4 --dim KV=2 --dim D=64
t check $B check $A --step prologue --dim T=100 --dim H=4 --dim KV=2 --dim D=128
t check $B check $A --step prologue --dim T=77 --dim H=4 --dim KV=1 --dim D=64
t check $B check $A --step full_f16 --dim H=2 --dim T=70 --dim S=200 --dim D=128
TMO=60 t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0
TMO=60 t check $B check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=70 --fill pos=iota:131000
t explain $B explain examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048
S() { local tool=$1; shift; TMO=120 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run "$@" -o /tmp/w_$tool.safetensors; }
S memcheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S racecheck $A --step prefill --dim T=130 --dim H=2 --dim KV=1 --dim D=128
S synccheck $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
S memcheck $A --step prologue --dim T=77 --dim H=4 --dim KV=1 --dim D=64
S memcheck $A --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128 --wgmma-attention-keys 128
TMO=60 t driver ./target/release/gpu_driver_s --include-ignored --test-threads=1
TMO=90 t fuzz $B fuzz --count 100 --seed 990000 --profile fast --attention
fi
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
if [ "$1" = b ]; then
# tessel_t_s: tessel_w_s with the row maximum by a balanced tree (same bits), beside it.
TB=./target/release/tessel_t_s
for T in 2048 4096; do
  for k in 64 128 64 128; do TMO=40 t attention $B bench $AB --dim T=$T --wgmma-attention-keys $k; done
  for bin in $TB $B $TB; do TMO=40 t attention_tree $bin bench $AB --dim T=$T; done
  TMO=40 t attention $B bench $AB --dim T=$T --no-wgmma-attention
done
TMO=60 t attention $B bench $AB --dim T=16384 --rounds 5
TMO=60 t attention $B bench $AB --dim T=16384 --rounds 5 --wgmma-attention-keys 128
for m in qwen3_14b qwen3_32b; do
  F="examples/$m/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
  TMO=40 t prefill $B bench $F
  TMO=40 t prefill $B bench $F --wgmma-attention-keys 128
  TMO=40 t prefill $B bench $F --no-wgmma-attention
done
TMO=120 t ncu ncu --kernel-name prefill_0 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats $B bench $AB --dim T=2048 --rounds 1
# The gate (prefill_10, SiLU epilogue) and up (prefill_11) GEMMs beside cuBLAS's kernel of
# the same shape, at the clocks the GPU chooses (--clock-control none: a power-limited
# clock shows in sm__cycles_elapsed.avg.per_second).
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
TMO=200 t ncu_gemm ncu --clock-control none --kernel-name regex:"prefill_1[01]|xmma|gemm" --launch-count 6 --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --metrics sm__cycles_elapsed.avg.per_second,sm__inst_executed_pipe_fma.sum,sm__inst_executed.sum $B bench $F
fi
if [ "$1" = c ]; then
TMO=500 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases attn,prefill,decode --rounds 20
fi
grep -h "^== \|PASS\|FAIL\|rc \|ERROR SUMMARY\|defect\|prefill_0 \|prefill_6 \|replayed\|test result" $L/*.txt > $L/summary.txt 2>&1
