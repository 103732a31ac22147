#!/bin/bash
# Device run 30 (stop 34): the GEMVs' L2 prefetch of their weight rows before the wait
# (EXPERIMENT binary: the budget over all rows from TESSEL_GEMV_PREFETCH, bytes). The small
# decode layer checked and under memcheck with the prefetch; the Qwen3-14B decode layer at
# B = 1 and 8 for budgets 0 (no prefetch), 4, 8, 16 and 64 MiB, and without
# programmatic launches at all.
# Usage (device): bash docs/perf/2026-12-07-stop34/run30.sh   (writes under $OUT/logs)
N=./target/release/tessel_pf_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in exact fast; do for b in 1 8; do
  TMO=60 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=$b --dim T=1 --dim S=300
done; done
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=300 -o /tmp/m.safetensors
TMO=90 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=1 --dim T=1 --dim S=300 -o /tmp/m1.safetensors
D="bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --fill len=iota:4095 --rounds 21"
for b in 1 8; do
  TMO=40 t decode $N $D --dim B=$b --no-dependent-launch
  for pf in 0 4194304 8388608 16777216 67108864; do
    echo "TESSEL_GEMV_PREFETCH=$pf" >> $L/decode.txt
    TESSEL_GEMV_PREFETCH=$pf TMO=40 t decode $N $D --dim B=$b
  done
done
