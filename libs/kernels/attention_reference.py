"""Plain-torch attention: the readable ground truth for every flash-attention path.

Materializes the full T x T score matrix, so it is only for tests and small shapes.
"""

import math

import torch


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True) -> torch.Tensor:
    """softmax(q k^T / sqrt(D) + causal mask) v, computed in fp32 and returned in q's dtype."""
    t, d = q.shape[-2], q.shape[-1]
    scores = q.float() @ k.float().transpose(-1, -2) / math.sqrt(d)  # (B, H, T, T)
    if causal:
        future = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)  # (T, T)
        scores = scores.masked_fill(future, float("-inf"))
    return (scores.softmax(dim=-1) @ v.float()).to(q.dtype)  # (B, H, T, D)
