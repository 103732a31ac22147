#!/bin/bash
# Device run 32 (stop 34): the narrower rider (decode's inverse frequencies at B = 8 ride
# with the q/k/v GEMVs; binary tessel_r3_s at 0aa7424) beside 6af4d81's (tessel_pdl2_s),
# same card: the small decode layer checked (GPU == executor in `exact`) and under memcheck
# at B = 8, the Qwen3-14B decode layer at B = 1 and 8, each binary twice (alternating).
# Usage (device): bash docs/perf/2026-12-07-stop34/run32.sh   (writes under $OUT/logs)
N=./target/release/tessel_r3_s
O=./target/release/tessel_pdl2_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact fast; do
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=8 --dim T=1 --dim S=1100
done
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100 -o /tmp/m.safetensors
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for b in 8 1; do for r in 1 2; do
  for bin in $N $O; do TMO=40 t decode $bin $D --dim B=$b; done
done; done
