#!/usr/bin/env bash
# The GPU checks of issue 2, in one run on the device machine (design §9, §10):
#   tessel check (GPU vs executor bit for bit, vs the f64 oracle), RoPE at two position ranges,
#   tessel bench (time and bandwidth per kernel), compute-sanitizer memcheck on every example,
#   and the Hugging Face comparison of tests/gpu/hf_compare.py.
# Usage: scripts/gpu-check.sh BIN OUTDIR      (BIN: a release build of tessel)
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu}
mkdir -p "$OUT"
T=4096
status=0
run() { echo "+ $*"; "$@" || status=1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
run "$BIN" check --dim T=$T --fill pos=iota:0 --json "$OUT/check_pos0.json" 2>&1 | tee "$OUT/check_pos0.log"
run "$BIN" check examples/qwen3_14b/rope.tsl --dim T=$T --fill pos=iota:127000 --json "$OUT/check_pos127000.json" 2>&1 | tee "$OUT/check_pos127000.log"
for ex in rms_norm rope swiglu; do
  run "$BIN" bench examples/qwen3_14b/$ex.tsl --dim T=$T --fill pos=iota:0 --json "$OUT/bench_$ex.json"
done 2>&1 | tee "$OUT/bench.log"
for ex in rms_norm rope swiglu; do
  run compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" run examples/qwen3_14b/$ex.tsl --dim T=$T -o /tmp/san_$ex.safetensors
done 2>&1 | tee "$OUT/memcheck.log"
if [ -f tests/gpu/hf_compare.py ]; then
  D=/tmp/hf; mkdir -p $D
  for spec in "rms_norm hidden_norm" "rms_norm qk_norm" "rope rope_qk" "swiglu swiglu"; do
    set -- $spec
    run "$BIN" run examples/qwen3_14b/$1.tsl --dim T=$T --step $2 --seed 1 --fill pos=iota:0 \
      --save-inputs $D/$1/$2.inputs.safetensors --dump-temps -o $D/$1/$2.outputs.safetensors
  done
  run python3 tests/gpu/hf_compare.py $D --json "$OUT/hf_compare.json" 2>&1 | tee "$OUT/hf_compare.log"
fi
exit $status
