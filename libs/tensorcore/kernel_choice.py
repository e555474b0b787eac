"""Which kernel implementation a VNode op asks the dispatcher for during training: a fixed table.

The dispatchers in `computeall.kernels` can time their candidates on first sight ("auto") and keep
the fastest. Training must not: timing noise can pick a different implementation in different
PNode processes, and two implementations round differently, so a session on 1 PNode and on 3
would stop computing the same numbers (and the distributed run would stop matching the
single-process reference). So the runtime names the implementation itself, by device, dtype and
shape only: every process that hosts a VNode makes the same choice for it.

The table (measured on the CPU with the training shapes of micro-gpt and tiny-gpt):
- attention: CUDA takes the Triton flash kernel where Triton works and the head dim is in its
  contract (32..128), else torch SDPA; CPU and MPS take torch SDPA (its CPU flash kernel is also
  memory-bounded and was 2-3x faster than the tiled torch path at T <= 256).
- LM head + cross-entropy: CUDA takes Triton where it works, else the chunked path; the CPU takes
  the chunked path (as fast as torch's chunked built-in in fp32, 1.5x faster in bf16, and it
  accumulates the tied weight's gradient in fp32).

`COMPUTEALL_TRAIN_ATTENTION` / `COMPUTEALL_TRAIN_LCE` override the table with one implementation
name (or "auto" for the measured choice, at the cost of that guarantee).
"""

from __future__ import annotations

import os

import torch

from computeall.kernels.triton_support import triton_usable


def attention_impl(device: torch.device, head_dim: int) -> str:
    override = os.environ.get("COMPUTEALL_TRAIN_ATTENTION")
    if override:
        return override
    if device.type == "cuda" and 32 <= head_dim <= 128 and triton_usable(device):
        return "triton"
    return "sdpa"


def lce_impl(device: torch.device) -> str:
    override = os.environ.get("COMPUTEALL_TRAIN_LCE")
    if override:
        return override
    if device.type == "cuda" and triton_usable(device):
        return "triton"
    return "chunked"
