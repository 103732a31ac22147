#!/usr/bin/env bash
# Install ptxas from the CUDA 13.0 nvcc wheel on PyPI into <repo>/tools/nvcc/.
#
# The wheel needs no GPU and no driver: ptxas is a plain x86-64 Linux binary.
# Idempotent: if the pinned ptxas is already there and reports 13.0, nothing is downloaded.
# Prints the absolute path of ptxas on its last line of stdout.
#
# Override the interpreter with PYTHON=/path/to/python3.
set -euo pipefail

readonly PACKAGE="nvidia-cuda-nvcc"
readonly VERSION="13.0.88"
readonly WANT_RELEASE="release 13.0"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="${repo_root}/tools/nvcc"
# Layout of nvidia-cuda-nvcc 13.x wheels; searched below as a fallback if it ever moves.
ptxas="${target}/nvidia/cu13/bin/ptxas"
python="${PYTHON:-python3}"

find_ptxas() {
    if [[ -x "${ptxas}" ]]; then
        return 0
    fi
    local found
    found="$(find "${target}" -type f -name ptxas -path '*/bin/*' 2>/dev/null | head -n 1 || true)"
    if [[ -n "${found}" ]]; then
        ptxas="${found}"
        return 0
    fi
    return 1
}

version_ok() {
    # Capture first: `ptxas | grep -q` can die of SIGPIPE, which pipefail turns into a failure.
    local version
    version="$("${ptxas}" --version 2>/dev/null)" || return 1
    [[ "${version}" == *"${WANT_RELEASE}"* ]]
}

stamp="${target}/.installed-${PACKAGE}-${VERSION}"

if [[ -f "${stamp}" ]] && find_ptxas && version_ok; then
    echo "ptxas ${VERSION} already installed" >&2
else
    echo "installing ${PACKAGE}==${VERSION} into ${target}" >&2
    if ! "${python}" -m pip --version >/dev/null 2>&1; then
        echo "error: '${python} -m pip' is not available; install python3-pip first" >&2
        exit 1
    fi
    rm -rf "${target}"
    mkdir -p "${target}"
    PIP_ROOT_USER_ACTION=ignore "${python}" -m pip install --quiet --disable-pip-version-check --no-input \
        --no-deps --no-compile --target "${target}" "${PACKAGE}==${VERSION}" >&2
    if ! find_ptxas; then
        echo "error: ptxas not found under ${target} after installing ${PACKAGE}==${VERSION}" >&2
        exit 1
    fi
    # pip keeps the wheel's modes, but make sure the binary is executable anyway.
    chmod +x "${ptxas}"
    touch "${stamp}"
fi

if ! version_ok; then
    echo "error: ${ptxas} does not report '${WANT_RELEASE}':" >&2
    "${ptxas}" --version >&2 || true
    exit 1
fi

"${ptxas}" --version | sed -n '/release/p' >&2
echo "${ptxas}"
