#!/bin/bash
# Device run 15 (issue 20 / issue 19): the Python package on the GPU, then run 14 (the
# external-launch GPU tests and run 13's decode attention check and timing).
#   - the wheel built here (`maturin build --release -o target/wheels`, at the commit that
#     adds this script) installed with pip, no dependencies;
#   - tests/gpu/python_package.py: bits vs the CLI, zero copy, streams, argument errors,
#     overhead per call vs Triton and torch, the Qwen3-14B decode layer from Python;
#   - tests/gpu/python_lora.py: tessel.lora against PEFT (numerics, invariance, apply, time);
#   - tests/gpu/python_models.py: tessel.models (greedy tokens vs transformers; 14B-config time);
#   - examples/python/lora_train.py: 200 training steps, PEFT vs tessel, micro-batch 8 vs 2;
#   - the CLI's bench of the same decode layer (graph), with --plot.
# Usage (device): bash docs/perf/2026-12-07-issue19/run15.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
B=./target/release/tessel_s
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
export TESSEL_CACHE_DIR=/tmp/tessel-cache
timeout 300 python3 tests/gpu/python_package.py $B $OUT > $L/python.txt 2>&1; echo "rc $?" >> $L/python.txt
timeout 240 python3 tests/gpu/python_lora.py $OUT > $L/python_lora.txt 2>&1; echo "rc $?" >> $L/python_lora.txt
timeout 240 python3 tests/gpu/python_models.py $OUT > $L/python_models.txt 2>&1; echo "rc $?" >> $L/python_models.txt
timeout 300 python3 examples/python/lora_train.py --steps 200 --out $OUT > $L/lora_train.txt 2>&1; echo "rc $?" >> $L/lora_train.txt
timeout 120 $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 \
  --dim B=1 --fill len=iota:4095 --rounds 21 --plot $OUT/decode_b1.svg > $L/cli_decode.txt 2>&1; echo "rc $?" >> $L/cli_decode.txt
# run14.sh is the next call (same warm machine).
