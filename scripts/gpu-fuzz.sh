#!/usr/bin/env bash
# The differential fuzzer on the GPU (design §9): random well-typed programs, each run on the
# GPU and on the CPU executor; in the exact profile the GPU must equal the executor bit for
# bit, in the others (tensor cores) both are judged by the dtype-following reference. Then the
# regression corpus through `tessel check` on the GPU, and compute-sanitizer on a sample.
# Usage: scripts/gpu-fuzz.sh BIN OUTDIR [N] [FIRST]   (BIN: a release build of tessel; N
# programs per batch, default 1000; FIRST offsets every batch's seeds, default 0). Writes logs
# to OUTDIR; exits non-zero if any step failed.
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu-fuzz}
N=${3:-1000}
FIRST=${4:-0}
mkdir -p "$OUT/saved"
failed=()
step() { # step NAME LOG CMD...
  local name=$1 log=$2; shift 2
  echo "+ $*" | tee -a "$OUT/$log"
  local t0=$SECONDS
  "$@" >>"$OUT/$log" 2>&1 || failed+=("$name")
  echo "  ($((SECONDS - t0)) s)" >>"$OUT/$log"
  tail -n 3 "$OUT/$log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/fuzz.log"
step fuzz-exact fuzz.log "$BIN" fuzz --count "$N" --seed "$FIRST" --profile exact --save "$OUT/saved"
step fuzz-all fuzz.log "$BIN" fuzz --count "$N" --seed $((FIRST + 100000)) --profile all --save "$OUT/saved"
step fuzz-large fuzz.log "$BIN" fuzz --count $((N / 4)) --seed $((FIRST + 2000000)) --profile all --large --save "$OUT/saved"
# The regression corpus: every file with its own dims and profiles, GPU vs executor.
for f in tests/programs/regressions/*.tsl; do
  dims=$(sed -n 's#^// dims: ##p' "$f" | head -1)
  profiles=$(sed -n 's#^// profile: ##p' "$f" | head -1)
  args=()
  for d in $dims; do args+=(--dim "$d"); done
  for p in ${profiles:-exact}; do
    step "check-$(basename "$f" .tsl)-$p" regressions.log "$BIN" check "$f" "${args[@]}" --profile "$p"
  done
done
step memcheck-fuzz sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 3 "$BIN" fuzz --count 60 --seed 500 --profile all
step racecheck-fuzz sanitizer.log compute-sanitizer --tool racecheck --error-exitcode 3 "$BIN" fuzz --count 30 --seed 700 --profile all
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-fuzz: all steps passed"
