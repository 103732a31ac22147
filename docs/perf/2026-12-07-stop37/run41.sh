#!/bin/bash
# Device run 41 (stop 37). Binaries (host: cargo build --release; strip -o):
#   tessel_h_s   24926dc, stop 36's last commit
#   tessel_b4_s  + a division by a power of two as a multiply (eca70a5); the row
#                epilogue's global loads written first (60d9b8b); the staged epilogue's
#                tile in the matmul's 16-bit dtype (the same bits on the executor)
#   tessel_b5_s, tessel_b6_s  tessel_b4_s with PINGPONG_STAGES 5, 6 (198736, 231520 bytes)
# 1. GPU checks of the changed epilogues: the small layer (row epilogue), GPU fuzz with
#    --sm-count 1 (every GEMM of 2+ tiles on the ping-pong tile), memcheck; stop 36's
#    backward dealing (prefill_grads, attention_grads);
# 2. the Qwen3-14B prefill layer, four binaries alternated;
# 3. ncu at the GPU's own clocks of the gate (prefill_10) and up (prefill_11) GEMMs and of
#    cuBLAS's (why the gate takes 1.13x the up GEMM).
# Usage (device): bash docs/perf/2026-12-07-stop37/run41.sh   (logs under $OUT/logs)
H=./target/release/tessel_h_s
B4=./target/release/tessel_b4_s
B5=./target/release/tessel_b5_s
B6=./target/release/tessel_b6_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=60 t check $B4 check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0
TMO=60 t check $B6 check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=77 --fill pos=iota:131000
TMO=90 t check $B4 check tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=150
TMO=60 t check $B4 check tests/programs/grad_small.tsl --step attention_grads --profile fast --dim T=70
TMO=100 t fuzz $B6 fuzz --count 120 --seed 1020000 --sm-count 1 --profile fast
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B6 run examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=300 --fill pos=iota:0 -o /tmp/b6_mem.safetensors
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
for bin in $H $B4 $B5 $B6 $H $B4 $B5 $B6; do TMO=40 t prefill $bin bench $F; done
F1="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
M=sm__cycles_elapsed.avg.per_second,sm__inst_executed.sum,sm__inst_executed_pipe_fma.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
TMO=100 t ncu_gemm ncu --clock-control none --kernel-name regex:"prefill_1[01]$" --launch-count 2 --section SpeedOfLight --section WarpStateStats --metrics $M $B4 bench $F1
TMO=100 t ncu_gemm ncu --clock-control none --kernel-name regex:"sm90|xmma|cutlass|gemm|nvjet" --launch-skip 4 --launch-count 2 --section SpeedOfLight --section WarpStateStats --metrics $M $B4 bench $F1
grep -h "^== \|PASS\|FAIL\|ERROR SUMMARY\|fuzz: [0-9]\|prefill_[125] \|prefill_1[012] \|cuBLAS\|replayed\|rc [1-9]" $L/check.txt $L/fuzz.txt $L/sanitizer.txt $L/prefill.txt > $L/summary.txt 2>&1
