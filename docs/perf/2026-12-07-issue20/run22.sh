#!/bin/bash
# Device run 22: run21.sh and run20.sh in one machine start, in order of priority, each step's
# log written as it ends (a run cut short keeps what finished):
#   1. GPU checks of this session's passes (fuse rule 11, merge-launches, the 16-bit GEMM
#      tip): tessel check of the small decode layer and the split decode attention,
#      memcheck and racecheck — target/release/tessel_r11_s, a build of the working tree;
#   2. the Qwen3-14B decode layer at B = 1 and 8: the working tree, the same with
#      --no-merge-launches, and HEAD before this session (target/release/tessel_s);
#   3. the Python package (the wheel of the working tree): where a call's host time goes
#      (python_overhead.py), the greedy tokens against transformers with the parting
#      examined against f64 (python_models.py);
#   4. the LoRA companion steps per kernel, HEAD and working tree, invariant and fast;
#   5. the LoRA example, 200 steps; python_lora.py; python_package.py.
# Usage (device): bash docs/perf/2026-12-07-issue20/run22.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
B=./target/release/tessel_s
N=./target/release/tessel_r11_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
for p in fast exact; do for T in 1 3; do
  TMO=40 t r11_check $N check tests/programs/layer_small.tsl --step qwen3_decode --profile $p --dim B=2 --dim T=$T --dim S=96
done; done
TMO=40 t r11_check $N check tests/programs/attention_bench.tsl --step decode --profile fast --dim B=3 --dim N=1 --dim S=300 --fill len=iota:250
TMO=40 t r11_check $N check docs/perf/2026-12-07-issue20/lora_companion.tsl --profile fast --dim T=37 --dim E=64 --dim N=48 --dim R=4
for tool in memcheck racecheck; do
  TMO=60 t r11_check compute-sanitizer --tool $tool --error-exitcode 3 $N run tests/programs/layer_small.tsl --step qwen3_decode --profile fast --dim B=2 --dim T=1 --dim S=96 -o /tmp/r11.safetensors
done
for b in 1 8; do
  TMO=45 t cli_decode $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21
  TMO=45 t cli_decode $N bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21 --no-merge-launches
  TMO=45 t cli_decode_head $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=$b --fill len=iota:4095 --rounds 21
done
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
export TESSEL_CACHE_DIR=/tmp/tessel-cache
TMO=90 t overhead python3 tests/gpu/python_overhead.py $OUT new --check
TMO=150 t python_models python3 tests/gpu/python_models.py $OUT
F=docs/perf/2026-12-07-issue20/lora_companion.tsl
for p in invariant fast; do for s in forward backward; do
  TMO=30 t lora_bench $B bench $F --step $s --profile $p --dim T=2048 --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
  TMO=30 t lora_bench $N bench $F --step $s --profile $p --dim T=2048 --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
done; done
TMO=150 t lora_train python3 examples/python/lora_train.py --steps 200 --out $OUT
TMO=100 t python_lora python3 tests/gpu/python_lora.py $OUT
TMO=150 t python python3 tests/gpu/python_package.py $N $OUT
