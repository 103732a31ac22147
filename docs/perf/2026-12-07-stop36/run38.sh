#!/bin/bash
# Device run 38 (stop 36): time, on one card, three binaries alternated:
#   tessel_o_s  1c506b0 (stop 34's last commit)
#   tessel_n_s  149880d (stop 35: exp_f32_nonpos, one-instruction bf16 rounding, whole-block
#               K/V copies, silu through exp_f32_nonpos's parts)
#   tessel_r_s  stop 36: + O's rescale skipped where the row maximum did not move
# the Qwen3-14B prefill layer at T = 2048, the attention alone at T = 2048 and 4096 (and the
# opt-in FA3-form wgmma tile at 2048), the decode layer at B = 8 and 1; then `tessel check`
# of the attention programs with tessel_r_s (the rescale's branch on the GPU).
# Usage (device): bash docs/perf/2026-12-07-stop36/run38.sh   (writes under $OUT/logs)
N=./target/release/tessel_n_s
O=./target/release/tessel_o_s
R=./target/release/tessel_r_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
AB="tests/programs/attention_bench.tsl --step prefill --profile fast"
for T in 2048 4096; do for bin in $R $N $O $R $N $O; do TMO=40 t attention $bin bench $AB --dim T=$T; done; done
for bin in $R $N $O; do TMO=40 t attention_wgmma $bin bench $AB --dim T=2048 --wgmma-attention; done
F="examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --fill pos=iota:0 --rounds 11"
for bin in $R $N $O $R $N $O; do TMO=40 t prefill $bin bench $F; done
TMO=40 t prefill_wgmma $R bench $F --wgmma-attention
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for bin in $R $N $O $R $N $O; do TMO=30 t decode $bin $D --dim B=8; done
for bin in $R $N $O; do TMO=30 t decode $bin $D --dim B=1; done
A="tests/programs/attention.tsl --profile fast"
t check $R check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128
t check $R check $A --step prefill --dim T=150 --dim H=4 --dim KV=2 --dim D=128 --wgmma-attention
t check $R check $A --step decode --dim B=1 --dim N=70 --dim H=4 --dim KV=1 --dim S=256 --dim D=64
TMO=60 t check $R check tests/programs/layer_small.tsl --step qwen3 --profile fast --dim T=130 --fill pos=iota:0
grep -h "^==\|prefill_6\|whole step\|graph and replayed\|PASS\|FAIL\|rc " $L/*.txt > $L/summary.txt
