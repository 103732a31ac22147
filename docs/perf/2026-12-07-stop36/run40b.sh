#!/bin/bash
# Device run 40b (stop 36): run40.sh cut to what 260 s of device time allows — the
# attention's CTAs dealt heaviest first (tessel_h_s, 589ba92's code) against 0469925
# (tessel_w_s): two checks (graph == checked), the attention alone at T = 2048 and 4096,
# the Qwen3-14B prefill layer at T = 2048, alternated on one card.
# Usage (device): bash docs/perf/2026-12-07-stop36/run40b.sh   (writes under $OUT/logs)
W=./target/release/tessel_w_s
H=./target/release/tessel_h_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
t check $H check tests/programs/attention.tsl --profile fast --step prefill --dim T=300 --dim H=4 --dim KV=2 --dim D=128
TMO=40 t check $H check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100
AB="tests/programs/attention_bench.tsl --step prefill --profile fast --rounds 5"
for bin in $H $W $H $W; do TMO=30 t attention $bin bench $AB --dim T=2048; done
for bin in $H $W; do TMO=30 t attention $bin bench $AB --dim T=4096; done
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 5"
for bin in $H $W; do TMO=30 t prefill $bin bench $F; done
# The N = 1024 k and v GEMMs (one wave of 128 tiles, the `wgmma: 1` tile): its TMA variant.
TMO=30 t prefill $H bench $F --wgmma-tma
# tessel_b_s: tessel_h_s with the attention backward's dq and dkv CTAs dealt the same way.
B=./target/release/tessel_b_s
G="tests/programs/attention_bench.tsl --step prefill_grads --profile fast --dim T=2048 --rounds 5"
for bin in $B $H; do TMO=30 t grads $bin bench $G; done
grep -h "^== \|check: \|FAIL\|prefill_0 \|prefill_6 \|prefill_grads_[01] \|prefill_[25] \|replayed" $L/*.txt > $L/summary.txt 2>&1
