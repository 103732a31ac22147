#!/usr/bin/env bash
# Every GPU check of the examples in one run on the device machine (design §9, §10):
#   1. tessel check: GPU vs the kernel-IR executor bit for bit, and vs the f64 oracle, for the
#      examples at T=4096 (RoPE at positions 0.. and 127000..) and the test programs at odd shapes;
#   2. tessel bench: time and bandwidth of every kernel against the measured copy bandwidth;
#   3. compute-sanitizer memcheck on every example, racecheck on the shared-memory kernels;
#   4. tests/gpu/hf_compare.py: the same inputs through Hugging Face transformers;
#   5. the runtime's launches on memory and a stream it does not own (tessel-cuda's
#      tests/external.rs, and a compiled step on such memory in tessel-driver's tests/gpu.rs,
#      as the Python package will launch on torch's tensors and stream).
# Usage: scripts/gpu-check.sh BIN OUTDIR   (BIN: a release build of tessel). Writes a few logs
# and results.tar (the JSON records) to OUTDIR; exits non-zero if any step failed.
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu}
mkdir -p "$OUT/json"
T=4096
failed=()
step() { # step NAME LOG CMD...: runs CMD, appends its output to LOG, records a failure
  local name=$1 log=$2; shift 2
  echo "+ $*" | tee -a "$OUT/$log"
  "$@" >>"$OUT/$log" 2>&1 || failed+=("$name")
  tail -n 40 "$OUT/$log" | grep -E "PASS|FAIL|differs|ERROR SUMMARY|EXPLAIN|µs" | tail -n 12
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv >"$OUT/check.log"
step check-pos0 check.log "$BIN" check examples/qwen3_14b/rms_norm.tsl examples/qwen3_14b/rope.tsl examples/qwen3_14b/swiglu.tsl --dim T=$T --fill pos=iota:0 --json "$OUT/json/check_pos0.json"
step check-pos127000 check.log "$BIN" check examples/qwen3_14b/rope.tsl --dim T=$T --fill pos=iota:127000 --json "$OUT/json/check_pos127000.json"
for dims in "T=1 --dim D=5120" "T=7 --dim D=33" "T=3 --dim D=129" "T=64 --dim D=1000"; do
  step "check-programs-$dims" check.log "$BIN" check tests/programs/f32_paths.tsl tests/programs/shapes.tsl tests/programs/small.tsl --dim $dims
done
for ex in rms_norm rope swiglu; do
  step "bench-$ex" bench.log "$BIN" bench examples/qwen3_14b/$ex.tsl --dim T=$T --fill pos=iota:0 --json "$OUT/json/bench_$ex.json"
done
for ex in rms_norm rope swiglu; do
  step "memcheck-$ex" sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" run examples/qwen3_14b/$ex.tsl --dim T=$T -o /tmp/san_$ex.safetensors
done
step racecheck-rms_norm sanitizer.log compute-sanitizer --tool racecheck --error-exitcode 3 "$BIN" run examples/qwen3_14b/rms_norm.tsl --dim T=256 -o /tmp/race.safetensors
step memcheck-programs sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" run tests/programs/shapes.tsl --dim T=7 --dim D=33 -o /tmp/shapes.safetensors
for start in 0 127000; do
  D=/tmp/hf_$start
  for spec in "rms_norm hidden_norm" "rms_norm qk_norm" "rope rope_qk" "swiglu swiglu"; do
    set -- $spec
    [ "$start" != 0 ] && [ "$1" != rope ] && continue
    "$BIN" run examples/qwen3_14b/$1.tsl --dim T=$T --step $2 --seed 1 --fill pos=iota:$start \
      --save-inputs $D/$1/$2.inputs.safetensors --dump-temps -o $D/$1/$2.outputs.safetensors >>"$OUT/hf.log" 2>&1 || failed+=("hf-run-$2-$start")
  done
  step "hf-compare-pos$start" hf.log python3 tests/gpu/hf_compare.py $D --json "$OUT/json/hf_compare_pos$start.json"
done
step cuda-external runtime.log cargo test --release -p tessel-cuda --test external -- --ignored --test-threads=1
step driver-external runtime.log cargo test --release -p tessel-driver --test gpu -- --ignored --test-threads=1
tar -C "$OUT" -cf "$OUT/results.tar" json && rm -rf "$OUT/json"
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-check: all steps passed"
