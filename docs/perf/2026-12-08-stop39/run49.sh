#!/bin/bash
# Device run 49 (written in stop 39, for the next stop): the split tail's cases that no GPU
# run has covered yet (from the stop's review), with the final binary (tessel_f: cargo build
# --release -p tessel; strip -o target/release/tessel_f), default flags, `fast`, on the
# card's own target:
#   linear M 2048 K 64 N 2100 (tail 12: halves past N leave at once, N mod 256 = 52);
#   xw (x @ w, w stored [K, N]: an MN-major B, halves of two 64-column panels) M 2048 K 64
#   N 2104 (tail 12);
#   linear M 1000 K 64 N 3000 (128 x 128 tiles: halves of 64 columns, wgmma n64; tail 60);
# each `tessel check` (explain first, to log the tile), memcheck and racecheck.
# Usage (device): bash docs/perf/2026-12-08-stop39/run49.sh   (logs under $OUT/logs)
B=./target/release/tessel_f
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
while read -r f args; do
  TMO=30 t check $B explain $f $args --profile fast
  TMO=120 t check $B check $f $args --profile fast
  TMO=120 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $B run $f $args --profile fast -o /tmp/t_mem.safetensors
  TMO=150 t sanitizer compute-sanitizer --tool racecheck --error-exitcode 3 $B run $f $args --profile fast -o /tmp/t_race.safetensors
done <<'CASES'
tests/programs/matmul.tsl --step linear --dim M=2048 --dim K=64 --dim N=2100
tests/programs/matmul_mn.tsl --step xw --dim M=2048 --dim K=64 --dim N=2104
tests/programs/matmul.tsl --step linear --dim M=1000 --dim K=64 --dim N=3000
CASES
grep -h "^== \|tail: \|PASS\|FAIL\|ERROR SUMMARY\|RACECHECK SUMMARY\|rc [1-9]" $L/check.txt $L/sanitizer.txt > $L/summary.txt 2>&1
