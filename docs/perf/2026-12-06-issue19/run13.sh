#!/bin/bash
# (Prepared in the fourth session; not run: no device could be started. Run it first next time,
# rebuilding the binaries: F from f3e62fb, H from main, X5 as below.)
# Device run 13 of issue 19 (fourth session): the decode attention without its padding row
# half (6e1d090).
#   F = target/release/tessel_f3_s   f3e62fb (the GEMV's columns, before 6e1d090)
#   H = target/release/tessel_h_s    6e1d090
#   X5 = H with the fast profile's split ranges down to 64 keys (was 128)
#   1. tessel check (H, fast) of few-row attention: attention_bench decode, the small Qwen3
#      decode layer at 2, 8 and 10 rows a K/V head; compute-sanitizer memcheck and
#      racecheck on the decode attention;
#   2. bench the Qwen3-14B decode layer, B = 1 and 8 (F, H, X5), alternated twice at B = 1.
# Usage (device): bash docs/perf/2026-12-06-issue19/run13.sh   (writes under $OUT)
F=./target/release/tessel_f3_s
H=./target/release/tessel_h_s
X5=./target/release/tessel_x5_s
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
t check $H check tests/programs/attention_bench.tsl --step decode --profile fast --dim B=3 --dim N=1 --dim S=300 --fill len=iota:250
for T in 1 4 5; do
  t check $H check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=2 --dim T=$T --dim S=96
done
for tool in memcheck racecheck; do
  TMO=150 t sanitizer compute-sanitizer --tool $tool $H run tests/programs/attention_bench.tsl --step decode --profile fast --dim B=2 --dim N=1 --dim S=300 --fill len=iota:250 -o /tmp/s.safetensors
done
D="examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --rounds 21"
for round in 1 2; do
  for bin in $F $H $X5; do
    t decode $bin bench $D --dim B=1 --fill len=iota:4095
  done
done
for bin in $F $H; do
  t decode $bin bench $D --dim B=8 --fill len=iota:4088
done
