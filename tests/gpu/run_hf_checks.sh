#!/usr/bin/env bash
# One model's decoder layer, tessel vs Hugging Face transformers, on the GPU (design §9, §11):
#   0. a seeded random checkpoint of layers 0 and 1 in 3 shards (scripts/make_checkpoint.py);
#      layer 1 is the one run, so a loader that picks the wrong layer or shard shows;
#   1. tests/gpu/hf_layer_selftest.py: hf_layer.py's layer call == the HF model's forward, bit for bit;
#   2. prefill, T = 2048 at positions 0..2047 (PREFILL_T, PREFILL_OFFSET);
#   3. decode, T = 1 and 8 new tokens, batch 1 (a seeded length) and 8 (lengths 0, 1, 64, 127,
#      128, 1000, 2049, S - T: the edges), cache capacity S = 4096;
#   each of 2-3: hf_layer.py inputs -> tessel run -> hf_layer.py compare.
# Usage: tests/gpu/run_hf_checks.sh TESSEL_BIN OUT [MODEL]
#   MODEL: qwen3_14b (default), qwen2_5_14b, qwen3_32b or llama3_8b
#   (examples/MODEL/{layer.tsl,config.json}).
#   Environment: TESSEL_ARGS (extra `tessel run` arguments, e.g. "--profile fast"), SEED (1),
#   LAYER (1), CAPACITY (4096), PREFILL_T (2048), PREFILL_OFFSET (0: the first token's position), LENS_B8 (the batch-8 lengths), TSL and CONFIG (other files than the model's),
#   DEVICE (cuda; cpu only checks the plumbing), PYTHON (python3), CASES ("prefill decode":
#   which of 2-3 run; the layers have no decode step yet).
# Writes OUT/<step>.log per step, OUT/<case>/ (inputs, HF's and tessel's outputs, compare.json)
# and OUT/summary.txt; exits non-zero, naming the failed steps, if any command failed.
set -uo pipefail
BIN=${1:?usage: run_hf_checks.sh TESSEL_BIN OUT [MODEL]}
OUT=${2:?usage: run_hf_checks.sh TESSEL_BIN OUT [MODEL]}
MODEL=${3:-qwen3_14b}
SEED=${SEED:-1}
LAYER=${LAYER:-1}
S=${CAPACITY:-4096}
PREFILL_T=${PREFILL_T:-2048}
TESSEL_ARGS=${TESSEL_ARGS:-}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TSL=${TSL:-$ROOT/examples/$MODEL/layer.tsl}
CONFIG=${CONFIG:-$ROOT/examples/$MODEL/config.json}
DEVICE=${DEVICE:-cuda}
CK=$OUT/checkpoint
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
failed=()

# The dims of layer.tsl's steps. Decode: B sequences, T new tokens each, S cache rows.
# A layer written in the batched form (examples/llama3_8b: x [B, T, H] in prefill too) runs
# its prefill as a batch of one sequence (BATCHED_PREFILL=1; the default for llama3_8b).
case $MODEL in llama3_8b) BATCHED_PREFILL=${BATCHED_PREFILL:-1} ;; esac
BATCHED_PREFILL=${BATCHED_PREFILL:-0}
PREFILL_HF_ARGS=()
if [ "$BATCHED_PREFILL" = 1 ]; then
  prefill_dims() { echo "--dim B=1 --dim T=$1"; }
  PREFILL_HF_ARGS=(--batched)
else
  prefill_dims() { echo "--dim T=$1"; }
fi
decode_dims() { echo "--dim B=$1 --dim T=$2 --dim S=$3"; }

step() { # step NAME CMD...: runs CMD with its output in OUT/NAME.log; a failure is recorded
  local name=$1; shift
  echo "+ $*" | tee "$OUT/$name.log"
  "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "  ok: $name"
    return 0
  fi
  echo "  FAILED: $name (exit $rc; last lines of $OUT/$name.log:)"
  tail -n 15 "$OUT/$name.log" | sed 's/^/    /'
  failed+=("$name")
  return 1
}

case_run() { # case_run NAME STEP "TESSEL DIMS" HF_LAYER_ARGS...: inputs, tessel, compare
  local name=$1 tstep=$2 dims=$3; shift 3
  local d=$OUT/$name
  step "$name-inputs" "$PY" "$HERE/hf_layer.py" inputs --config "$CONFIG" --checkpoint "$CK" \
    --layer "$LAYER" --seed "$SEED" --device "$DEVICE" --out "$d" "$@" || return
  # shellcheck disable=SC2086  # dims and TESSEL_ARGS are word lists
  step "$name-tessel" "$BIN" run "$TSL" --step "$tstep" --weights "$CK" --layer "$LAYER" \
    --inputs "$d/inputs.safetensors" $dims $TESSEL_ARGS -o "$d/tessel.safetensors" || return
  step "$name-compare" "$PY" "$HERE/hf_layer.py" compare --out "$d"
  sed -n '/^attn\|^out\|^k_new\|^v_new\|^  tessel vs\|^  eager vs\|changed outside/p' "$OUT/$name-compare.log"
}

for f in "$BIN" "$TSL" "$CONFIG"; do
  [ -e "$f" ] || { echo "run_hf_checks: $f does not exist" >&2; exit 2; }
done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$BIN" --version; \
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'; \
  git -C "$ROOT" rev-parse HEAD; } >"$OUT/environment.txt" 2>&1

step checkpoint "$PY" "$ROOT/scripts/make_checkpoint.py" "$CONFIG" "$CK" --layers 0,1 --seed "$SEED" --shards 3 \
  || { echo "run_hf_checks: no checkpoint, nothing else can run" >&2; exit 1; }
step hf-layer-selftest "$PY" "$HERE/hf_layer_selftest.py" --device "$DEVICE"

CASES=${CASES:-prefill decode}
OFFSET=${PREFILL_OFFSET:-0}
[[ " $CASES " == *" prefill "* ]] && case_run "prefill_T${PREFILL_T}_at$OFFSET" prefill "$(prefill_dims "$PREFILL_T")" --mode prefill --T "$PREFILL_T" --offset "$OFFSET" "${PREFILL_HF_ARGS[@]}"
for N in 1 8; do
  [[ " $CASES " == *" decode "* ]] || break
  # batch 1: a seeded length; batch 8: the edges (empty, one row, around tile sizes, full).
  case_run "decode_B1_T${N}" decode "$(decode_dims 1 "$N" "$S")" \
    --mode decode --batch 1 --T "$N" --capacity "$S"
  lens=${LENS_B8:-0,1,64,127,128,1000,2049,$((S - N))}
  case_run "decode_B8_T${N}" decode "$(decode_dims 8 "$N" "$S")" \
    --mode decode --batch 8 --T "$N" --capacity "$S" --lens "$lens"
done

{
  echo "model $MODEL, layer $LAYER, seed $SEED, tessel args: ${TESSEL_ARGS:-none}"
  for j in "$OUT"/*/compare.json; do
    [ -e "$j" ] || continue
    "$PY" - "$j" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
case = sys.argv[1].split("/")[-2]
for o, e in r["outputs"].items():
    row = " ".join(f"{p}: rel_rms {s['rel_rms']:.2e} max_ulp {s['max_ulp']} differ {100 * s['differ_frac']:.2f}%"
                   for p, s in e.items() if not p.startswith("rel_rms_by"))
    print(f"{case:<18} {o:<6} {row}")
EOF
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "run_hf_checks: every step ran (the numbers are in $OUT/summary.txt and $OUT/*/compare.json)"
