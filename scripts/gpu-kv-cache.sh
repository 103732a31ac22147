#!/usr/bin/env bash
# A KV cache updated in place (tests/programs/kv_cache.tsl) on the GPU:
#   1. tessel check: GPU vs the kernel-IR executor (bit for bit in exact and invariant), and
#      both vs the reference, in every profile, with positions at random (-8 ..= 8: before the
#      start), from 0, and at the end (partly past it);
#   2. the inout buffer: `tessel run` on the GPU and on the executor from the same --inputs
#      write byte-identical output files (the updated cache included);
#   3. compute-sanitizer memcheck and racecheck of the update and decode kernels at S = 4096;
#   4. tessel bench of appending one row at S = 4096 and S = 65536: the update's time must
#      not grow with the cache (it never copies it).
# Usage: scripts/gpu-kv-cache.sh BIN OUTDIR. Exits non-zero if any step failed.
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu-kv}
mkdir -p "$OUT"
P=tests/programs/kv_cache.tsl
failed=()
step() { # step NAME LOG CMD...: runs CMD, appends its output to LOG, records a failure
  local name=$1 log=$2; shift 2
  echo "+ $*" | tee -a "$OUT/$log"
  "$@" >>"$OUT/$log" 2>&1 || failed+=("$name")
  tail -n 60 "$OUT/$log" | grep -E "FAIL|differs|ERROR SUMMARY|error|check:" | tail -n 6
}
nvidia-smi --query-gpu=name,driver_version --format=csv >"$OUT/check.log"
SMALL="--dim B=3 --dim KV=2 --dim R=2 --dim D=32 --dim S=40 --dim H=4 --dim N=2"
for prof in exact invariant fast; do
  step "check-$prof-random" check.log "$BIN" check $P $SMALL --profile $prof
  step "check-$prof-start" check.log "$BIN" check $P $SMALL --profile $prof --fill pos=iota:0
  step "check-$prof-end" check.log "$BIN" check $P $SMALL --profile $prof --fill pos=iota:37
done
ONE="--dim B=2 --dim KV=8 --dim R=1 --dim D=128 --dim H=40 --dim N=1"
step run-gpu run.log "$BIN" run $P --step decode $ONE --dim S=4096 --fill pos=iota:4094 \
  --save-inputs "$OUT/in.safetensors" -o "$OUT/gpu.safetensors"
step run-cpu run.log "$BIN" run $P --step decode $ONE --dim S=4096 --cpu \
  --inputs "$OUT/in.safetensors" -o "$OUT/cpu.safetensors"
step same-bytes run.log cmp "$OUT/gpu.safetensors" "$OUT/cpu.safetensors"
step memcheck sanitizer.log compute-sanitizer --tool memcheck --error-exitcode 3 \
  "$BIN" run $P $ONE --dim S=4096 --fill pos=iota:4095 -o /tmp/kv_mem.safetensors
step racecheck sanitizer.log compute-sanitizer --tool racecheck --error-exitcode 3 \
  "$BIN" run $P --step decode $ONE --dim S=4096 --fill pos=iota:100 -o /tmp/kv_race.safetensors
for s in 4096 65536; do
  step "bench-$s" bench.log "$BIN" bench $P --step append_only $ONE --dim S=$s --fill pos=iota:7 --rounds 9
done
grep -E "append_only_0|step" "$OUT/bench.log"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all passed"
