#!/bin/bash
# Device run 19: run18.sh cut to about 250 s: the Python package's main GPU script, the
# decode attention's check, the external-launch GPU tests.
# Run 19 used `pip install`, which installed the wheel for another interpreter; the script
# now uses `python3 -m pip`, as the calls after it did (docs/perf/2026-12-07-issue20-python.md).
# Usage (device): bash docs/perf/2026-12-07-issue19/run19.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
B=./target/release/tessel_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
export TESSEL_CACHE_DIR=/tmp/tessel-cache
TMO=110 t python python3 tests/gpu/python_package.py $B $OUT
TMO=35 t check $B check tests/programs/attention_bench.tsl --step decode --profile fast --dim B=3 --dim N=1 --dim S=300 --fill len=iota:250
for x in target/release/gt/*; do TMO=25 t gputests $x --ignored --test-threads=1; done
