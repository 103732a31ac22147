#!/bin/bash
# Device run 47 (stop 39): the TMA tile's split tail (branch tma-tail; binary tessel_t:
# cargo build --release -p tessel; strip -o target/release/tessel_t). Under
# --no-wgmma-pingpong the Qwen3-14B q, o, gate, up and down GEMMs at T = 2048 take the
# 128 x 256 TMA tile with their last wave's tiles split in two (`wgmma: tma, tail: N`).
# 1. tessel check of two tail shapes (M 2048 N 5120: tail 56, both halves inside N;
#    M 2000 N 5000 K 200 with the SiLU + bias + residual epilogue: the last halves partial),
#    racecheck and memcheck of the second;
# 2. the prefill layer: tessel_t --no-wgmma-pingpong (tails), tessel_t default, alternated.
# Usage (device): bash docs/perf/2026-12-08-stop39/run47.sh   (logs under $OUT/logs)
B=./target/release/tessel_t
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
M=tests/programs/matmul.tsl
X="--profile fast --no-wgmma-pingpong"
TMO=90 t check $B explain $M --step linear --dim M=2048 --dim N=5120 --dim K=520 $X
TMO=90 t check $B check $M --step linear --dim M=2048 --dim N=5120 --dim K=520 $X
TMO=90 t check $B check $M --step linear_epilogue --dim M=2000 --dim N=5000 --dim K=200 $X
TMO=150 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $M --step linear_epilogue --dim M=2000 --dim N=5000 --dim K=200 $X -o /tmp/t_race.safetensors
TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $M --step linear_epilogue --dim M=2000 --dim N=5000 --dim K=200 $X -o /tmp/t_mem.safetensors
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 21"
for r in 1 2; do
  for x in --no-wgmma-pingpong ""; do TMO=60 t prefill $B bench $F $x; done
done
grep -h "^== \|tail: \|PASS\|FAIL\|ERROR SUMMARY\|RACECHECK SUMMARY\|prefill_[125] \|prefill_8 \|prefill_1[012] \|replayed\|rc [1-9]" $L/check.txt $L/sanitizer.txt $L/prefill.txt > $L/summary.txt 2>&1
