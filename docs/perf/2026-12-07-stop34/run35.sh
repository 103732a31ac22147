#!/bin/bash
# Device run 35 (stop 34): loads of step inputs no launch writes before griddepcontrol.wait,
# with the GEMVs' first main-loop iteration peeled so that its weight loads are among them
# (binary tessel_ew_s), beside 0aa7424's (tessel_r3_s), same card: the small decode layer
# checked (GPU == executor bit for bit in `exact`) and under memcheck; the Qwen3-14B decode
# layer at B = 8 (alternating the binaries twice) and B = 1. Kept short: the session's
# device time was nearly spent.
# Usage (device): bash docs/perf/2026-12-07-stop34/run35.sh   (writes under $OUT/logs)
N=./target/release/tessel_ew_s
O=./target/release/tessel_r3_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=40 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile exact --dim B=1 --dim T=1 --dim S=300
TMO=40 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100
TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100 -o /tmp/m8.safetensors
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for bin in $N $O $N $O; do TMO=30 t decode $bin $D --dim B=8; done
for bin in $N $O; do TMO=30 t decode $bin $D --dim B=1; done
