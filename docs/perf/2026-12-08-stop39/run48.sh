#!/bin/bash
# Device run 48 (stop 39): the final code (tessel_f = main after the merge of tma-default and
# tma-tail: cargo build --release -p tessel; strip -o target/release/tessel_f).
# 1. the Qwen3-14B prefill layer at T = 2048, the default (the split-tail TMA tile for q, o,
#    gate, up, down; the TMA tile for k, v) against --no-wgmma-tma (the ping-pong tile for
#    the five, wgmma: 1 for k and v: the default before this stop), alternated twice (ALTERNATIONS=N for another count);
# 2. transformers' layer under torch.compile on the same card (bench_torch.py, prefill).
# Usage (device): bash docs/perf/2026-12-08-stop39/run48.sh   (logs under $OUT/logs)
B=./target/release/tessel_f
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 21"
for r in $(seq 1 ${ALTERNATIONS:-2}); do
  for x in "" --no-wgmma-tma; do TMO=60 t prefill $B bench $F $x; done
done
grep -h "^== \|prefill_[125] \|prefill_8 \|prefill_1[012] \|replayed\|rc [1-9]" $L/prefill.txt > $L/summary.txt 2>&1
TMO=200 t torch python3 tests/gpu/bench_torch.py --config examples/qwen3_14b/config.json --cases prefill --rounds 20
