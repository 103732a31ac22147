#!/usr/bin/env bash
# compute-sanitizer on every kernel of the three Qwen layers (issue 9): memcheck of the prefill
# and decode steps of each model, racecheck of each decode step and of Qwen3-14B's prefill,
# fast profile (the fused attention, its split-key and merge kernels, the cache updates, the
# GEMV and tensor-core GEMMs, the norms). Random weights and inputs (the kernels, not the
# values, are under test), at shapes that reach every schedule with tails:
#   prefill T = 33 at positions 131000 .. (RoPE's angles near 2^17);
#   decode B = 2, T = 8 over S = 1100 with lengths 1000 and 1001 (keys split into ranges of
#   256, the last range partly past the lengths, merged by a second kernel);
#   decode B = 3, T = 1 over S = 1100 with lengths 0, 1 and 2 (an empty and a one-row cache).
# Usage: scripts/gpu-layer-sanitizer.sh BIN OUTDIR [MODELS...]. Exits non-zero if any run
# reported an error or a hazard (--error-exitcode) or did not finish within its timeout.
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu-layer-sanitizer}
shift 2 2>/dev/null || shift $#
MODELS=${*:-qwen3_14b qwen2_5_14b qwen3_32b}
mkdir -p "$OUT"
LOG=$OUT/sanitizer.log
failed=()
san() { # san NAME TOOL ARGS...: one `tessel run` under the tool, 240 s at most
  local name=$1 tool=$2; shift 2
  echo "+ [$name] compute-sanitizer --tool $tool $BIN run $*" | tee -a "$LOG"
  timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 3 "$BIN" run "$@" \
    -o "/tmp/san_$name.safetensors" >>"$LOG" 2>&1 || failed+=("$name")
  tail -n 4 "$LOG" | grep -E "SUMMARY|error" | tail -n 2
}
for m in $MODELS; do
  L=examples/$m/layer.tsl
  PRE="--step prefill --profile fast --dim T=33 --fill pos=iota:131000"
  DEC8="--step decode --profile fast --dim B=2 --dim T=8 --dim S=1100 --fill len=iota:1000"
  DEC1="--step decode --profile fast --dim B=3 --dim T=1 --dim S=1100 --fill len=iota:0"
  # shellcheck disable=SC2086  # the dims are word lists
  {
    san "$m-memcheck-prefill" memcheck $L $PRE
    san "$m-memcheck-decode8" memcheck $L $DEC8
    san "$m-memcheck-decode1" memcheck $L $DEC1
    san "$m-racecheck-decode8" racecheck $L $DEC8
  }
done
# shellcheck disable=SC2086
san "qwen3_14b-racecheck-prefill" racecheck examples/qwen3_14b/layer.tsl \
  --step prefill --profile fast --dim T=33 --fill pos=iota:131000
"$BIN" explain examples/qwen3_14b/layer.tsl --step decode --profile fast --dim B=2 --dim T=8 \
  --dim S=1100 | grep -E "^  kernel" >"$OUT/kernels_decode8.txt"
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-layer-sanitizer: every run clean"
