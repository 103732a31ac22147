#!/bin/bash
# Device run 37 (stop 35): time of what stop 35 changed, new (tessel_n_s, HEAD) beside old
# (tessel_o_s, 1c506b0) on one card, alternated: the Qwen3-14B prefill layer at T = 2048
# (its attention kernel: exp_f32_nonpos, the one-instruction bf16 rounding and whole-block
# K/V copies take its key loop from 1583 to 1274 SASS instructions a warp per block of 64
# keys), the attention alone at T = 2048 and 4096 (and the opt-in FA3-form wgmma tile at
# 2048), and the decode layer at B = 1 and 8. The layer bench also times the gate GEMM, whose
# SiLU epilogue (silu_f32 through exp_f32_nonpos's parts) is 1142 -> 1054 instructions per 16
# elements.
# Usage (device): bash docs/perf/2026-12-07-stop35/run37.sh   (writes under $OUT/logs)
N=./target/release/tessel_n_s
O=./target/release/tessel_o_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
for bin in $N $O $N $O; do TMO=40 t prefill $bin bench $F; done
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
for T in 2048 4096; do for bin in $N $O; do TMO=40 t attention $bin bench $AB --dim T=$T; done; done
# The FA3-form wgmma tile (opt-in, never timed before): its consumers run the same online
# softmax, so exp_f32_nonpos reaches it too.
for bin in $N $O; do TMO=40 t attention_wgmma $bin bench $AB --dim T=2048 --wgmma-attention; done
TMO=40 t prefill_wgmma $N bench $F --wgmma-attention
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for bin in $N $O $N $O; do TMO=30 t decode $bin $D --dim B=8; done
for bin in $N $O; do TMO=30 t decode $bin $D --dim B=1; done
