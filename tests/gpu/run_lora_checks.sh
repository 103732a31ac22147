#!/usr/bin/env bash
# One model's LoRA training step, tessel's `grad` vs PEFT + torch autograd, on the GPU (issue 18):
#   0. a seeded random checkpoint of layers 0 and 1 in 3 shards (scripts/make_checkpoint.py);
#      layer 1 is the one run (adapters of layer 0 are there too, with other values);
#   1. the cases below, each as lora_layer.py inputs -> tessel run (per profile) -> lora_layer.py compare:
#        grads         step grads, T tokens, B ~ N(0, 0.02^2): out, dx and the 14 adapter gradients
#        grads_b0      step grads with B = 0 (PEFT's start): every dA must be exactly 0
#        mse           step mse_grads, B ~ N(0, 0.02^2): the MSE loss and the 14 gradients
#        grads_small   step grads at SMALL_T tokens (an odd size: the tails of every tile)
# Usage: tests/gpu/run_lora_checks.sh TESSEL_BIN OUT [MODEL]
#   MODEL: qwen3_14b (default) or qwen2_5_14b (examples/lora/MODEL_lora.tsl, examples/MODEL/config.json).
#   Environment: T (2048), R (16), SMALL_T (77), SEED (1), LAYER (1), CASES ("grads grads_b0 mse
#   grads_small"), PROFILES ("exact": one tessel run and compare per profile), TESSEL_ARGS (extra
#   `tessel run` arguments), MAX_REL_RMS (1e-1, compare's sanity bound), F64 (1: also the float64
#   reference; 0 skips it), TSL and CONFIG (other files than the model's), DEVICE (cuda; cpu
#   only checks the plumbing), PYTHON (python3), CK (an existing checkpoint directory to use
#   instead of writing one).
# Writes OUT/<step>.log per step, OUT/<case>/ (inputs, adapters, weights/, PEFT's and tessel's
# outputs, compare.<profile>.json) and OUT/summary.txt; exits non-zero, naming the failed
# steps, if any command failed.
set -uo pipefail
BIN=${1:?usage: run_lora_checks.sh TESSEL_BIN OUT [MODEL]}
OUT=${2:?usage: run_lora_checks.sh TESSEL_BIN OUT [MODEL]}
MODEL=${3:-qwen3_14b}
SEED=${SEED:-1}
LAYER=${LAYER:-1}
T=${T:-2048}
R=${R:-16}
SMALL_T=${SMALL_T:-77}
PROFILES=${PROFILES:-exact}
TESSEL_ARGS=${TESSEL_ARGS:-}
MAX_REL_RMS=${MAX_REL_RMS:-1e-1}
F64=${F64:-1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
TSL=${TSL:-$ROOT/examples/lora/${MODEL}_lora.tsl}
CONFIG=${CONFIG:-$ROOT/examples/$MODEL/config.json}
DEVICE=${DEVICE:-cuda}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
CK=${CK:-$OUT/checkpoint}
export PYTHONUNBUFFERED=1
failed=()
F64_ARGS=()
[ "$F64" = 1 ] || F64_ARGS=(--no-f64)

# The dims of the LoRA steps: T tokens, R the adapters' rank.
lora_dims() { echo "--dim T=$1 --dim R=$R"; }

step() { # step NAME CMD...: runs CMD with its output in OUT/NAME.log; a failure is recorded
  local name=$1; shift
  echo "+ $*" | tee "$OUT/$name.log"
  local t0=$SECONDS
  "$@" >>"$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    echo "  ok: $name ($((SECONDS - t0)) s)"
    return 0
  fi
  echo "  FAILED: $name (exit $rc; last lines of $OUT/$name.log:)"
  tail -n 15 "$OUT/$name.log" | sed 's/^/    /'
  failed+=("$name")
  return 1
}

case_run() { # case_run NAME STEP TOKENS LORA_LAYER_ARGS...: inputs, then tessel + compare per profile
  local name=$1 tstep=$2 tokens=$3; shift 3
  local d=$OUT/$name
  step "$name-inputs" "$PY" "$HERE/lora_layer.py" inputs --config "$CONFIG" --checkpoint "$CK" \
    --layer "$LAYER" --T "$tokens" --R "$R" --seed "$SEED" --device "$DEVICE" --out "$d" \
    "${F64_ARGS[@]}" "$@" || return
  local p
  for p in $PROFILES; do
    # --weights is the merged index lora_layer.py wrote: the checkpoint's base weights and the
    # adapters under their PEFT names (a `from` parameter cannot also come from --inputs).
    # shellcheck disable=SC2086  # dims and TESSEL_ARGS are word lists
    step "$name-tessel-$p" "$BIN" run "$TSL" --step "$tstep" --weights "$d/weights" --layer "$LAYER" \
      --inputs "$d/inputs.safetensors" $(lora_dims "$tokens") --profile "$p" $TESSEL_ARGS \
      -o "$d/tessel.$p.safetensors" || continue
    step "$name-compare-$p" "$PY" "$HERE/lora_layer.py" compare --out "$d" --tessel "$d/tessel.$p.safetensors" \
      --json "$d/compare.$p.json" --max-rel-rms "$MAX_REL_RMS"
    sed -n '/^tensor /,/^$/p' "$OUT/$name-compare-$p.log"
  done
}

for f in "$BIN" "$TSL" "$CONFIG"; do
  [ -e "$f" ] || { echo "run_lora_checks: $f does not exist" >&2; exit 2; }
done
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; "$BIN" --version; \
  "$PY" -c 'import torch, transformers, peft; print("torch", torch.__version__, "transformers", transformers.__version__, "peft", peft.__version__)'; \
  git -C "$ROOT" rev-parse HEAD; } >"$OUT/environment.txt" 2>&1

if [ ! -e "$CK/config.json" ]; then
  step checkpoint "$PY" "$ROOT/scripts/make_checkpoint.py" "$CONFIG" "$CK" --layers 0,1 --seed "$SEED" --shards 3 \
    || { echo "run_lora_checks: no checkpoint, nothing else can run" >&2; exit 1; }
fi

CASES=${CASES:-grads grads_b0 mse grads_small}
for c in $CASES; do
  case $c in
    grads) case_run "grads_T${T}" grads "$T" --loss dot --b-init normal ;;
    grads_b0) case_run "grads_T${T}_b0" grads "$T" --loss dot --b-init zero ;;
    mse) case_run "mse_T${T}" mse_grads "$T" --loss mse --b-init normal ;;
    grads_small) case_run "grads_T${SMALL_T}" grads "$SMALL_T" --loss dot --b-init normal ;;
    *) echo "run_lora_checks: unknown case $c (grads, grads_b0, mse, grads_small)" >&2; failed+=("case-$c") ;;
  esac
done

{
  echo "model $MODEL, layer $LAYER, seed $SEED, R $R, profiles: $PROFILES, tessel args: ${TESSEL_ARGS:-none}"
  for j in "$OUT"/*/compare.*.json; do
    [ -e "$j" ] || continue
    "$PY" - "$j" <<'EOF'
import json, os, sys
r = json.load(open(sys.argv[1]))
case = sys.argv[1].split("/")[-2]
prof = os.path.basename(sys.argv[1])[len("compare."):-len(".json")]
f = lambda v: f"{v:.2e}" if isinstance(v, float) else "-"  # noqa: E731
for row in r["summary"]:
    e = r["outputs"][row["tensor"]]
    zero = e.get("expected_zero")
    z = f" expected-0 nonzero {zero['tessel_nonzero']}" if zero else ""
    print(f"{case:<18} {prof:<9} {row['tensor']:<5} rel(t,eager) {f(row['tessel_vs_eager'])} rel(e,sdpa) "
          f"{f(row['eager_vs_sdpa'])} yardstick {f(row['yardstick'])} rel(t,f64) {f(row['tessel_vs_f64'])} "
          f"rel(e,f64) {f(row['eager_vs_f64'])} accuracy {f(row['accuracy'])}{z}")
for msg in r["failures"]:
    print(f"{case:<18} {prof:<9} FAILED {msg}")
EOF
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "run_lora_checks: every step ran (the numbers are in $OUT/summary.txt and $OUT/*/compare.*.json)"
