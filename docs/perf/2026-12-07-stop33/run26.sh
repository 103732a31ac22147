#!/bin/bash
# Device run 26 (stop 33): run25.sh (merged tensor-core GEMV at B = 8 checked and benched,
# decode B = 1 and 8 with and without --no-merge-launches, the out= fast path), then
# tessel.lora's grad_order="sequence" (tests/gpu/python_lora.py) and the LoRA example's
# curves with it (examples/python/lora_train.py).
# Usage (device): bash docs/perf/2026-12-07-stop33/run26.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
bash docs/perf/2026-12-07-stop33/run25.sh
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
cd tests/gpu && TMO=240 t lora python3 python_lora.py $OUT; cd ../..
TMO=240 t train python3 examples/python/lora_train.py --steps 200 --out $OUT
