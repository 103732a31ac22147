#!/bin/bash
# Host side, before run40.sh: the stripped release binaries it compares.
#   target/release/tessel_h_s  — this checkout (HEAD: the warpgroup attention tile by default,
#                                CTAs dealt heaviest first, forward and backward)
#   target/release/tessel_w_s  — 0469925 (the tile by default, CTAs in grid order)
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release -p tessel
strip -o target/release/tessel_h_s target/release/tessel
d=$(mktemp -d)
git worktree add -q "$d/old" 0469925
(cd "$d/old" && CARGO_TARGET_DIR=$PWD/../target cargo build --release -p tessel)
strip -o target/release/tessel_w_s "$d/target/release/tessel"
git worktree remove --force "$d/old"
ls -la target/release/tessel_h_s target/release/tessel_w_s
