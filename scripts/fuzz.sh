#!/usr/bin/env bash
# The differential fuzzer at scale: N random well-typed programs (default 10000) compiled in
# every profile by turns, run on the CPU executor (and the GPU when there is one) and judged
# by the dtype-following reference. Every failure is shrunk to a small program and saved
# under tests/programs/regressions/, where `cargo test` runs it from then on.
# Usage: scripts/fuzz.sh [N] [FIRST_SEED] [extra `tessel fuzz` flags, e.g. --large, --cpu,
# --attention (attention blocks, fused or near misses), --grad (gradient programs, also
# judged against finite differences)]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
N=${1:-10000}
FIRST=${2:-0}
shift $(( $# < 2 ? $# : 2 ))
cargo build --release -p tessel --quiet
exec target/release/tessel fuzz --count "$N" --seed "$FIRST" --profile all \
    --save tests/programs/regressions "$@"
