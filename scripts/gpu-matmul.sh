#!/usr/bin/env bash
# GPU checks of the matmul schedules (issue 3, first part), one run on the device machine:
# GPU vs executor bit for bit and vs the oracle (the Qwen3-14B gate projection at decode sizes
# and tests/programs/matmul.tsl at shapes with tails), memcheck, and tessel bench side by side
# with cuBLAS. Usage: scripts/gpu-matmul.sh BIN OUTDIR
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu}
mkdir -p "$OUT/json"
failed=()
step() { local name=$1 log=$2; shift 2
  echo "+ $*" | tee -a "$OUT/$log"
  "$@" >>"$OUT/$log" 2>&1 || failed+=("$name")
  tail -n 30 "$OUT/$log" | grep -E "PASS|FAIL|differs|ERROR SUMMARY|cuBLAS|µs" | tail -n 8
}
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/matmul_check.log"
for t in 1 8; do
  step "check-gate-T$t" matmul_check.log "$BIN" check examples/qwen3_14b/gate_proj.tsl --dim T=$t --json "$OUT/json/check_gate_T$t.json"
done
for mkn in "1 1 1" "1 7 5" "3 64 17" "8 520 33" "16 24 9" "17 33 65" "64 16 64" "70 100 130" "256 4096 16"; do
  set -- $mkn
  step "check-matmul-$1-$2-$3" matmul_check.log "$BIN" check tests/programs/matmul.tsl --dim M=$1 --dim K=$2 --dim N=$3
done
step memcheck-gate sanitizer_matmul.log compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" run examples/qwen3_14b/gate_proj.tsl --dim T=8 -o /tmp/g.safetensors
step memcheck-matmul sanitizer_matmul.log compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" run tests/programs/matmul.tsl --dim M=17 --dim K=33 --dim N=65 -o /tmp/m.safetensors
step racecheck-simt sanitizer_matmul.log compute-sanitizer --tool racecheck --error-exitcode 3 "$BIN" run tests/programs/matmul.tsl --step plain --dim M=70 --dim K=100 --dim N=130 -o /tmp/r.safetensors
for t in 1 8; do
  step "bench-gate-T$t" bench_matmul.log "$BIN" bench examples/qwen3_14b/gate_proj.tsl --dim T=$t --rounds 21 --json "$OUT/json/bench_gate_T$t.json"
done
tar -C "$OUT" -cf "$OUT/matmul_results.tar" json && rm -rf "$OUT/json"
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-matmul: all steps passed"
