#!/bin/bash
# Device run 23: the tensor-core GEMV merged (q/k/v of the B = 8 decode layer as one
# launch) checked on the GPU (tessel check, memcheck, racecheck) and benched at B = 8 and 1
# beside --no-merge-launches. Binary: target/release/tessel_r11_s (the working tree).
# Usage (device): bash docs/perf/2026-12-07-issue20/run23.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
N=./target/release/tessel_r11_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in fast invariant; do for B in 8 17; do
  TMO=40 t check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=$B --dim T=1 --dim S=96
done; done
for tool in memcheck racecheck; do
  TMO=60 t check compute-sanitizer --tool $tool --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=8 --dim T=1 --dim S=96 -o /tmp/r.safetensors
done
for b in 8 1; do for m in "" --no-merge-launches; do
  TMO=45 t bench $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21 $m
done; done
# The Python fast path with out= (the wheel of the working tree).
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
TMO=90 t overhead python3 tests/gpu/python_overhead.py $OUT new --check
