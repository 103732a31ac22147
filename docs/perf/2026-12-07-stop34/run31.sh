#!/bin/bash
# Device run 31 (stop 34): programmatic dependent launch with the decode attention's range
# chosen to fill whole waves of resident CTAs (`fast`; binary tessel_pdl2_s) against the
# binary of 716af2b (tessel_mnb_s), same card: the small decode layer checked at B = 4 and 8
# over 1100 keys (the split path) and under memcheck, the Qwen3-14B decode layer at B = 1,
# 4 and 8, and the prefill layer.
# Usage (device): bash docs/perf/2026-12-07-stop34/run31.sh   (writes under $OUT/logs)
N=./target/release/tessel_pdl2_s
O=./target/release/tessel_mnb_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for b in 4 8; do for p in fast exact; do
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=$b --dim T=1 --dim S=1100
done; done
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=1100 -o /tmp/m.safetensors
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for b in 1 4 8; do
  for bin in $N $O; do TMO=40 t decode $bin $D --dim B=$b; done
done
TMO=40 t decode $N $D --dim B=8 --no-dependent-launch
TMO=90 t prefill $N bench examples/qwen3_14b/layer.tsl --step prefill --profile fast --dim T=2048 --rounds 11
