"""Which kernel implementation a VNode op runs during training: a fixed table, the one place it is decided.

The choice depends on the device and the shape only, never on a timing: two implementations round
differently, and PNode processes that timed differently would stop computing the same numbers (a
session on 1 PNode and on 3 would differ, and so would a spot check's recomputation). Every process
that hosts a VNode makes the same choice for it.

- attention: CUDA takes the Triton flash kernel where Triton works and the head dim is in its
  contract (32..128), else torch's SDPA; the CPU (and MPS) take SDPA, whose CPU flash kernel is
  memory-bounded too.
- LM head + cross-entropy: CUDA takes the Triton row kernel where Triton works, else the chunked
  path; the CPU takes the chunked path (it accumulates the tied weight's gradient in fp32).

`bench/kernels.py` times exactly these choices against torch's own best (SDPA,
`F.linear_cross_entropy`, `AdamW(fused=True)`); its figures are in docs/benchmarks.md.
`COMPUTEALL_TRAIN_ATTENTION` / `COMPUTEALL_TRAIN_LCE` replace the table with one implementation
name (every process of a session must then be given the same).
"""

from __future__ import annotations

import os

import torch

from computeall.kernels import attention, lce
from computeall.kernels.triton_support import triton_usable

TRITON_HEAD_DIMS = range(32, 129)


def _override(variable: str, names: tuple[str, ...]) -> str | None:
    name = os.environ.get(variable)
    if name and name not in names:
        raise ValueError(f"{variable}={name!r} names no implementation; one of {', '.join(names)}, or unset it")
    return name or None


def attention_impl(device: torch.device, head_dim: int) -> str:
    override = _override("COMPUTEALL_TRAIN_ATTENTION", attention.IMPLS)
    if override:
        return override
    if device.type == "cuda" and head_dim in TRITON_HEAD_DIMS and triton_usable(device):
        return "triton"
    return "sdpa"


def lce_impl(device: torch.device) -> str:
    override = _override("COMPUTEALL_TRAIN_LCE", lce.IMPLS)
    if override:
        return override
    if device.type == "cuda" and triton_usable(device):
        return "triton"
    return "chunked"
