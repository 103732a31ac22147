#!/bin/bash
# Host side, before runs 36 and 37: the two stripped release binaries they compare.
#   target/release/tessel_n_s  — this checkout (HEAD)
#   target/release/tessel_o_s  — 1c506b0 (stop 34's last commit: no exp_f32_nonpos, no
#                                one-instruction bf16 rounding, no whole-block K/V copies,
#                                no graph comparison in check)
# and the driver's GPU test binary (target/release/gpu_driver_s).
set -euo pipefail
cd "$(dirname "$0")/../../.."
cargo build --release -p tessel
strip -o target/release/tessel_n_s target/release/tessel
d=$(mktemp -d)
git worktree add -q "$d/old" 1c506b0
(cd "$d/old" && CARGO_TARGET_DIR=$PWD/../target cargo build --release -p tessel)
strip -o target/release/tessel_o_s "$d/target/release/tessel"
git worktree remove --force "$d/old"
t=$(cargo test --release -p tessel-driver --test gpu --no-run 2>&1 | sed -n 's/.*(\(target[^)]*\)).*/\1/p' | tail -1)
strip -o target/release/gpu_driver_s "$t"
ls -la target/release/tessel_n_s target/release/tessel_o_s target/release/gpu_driver_s
