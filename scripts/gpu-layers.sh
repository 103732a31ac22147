#!/usr/bin/env bash
# Whole decoder layers on the device (issue 9): each model's layer against transformers
# (tests/gpu/run_hf_checks.sh: a seeded checkpoint in Hugging Face's sharded layout, the
# same weights and inputs through Qwen3DecoderLayer / Qwen2DecoderLayer, eager and SDPA),
# then `tessel bench` of the layer beside tests/gpu/bench_torch.py's HF layer timings.
# Usage: scripts/gpu-layers.sh BIN OUTDIR [checks|bench|all] [MODELS...]
#   MODELS: qwen3_14b qwen2_5_14b qwen3_32b llama3_8b (default: all four). CASES (prefill) and
#   PROFILE (fast) as environment variables.
set -uo pipefail
BIN=${1:-target/release/tessel}
OUT=${2:-out/gpu-layers}
MODE=${3:-all}
shift 3 2>/dev/null || shift $#
MODELS=${*:-qwen3_14b qwen2_5_14b qwen3_32b llama3_8b}
PROFILE=${PROFILE:-fast}
export CASES=${CASES:-prefill}
mkdir -p "$OUT"
failed=()
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv | tee "$OUT/device.txt"
for m in $MODELS; do
  if [ "$MODE" = all ] || [ "$MODE" = checks ]; then
    echo "== $m: against transformers ($PROFILE)"
    TESSEL_ARGS="--profile $PROFILE" bash tests/gpu/run_hf_checks.sh "$BIN" "$OUT/hf_${m}_$PROFILE" "$m" \
      > "$OUT/hf_${m}_$PROFILE.log" 2>&1 || failed+=("hf-$m")
    tail -n 12 "$OUT/hf_${m}_$PROFILE.log"
    rm -rf "$OUT/hf_${m}_$PROFILE/checkpoint"
  fi
  if [ "$MODE" = all ] || [ "$MODE" = bench ]; then
    echo "== $m: bench"
    batch=(); [ "$m" = llama3_8b ] && batch=(--dim B=1)   # the batched form: x [B, T, H]
    "$BIN" bench examples/$m/layer.tsl --step prefill --profile "$PROFILE" --dim T=2048 "${batch[@]}" --rounds 11 \
      > "$OUT/bench_$m.log" 2>&1 || failed+=("bench-$m")
    grep -E "step|total|µs" "$OUT/bench_$m.log" | tail -n 20
    python3 tests/gpu/bench_torch.py --config examples/$m/config.json --cases copy,prefill \
      --json "$OUT/torch_$m.json" > "$OUT/torch_$m.log" 2>&1 || failed+=("torch-$m")
    tail -n 15 "$OUT/torch_$m.log"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then echo "FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-layers ($MODE): all steps passed"
