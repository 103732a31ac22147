#!/bin/bash
# Issue 18, device run 11 (one H200): the causal prefill attention's backward at the issue's
# shapes (40 query heads, 8 KV heads, head dim 128, T = 2048 and 4096) as tessel compiles it
# today (unfused: the score-sized matrices materialised) beside torch SDPA's backward per
# backend in the same run; and `tessel check` of the same step at T = 40 on the GPU.
# Usage (device): bash docs/perf/2026-12-03-issue18/run11.sh   (writes under $OUT)
B=./target/release/tessel_s
L=$OUT/logs; mkdir -p $L
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-300} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in invariant fast; do
  TMO=120 t check $B check tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=40
done
TMO=200 t sdpa python3 tests/gpu/sdpa_bench.py $L/sdpa_backward.json --backward
for T in 2048 4096; do
  for p in fast invariant; do
    TMO=200 t bench $B bench tests/programs/attention_bench.tsl --step prefill_grads --profile $p --dim T=$T
  done
done
