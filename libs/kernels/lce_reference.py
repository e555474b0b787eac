"""Plain-torch tied LM head + cross-entropy: the readable ground truth.

Materializes all N x V logits, so it is only for tests and small shapes.
"""

import torch
import torch.nn.functional as F


def linear_cross_entropy_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> torch.Tensor:
    """cross_entropy(x @ weight^T, targets), with the logits in fp32."""
    logits = x.reshape(-1, x.shape[-1]).float() @ weight.float().t()  # (N, V)
    return F.cross_entropy(logits, targets.reshape(-1), ignore_index=ignore_index, reduction=reduction)
