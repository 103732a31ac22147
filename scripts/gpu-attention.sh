#!/usr/bin/env bash
# GPU checks and benchmarks of the fused attention schedule, one run on the device machine:
# - `tessel check` of tests/programs/attention.tsl (GQA prefill, decode over a KV cache,
#   unmasked f16, the mask written the other way round) at shapes with tails, in the fast and
#   invariant profiles (fused: the GPU judged by the reference) and exact (unfused: GPU ==
#   executor bit for bit); the Qwen3-14B head counts at sizes the CPU reference finishes;
#   q computed in the kernel's prologue (QK-norm and RoPE), also over split keys;
# - compute-sanitizer memcheck and racecheck on the fused kernel (prefill and decode);
# - `tessel bench` of tests/programs/attention_bench.tsl (prefill T = 2048 and 4096, decode
#   B = 8 over a cache of 4096) and tests/gpu/sdpa_bench.py (torch SDPA at the same shapes).
# Usage: scripts/gpu-attention.sh BIN OUTDIR [checks|sanitizer|bench|all]
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu-attention}
MODE=${3:-all}
mkdir -p "$OUT"
failed=()
step() { local name=$1 log=$2; shift 2
  echo "+ $*" | tee -a "$OUT/$log"
  "$@" >>"$OUT/$log" 2>&1 || failed+=("$name")
  tail -n 30 "$OUT/$log" | grep -E "PASS|FAIL|ERROR SUMMARY|RACECHECK SUMMARY|µs|error" | tail -n 6
}
want() { [ "$MODE" = all ] || [ "$MODE" = "$1" ]; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/device.txt"
A=tests/programs/attention.tsl
if want checks; then
  for prof in fast invariant exact; do
    step "prefill-$prof-7" check.log "$BIN" check $A --step prefill --profile $prof --dim T=7 --dim H=5 --dim KV=1 --dim D=32
    step "prefill-$prof-129" check.log "$BIN" check $A --step prefill --profile $prof --dim T=129 --dim H=4 --dim KV=2 --dim D=64
    step "prefill-$prof-qwen" check.log "$BIN" check $A --step prefill --profile $prof --dim T=200 --dim H=40 --dim KV=8 --dim D=128
    step "decode-$prof-len0" check.log "$BIN" check $A --step decode --profile $prof --dim B=3 --dim N=1 --dim S=1 --dim H=8 --dim KV=2 --dim D=64
    step "decode-$prof-qwen" check.log "$BIN" check $A --step decode --profile $prof --dim B=8 --dim N=8 --dim S=300 --dim H=40 --dim KV=8 --dim D=128
    step "decode-$prof-129" check.log "$BIN" check $A --step decode --profile $prof --dim B=2 --dim N=7 --dim S=129 --dim H=5 --dim KV=1 --dim D=128
    step "full-$prof" check.log "$BIN" check $A --step full_f16 --profile $prof --dim H=3 --dim T=65 --dim S=129 --dim D=32
    step "arms-$prof" check.log "$BIN" check $A --step masked_arms --profile $prof --dim H=2 --dim T=70 --dim D=64
    step "prologue-$prof-qwen" check.log "$BIN" check $A --step prologue --profile $prof --dim T=129 --dim H=40 --dim KV=8 --dim D=128
    step "prologue-$prof-kept" check.log "$BIN" check $A --step prologue_kept --profile $prof --dim T=33 --dim H=5 --dim KV=1 --dim D=64
    step "prologue-$prof-split" check.log "$BIN" check $A --step prologue_decode --profile $prof --dim B=2 --dim N=8 --dim S=1100 --dim H=40 --dim KV=8 --dim D=128
  done
fi
if want sanitizer; then
  SAN="compute-sanitizer --error-exitcode 3"
  step memcheck-prefill sanitizer.log $SAN --tool memcheck "$BIN" run $A --step prefill --profile fast --dim T=129 --dim H=8 --dim KV=2 --dim D=128 -o /tmp/a1.safetensors
  step memcheck-decode sanitizer.log $SAN --tool memcheck "$BIN" run $A --step decode --profile fast --dim B=3 --dim N=7 --dim S=200 --dim H=8 --dim KV=2 --dim D=128 -o /tmp/a2.safetensors
  step racecheck-prefill sanitizer.log $SAN --tool racecheck "$BIN" run $A --step prefill --profile fast --dim T=129 --dim H=8 --dim KV=2 --dim D=128 -o /tmp/a3.safetensors
  step racecheck-decode sanitizer.log $SAN --tool racecheck "$BIN" run $A --step decode --profile fast --dim B=3 --dim N=7 --dim S=200 --dim H=8 --dim KV=2 --dim D=128 -o /tmp/a4.safetensors
  step racecheck-prologue sanitizer.log $SAN --tool racecheck "$BIN" run $A --step prologue_decode --profile fast --dim B=2 --dim N=8 --dim S=1100 --dim H=40 --dim KV=8 --dim D=128 -o /tmp/a5.safetensors
fi
if want bench; then
  AB=tests/programs/attention_bench.tsl
  for t in 2048 4096; do
    step "bench-prefill-$t" bench.log "$BIN" bench $AB --step prefill --profile fast --dim T=$t --rounds 21
  done
  step bench-decode bench.log "$BIN" bench $AB --step decode --profile fast --dim B=8 --dim N=1 --dim S=4096 --fill len=iota:4088 --rounds 21
  step sdpa bench.log python3 tests/gpu/sdpa_bench.py "$OUT/sdpa.json"
fi
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-attention ($MODE): all steps passed"
