#!/bin/bash
# Device run 44 (stop 38), after run43.sh in the same call: what holds the ping-pong GEMMs.
# ncu WarpStateStats, SchedulerStats and SourceCounters (warp stall sampling) of
#   prefill_10 (the SwiGLU gate GEMM: M 2048, N 17408, K 5120, SiLU epilogue) on the
#     ping-pong (default) and on the 128 x 256 TMA tile (--no-wgmma-pingpong --wgmma-tma),
#     where run 42 had it 677 / 628 us;
#   prefill_1 (the q GEMM) on the ping-pong (run 42: SM 78%, L1/shared pipe 64%).
# Usage (device): bash docs/perf/2026-12-07-stop38/ncu44.sh   (logs under $OUT/logs)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F1="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 1"
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section SourceCounters --section LaunchStats --metrics sm__cycles_elapsed.avg.per_second"
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $S $B bench $F1
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_10$" --launch-count 1 $S $B bench $F1 --no-wgmma-pingpong --wgmma-tma
TMO=90 t ncu ncu --clock-control none --kernel-name regex:"prefill_1$" --launch-count 1 $S $B bench $F1
