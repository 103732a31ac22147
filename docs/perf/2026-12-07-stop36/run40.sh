#!/bin/bash
# Device run 40 (stop 36): the attention's CTAs dealt heaviest first.
#   tessel_w_s  0469925 (the warpgroup attention tile by default)
#   tessel_h_s  + the row maximum by a balanced tree + CTAs dealt heaviest first (grid
#               row block nx-1-l/ny of row l mod ny, l the launch order): the same bits
#               (rebuild it from HEAD, which deals the backward's CTAs too)
# Not run in stop 36 (its device time ran out; run40b.sh ran a part).
# 1. tessel check of the attention programs and the small layer with tessel_h_s (graph ==
#    checked, GPU within bounds); memcheck of the remapped grid;
# 2. bench, alternated: the attention alone at T = 2048, 4096 (both tiles), the Qwen3-14B
#    and Qwen3-32B prefill layers at T = 2048;
# 3. ncu at the GPU's own clocks of the up GEMM (prefill_11) and of cuBLAS's GEMM of the
#    same shape (the gate GEMM, prefill_10, ran at 1.67 GHz in run 39).
# Binaries: docs/perf/2026-12-07-stop36/build.sh (host). Usage (device):
#   bash docs/perf/2026-12-07-stop36/run40.sh   (writes under $OUT/logs; carry tessel_h_s, tessel_w_s)
W=./target/release/tessel_w_s
H=./target/release/tessel_h_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
A="tests/programs/attention.tsl --profile fast"
t check $H check $A --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128
t check $H check $A --step prologue --dim T=77 --dim H=4 --dim KV=1 --dim D=64
t check $H check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128 --no-wgmma-attention
t check $H check $A --step decode --dim B=2 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
TMO=60 t check $H check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0
TMO=40 t check $H check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100
# The attention backward's dq/dkv CTAs dealt heaviest first (f3d9558): its bits on the GPU.
TMO=90 t check $H check tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=150
t check $H check tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=70
TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $H run $A --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128 -o /tmp/h_mem.safetensors
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
for T in 2048 4096; do
  for bin in $H $W $H $W; do TMO=40 t attention $bin bench $AB --dim T=$T; done
  for bin in $H $W; do TMO=40 t attention $bin bench $AB --dim T=$T --no-wgmma-attention; done
done
for m in qwen3_14b qwen3_32b; do
  F="examples/$m/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
  for bin in $H $W $H; do TMO=40 t prefill $bin bench $F; done
done
# --wgmma-tma for the one-wave N = 1024 GEMMs: in run 40b their kernels gained 15 µs but the
# graph 3 µs (one sample each); alternated, more rounds.
FT="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 21"
for x in "" --wgmma-tma "" --wgmma-tma; do TMO=60 t prefill_tma $H bench $FT $x; done
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
M=sm__cycles_elapsed.avg.per_second,sm__inst_executed.sum,sm__inst_executed_pipe_fma.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
TMO=120 t ncu_gemm ncu --clock-control none --kernel-name prefill_11 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --metrics $M $H bench $F
TMO=120 t ncu_gemm ncu --clock-control none --kernel-name prefill_10 --launch-count 1 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --metrics $M $H bench $F
TMO=120 t ncu_gemm ncu --clock-control none --kernel-name regex:"sm90|xmma|cutlass|gemm|nvjet" --launch-skip 4 --launch-count 3 --section SpeedOfLight --section SchedulerStats --section WarpStateStats --metrics $M $H bench $F
grep -h "^== \|PASS\|FAIL\|ERROR SUMMARY\|prefill_0 \|prefill_6 \|replayed" $L/*.txt > $L/summary.txt 2>&1
