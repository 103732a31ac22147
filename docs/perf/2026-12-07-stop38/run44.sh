#!/bin/bash
# Device run 44 (stop 38; run43.sh trimmed to fit a contested pool): the warp-specialised TMA tile (`wgmma: tma`,
# --wgmma-tma) checked on the GPU, then timed against the default where it would apply.
# Run 42 (one sample) had the one-wave N = 1024 GEMMs 7-8 us faster on it (as run 40b) and
# the gate GEMM 49 us faster on its 128 x 256 form than on the ping-pong (the up GEMM 57 us
# slower). Binary: tessel_s = HEAD (cargo build --release -p tessel; strip -o).
# 1. tessel check, default and --wgmma-tma, of GEMMs that take the TMA tile at these sizes
#    (M = 2048 / N = 1024: 128 tiles, not the ping-pong's 2 an SM): a plain projection, the
#    SiLU + bias + residual epilogue with tails (M 2000, N 1100), the QK-norm + RoPE row
#    epilogue; memcheck and racecheck of the TMA tile;
# 2. the Qwen3-14B prefill layer, default / --wgmma-tma / --no-wgmma-pingpong --wgmma-tma,
#    alternated twice (--rounds 21; ALTERNATIONS=N for another count).
# Usage (device): bash docs/perf/2026-12-07-stop38/run44.sh   (logs under $OUT/logs)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
M=tests/programs/matmul.tsl
R=tests/programs/row_epilogue.tsl
for x in "" --wgmma-tma; do
  TMO=90 t check $B check $M --step linear --profile fast --dim M=2048 --dim N=1024 --dim K=520 $x
  TMO=90 t check $B check $M --step linear_epilogue --profile fast --dim M=2000 --dim N=1100 --dim K=200 $x
  TMO=90 t check $B check $R --step norm_rope --profile fast --dim T=2000 --dim K=520 --dim N=1024 --dim H=8 --dim D=128 $x
done
TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $R --step norm_rope --profile fast --dim T=2000 --dim K=520 --dim N=1024 --dim H=8 --dim D=128 --wgmma-tma -o /tmp/t_mem.safetensors
TMO=120 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $M --step linear_epilogue --profile fast --dim M=2000 --dim N=1100 --dim K=200 --wgmma-tma -o /tmp/t_race.safetensors
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 21"
for r in $(seq 1 ${ALTERNATIONS:-2}); do
  for x in "" --wgmma-tma "--no-wgmma-pingpong --wgmma-tma"; do TMO=60 t prefill $B bench $F $x; done
done
grep -h "^== \|PASS\|FAIL\|ERROR SUMMARY\|RACECHECK SUMMARY\|prefill_[125] \|prefill_8 \|prefill_1[012] \|replayed\|rc [1-9]" $L/check.txt $L/sanitizer.txt $L/prefill.txt > $L/summary.txt 2>&1
