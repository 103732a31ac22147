#!/bin/bash
# Device run 20 (issue 20): the Python call's fast path and where its host time goes
# (tests/gpu/python_overhead.py), the Qwen2 token divergence examined against an f64 model
# (tests/gpu/python_models.py), the package's GPU checks again with run 19's corrected bounds,
# the LoRA layer's kernels timed by the CLI in invariant and fast, the LoRA example at 200
# steps; and the Qwen3-14B decode layer's CLI bench at B = 1 and 8 at HEAD (issue 19's
# baseline; run21.sh benches the working tree's).
# Binary: target/release/tessel_s (stripped release build); wheel: target/wheels (maturin).
# Usage (device): bash docs/perf/2026-12-07-issue20/run20.sh   (writes under $OUT)
L=$OUT/logs; mkdir -p $L
nvidia-smi > $L/nvidia-smi.txt 2>&1
B=./target/release/tessel_s
t() { local name=$1; shift; echo "== $*" >> $L/$name.txt; /usr/bin/time -f "%e s" timeout ${TMO:-100} "$@" >> $L/$name.txt 2>&1; echo "rc $?" >> $L/$name.txt; }
python3 -m pip install --no-deps --no-index --force-reinstall target/wheels/tessel-*.whl > $L/pip.txt 2>&1 \
  || python3 -m pip install --no-deps --no-index --force-reinstall --break-system-packages target/wheels/tessel-*.whl >> $L/pip.txt 2>&1
export TESSEL_CACHE_DIR=/tmp/tessel-cache
TMO=120 t overhead python3 tests/gpu/python_overhead.py $OUT new --check
TMO=240 t python_models python3 tests/gpu/python_models.py $OUT
TMO=150 t python python3 tests/gpu/python_package.py $B $OUT
python3 -c "
import tessel._tessel as t
open('/tmp/lora_companion.tsl', 'w').write(t.grad_companion('python/tessel/lora.tsl', 'lora_linear', ['x', 'a', 'b'])[0])"
for p in invariant fast; do for s in forward backward; do
  TMO=60 t lora_bench $B bench /tmp/lora_companion.tsl --step $s --profile $p --dim T=2048 --dim E=5120 --dim N=5120 --dim R=16 --rounds 11
done; done
TMO=150 t python_lora python3 tests/gpu/python_lora.py $OUT
TMO=60 t cli_decode $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=1 --fill len=iota:4095 --rounds 21 --plot $OUT/decode_b1.svg
TMO=60 t cli_decode $B bench examples/qwen3_14b/layer.tsl --step decode --profile fast --dim T=1 --dim S=4096 --dim B=8 --fill len=iota:4095 --rounds 21
TMO=240 t lora_train python3 examples/python/lora_train.py --steps 200 --out $OUT
