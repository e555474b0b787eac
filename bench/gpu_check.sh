#!/usr/bin/env bash
# On a machine with a CUDA GPU, as it is: its own python3 with torch and Triton, no network.
#   1. computeall installed into a folder of its own, without its dependencies and without build
#      isolation (the machine's torch stays the one used), plus the few packages the checks import
#      that such a machine lacks, from wheels fetched beforehand (bench/gpu_wheels.sh, `make gpu-wheels`);
#   2. the kernel tests with Triton compiled for the GPU (tests/unit/kernels/test_cuda.py: fp32, fp16
#      and bf16, the 64x64 attention blocks, a vocabulary past one block), the table of kernels
#      training runs (kernel_choice) and a training step of the VNode runtime on CUDA against the CPU;
#   3. the kernel benchmark on CUDA: the kernels training runs against torch's own best.
# About 5 minutes on an H200 (most of it Triton compiling). Writes bench/results/kernels_cuda.json.
# Usage: bench/gpu_check.sh [--quick]      (PYTHON: the interpreter, default python3; WHEELS: the folder)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-$REPO/bench/gpu_wheels}"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: no CUDA GPU visible (nvidia-smi failed); nothing to check" >&2
    exit 2
fi
nvidia-smi -L
if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "gpu_check: no wheels in $WHEELS: run bench/gpu_wheels.sh (make gpu-wheels) where there is a network" >&2
    exit 2
fi

SITE="$(mktemp -d /tmp/computeall-gpu.XXXXXX)"
"$PYTHON" -m pip install --quiet --no-deps --no-build-isolation --no-index --no-compile --target "$SITE" "$REPO"
"$PYTHON" -m pip install --quiet --no-deps --no-index --no-compile --target "$SITE" "$WHEELS"/*.whl
# $SITE first: the checkout's own computeall/ folder holds only the top package (the rest is mapped
# from libs/, services/, cli/ at install), so nothing runs from the checkout's root
export PYTHONPATH="$SITE:$REPO"
cd "$SITE"
"$PYTHON" - <<'PY'
import torch, triton
assert torch.cuda.is_available(), "this torch has no CUDA"
print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), triton {triton.__version__}, {torch.cuda.get_device_name()}")
PY

# --confcutdir: the suite's top conftest starts nats-servers, which the kernel checks do not need
"$PYTHON" -m pytest -q -rs -p no:cacheprovider --confcutdir "$REPO/tests/unit" \
    "$REPO/tests/unit/kernels" "$REPO/tests/unit/tensorcore/test_kernel_choice.py" \
    "$REPO/tests/unit/tensorcore/test_cuda_step.py"

"$PYTHON" -m bench.kernels --device cuda --json "$REPO/bench/results/kernels_cuda.json" "$@"
