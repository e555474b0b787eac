"""Overflow detection for loss scaling that stays on the device (no host sync)."""

import torch


def found_nonfinite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """0-dim fp32 tensor on the first tensor's device: 1.0 if any element is inf or nan, else 0.0.

    One multi-tensor max-abs reduction (inf and nan both survive a max), then a comparison on the
    device; reading the result is the caller's choice, so CUDA streams never stall here.
    """
    if not tensors:
        return torch.zeros(())
    device = tensors[0].device
    max_abs = torch.stack([n.to(device, non_blocking=True) for n in torch._foreach_norm(tensors, float("inf"))])  # (n,)
    return (~max_abs.isfinite()).any().float()
