"""The optimizer a PNode runs on its own parameters: AdamW, decay on matrices only."""

from __future__ import annotations

import torch

from computeall.protocol.config import OptimizerConfig


class VNodeOptimizer:
    """AdamW over one PNode's parameters, named `<vnode>.<param>`.

    Parameter groups are built in name order, so every placement builds the same optimizer.
    """

    def __init__(self, params: dict[str, torch.nn.Parameter], config: OptimizerConfig) -> None:
        self.params = params
        names = sorted(params)
        groups = [
            {"params": [params[n] for n in names if params[n].ndim >= 2], "weight_decay": config.weight_decay},
            {"params": [params[n] for n in names if params[n].ndim < 2], "weight_decay": 0.0},
        ]
        self.torch_optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=0.0, betas=config.betas, eps=config.eps, foreach=False
        )

    def step(self, lr: float, loss_scale: float = 1.0) -> None:
        """Unscale the gradients by the loss scale, then update with learning rate `lr`."""
        if loss_scale != 1.0:
            for p in self.params.values():
                if p.grad is not None:
                    p.grad.div_(loss_scale)
        for group in self.torch_optimizer.param_groups:
            group["lr"] = lr
        self.torch_optimizer.step()

    def state_bytes(self) -> dict[str, int]:
        """Bytes held by the optimizer, by category: fp32 master copies and Adam state."""
        state = sum(
            t.numel() * t.element_size()
            for s in self.torch_optimizer.state.values()
            for t in s.values()
            if isinstance(t, torch.Tensor)
        )
        return {"master": 0, "optimizer": state}  # fp32 weights are their own master copy
