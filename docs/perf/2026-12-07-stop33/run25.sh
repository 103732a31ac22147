#!/bin/bash
# Device run 25: run24.sh plus the B = 1 decode bench, on whichever card comes (the first run of stop 33).
# merged tensor-core GEMV checked (B = 8) and benched beside --no-merge-launches; the
# Python overhead with out= on the fast path.
# Usage (device): bash docs/perf/2026-12-07-stop33/run25.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
N=./target/release/tessel_r11_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=40 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=96
TMO=40 t check compute-sanitizer --tool memcheck --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=96 -o /tmp/r.safetensors
for B in 1 8; do for m in "" --no-merge-launches; do
  TMO=40 t bench $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$B --fill len=iota:4095 --rounds 21 $m
done; done
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
TMO=60 t overhead python3 tests/gpu/python_overhead.py $OUT new --check
