#!/usr/bin/env bash
# On a machine with a CUDA GPU: install computeall with the kernels extra into a venv, run the
# kernel tests on CUDA (Triton compiled for real), run the kernel benchmark, print one table.
# Usage: bench/gpu_check.sh [--quick]   (VENV=path to reuse a venv; default .venv-gpu)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no CUDA GPU visible (nvidia-smi failed); nothing to check" >&2
    exit 2
fi
nvidia-smi -L

VENV="${VENV:-.venv-gpu}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
# torch is pinned in pyproject (torch==2.13.0); pip resolves the CUDA build from the default index.
"$VENV/bin/pip" install -q -e '.[dev,kernels]'
"$VENV/bin/python" - <<'PY'
import torch, triton
assert torch.cuda.is_available(), "torch was installed without CUDA support"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, {torch.cuda.get_device_name()}")
PY

# test_cuda.py runs every kernel on the device; the interpreter module skips itself when CUDA is present.
"$VENV/bin/python" -m pytest tests/unit/kernels -q -rs

"$VENV/bin/python" bench/kernels.py --device cuda --json bench/results/kernels_cuda.json "$@"
