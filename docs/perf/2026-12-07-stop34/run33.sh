#!/bin/bash
# Device run 33 (stop 34): programmatic dependent launch validated beyond the layers — GPU
# fuzzing (GPU == executor bit for bit in `exact`, every profile judged; random multi-kernel
# programs, every launch after a program's first programmatic), the attention fuzzer,
# memcheck over fuzzed programs, and the Python package's GPU checks (its launches go
# through the external-stream path with the same attribute). Binary tessel_r3_s (0aa7424),
# wheel built from the same tree.
# Usage (device): bash docs/perf/2026-12-07-stop34/run33.sh   (writes under $OUT/logs)
N=./target/release/tessel_r3_s
L=$OUT/logs; mkdir -p $L
nvidia-smi --query-gpu=name,driver_version --format=csv > $L/card.txt
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
TMO=70 t fuzz $N fuzz --count 300 --seed 880000 --profile exact
TMO=70 t fuzz $N fuzz --count 300 --seed 881000 --profile all
TMO=60 t fuzz $N fuzz --count 100 --seed 882000 --profile all --attention
TMO=60 t sanitizer compute-sanitizer --tool memcheck --error-exitcode 3 $N fuzz --count 40 --seed 883000 --profile all
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
cd tests/gpu && TMO=150 t python python3 python_package.py ../../$N $OUT; cd ../..
