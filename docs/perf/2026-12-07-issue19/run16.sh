#!/bin/bash
# Device run 16: one machine start for everything still unchecked on a GPU, in order of
# priority (each step's log is written as it ends, so a run cut short keeps what finished):
#   1. the external-launch GPU tests (tessel-cuda `external` and `gpu`, tessel-driver
#      `gpu`), from test binaries built here and stripped into target/release/gt/;
#   2. the decode attention without its padding row half (6e1d090) on the GPU: tessel check
#      of few-row attention and the small Qwen3 decode layer, memcheck and racecheck;
#   3. the Python package (the wheel from `maturin build --release -o target/wheels`):
#      tests/gpu/python_package.py, python_lora.py, python_models.py, and
#      examples/python/lora_train.py (60 steps);
#   4. the CLI's bench of the Qwen3-14B decode layer (B = 1, S = 4096), with --plot.
# Binary: target/release/tessel_s, a stripped release build of the commit that adds this.
# Usage (device): bash docs/perf/2026-12-07-issue19/run16.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
B=./target/release/tessel_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for x in target/release/gt/*; do TMO=90 t gputests $x --ignored --test-threads=1; done
t check $B check tests/programs/attention_bench.tsl --step decode --profile fast --dim B=3 --dim N=1 --dim S=300 --fill len=iota:250
for T in 1 4 5; do
  t check $B check tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=2 --dim T=$T --dim S=96
done
for tool in memcheck racecheck; do
  TMO=90 t sanitizer compute-sanitizer --tool $tool --error-exitcode 3 $B run tests/programs/attention_bench.tsl --step decode --profile fast --dim B=2 --dim N=1 --dim S=300 --fill len=iota:250 -o /tmp/s.safetensors
done
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
export TESSEL_CACHE_DIR=/tmp/tessel-cache
TMO=120 t python python3 tests/gpu/python_package.py $B $OUT
TMO=100 t python_lora python3 tests/gpu/python_lora.py $OUT
TMO=100 t python_models python3 tests/gpu/python_models.py $OUT
TMO=80 t lora_train python3 examples/python/lora_train.py --steps 60 --out $OUT
TMO=60 t cli_decode $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=1 --fill len=iota:4095 --rounds 21 --plot $OUT/decode_b1.svg
