#!/bin/bash
# Device run 45 (stop 38), after run44.sh: what holds the ping-pong GEMMs.
# ncu WarpStateStats, SchedulerStats and SourceCounters (warp stall sampling) of
#   prefill_10 (the SwiGLU gate GEMM: M 2048, N 17408, K 5120, SiLU epilogue) on the
#     ping-pong (default) and on the 128 x 256 TMA tile (--no-wgmma-pingpong --wgmma-tma),
#     where run 42 had it 677 / 628 us;
#   prefill_1 (the q GEMM) on the ping-pong (run 42: SM 78%, L1/shared pipe 64%), and
#   cuBLAS's kernel for that shape; the tensor pipe's active cycles and L2 throughput of each.
# Then the gate GEMM with and without its SiLU epilogue on both tiles (nosilu/).
# Usage (device): bash docs/perf/2026-12-07-stop38/ncu45.sh   (logs under $OUT/logs)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F1="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats --metrics sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $S $B bench $F1
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $S $B bench $F1 --no-wgmma-pingpong --wgmma-tma
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $S $B bench $F1
# cuBLAS's kernel for the q shape (the first nvjet kernel bench runs: prefill_1's comparison).
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"nvjet" --launch-count 1 $S $B bench $F1
# The gate GEMM without its SiLU (nosilu/: the layer with `(x @ wg^T) * (x @ wu^T)`, the same
# kernels otherwise), against the layer as it is, on both tiles: what the SiLU costs each.
N="docs/perf/2026-12-07-stop38/nosilu/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
for r in 1 2; do
  for x in "" "--no-wgmma-pingpong --wgmma-tma"; do TMO=60 t nosilu $B bench $N $x; TMO=60 t nosilu $B bench $F $x; done
done
grep -h "^== \|prefill_1[012] \|replayed\|rc [1-9]" $L/nosilu.txt > $L/summary_nosilu.txt 2>&1
