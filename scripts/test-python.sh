#!/usr/bin/env bash
# The Python package's tests on the CPU (python/tests/, pytest): builds the extension in the
# dev profile into a virtual environment under tools/venv (maturin develop, reusing what
# `cargo test` built), then runs pytest. No GPU is needed; the GPU tests are
# tests/gpu/python_package.py, run on the device.
# Usage: scripts/test-python.sh [PYTEST ARGS...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

venv=tools/venv
if [[ ! -x "${venv}/bin/python" ]]; then
    python3 -m venv "${venv}"
fi
"${venv}/bin/pip" install --quiet --disable-pip-version-check \
    "maturin>=1.9.4,<2" "numpy>=1.21" "pytest>=7" "ml_dtypes>=0.3"
VIRTUAL_ENV="$(pwd)/${venv}" PATH="$(pwd)/${venv}/bin:${PATH}" \
    "${venv}/bin/maturin" develop --quiet
# The bit-for-bit comparisons run the command line: the binary `cargo test` built.
cargo build --quiet -p tessel
cd python/tests
exec "../../${venv}/bin/python" -m pytest -q "$@"
