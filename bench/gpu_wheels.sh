#!/usr/bin/env bash
# Fetch, on a machine with a network, the wheels bench/gpu_check.sh installs on a GPU machine that has
# none: what the kernel checks import beyond the GPU image's own Python packages (torch, Triton,
# pytest, safetensors, numpy, PyYAML are there; pydantic, blake3 and nats-py are not). CPython 3.12 on
# x86-64 Linux, the versions this checkout's virtualenv runs; one version of each.
# Usage: bench/gpu_wheels.sh   (or `make gpu-wheels`; WHEELS=folder, default bench/gpu_wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS="${WHEELS:-bench/gpu_wheels}"
PYTHON="${PYTHON:-.venv/bin/python}"
PACKAGES=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
          typing-extensions==4.16.0 blake3==1.0.11 nats-py==2.16.0)
mkdir -p "$WHEELS"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "${PACKAGES[@]}"
ls "$WHEELS"
