"""The optimizer a PNode runs on its own parameters: AdamW, decay on matrices only."""

from __future__ import annotations

import torch

from computeall.protocol.config import OptimizerConfig


def make_optimizer(params: dict[str, torch.nn.Parameter], config: OptimizerConfig) -> torch.optim.AdamW:
    """Parameter groups in name order, so that every placement builds the same optimizer."""
    names = sorted(params)
    decay = [params[n] for n in names if params[n].ndim >= 2]
    no_decay = [params[n] for n in names if params[n].ndim < 2]
    groups = [
        {"params": decay, "weight_decay": config.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        [g for g in groups if g["params"]], lr=0.0, betas=config.betas, eps=config.eps, foreach=False
    )


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
