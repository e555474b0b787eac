"""Bytes a session stage holds, by category: what the monitor shows per PNode.

- weights: the parameters as the VNodes compute with them, each in its VNode's precision
- master: fp32 master copies of low-precision parameters (fp32 parameters are their own: 0)
- optimizer: Adam moments (fp32) and step counters
- gradients: the parameters' gradients (their precision)
- activations: VNode outputs kept for backward (their precision)
- checks: what is kept for spot checks until they are settled (parameter copies, inputs, gradients)
- params: the number of parameters, so a reader can turn any category into bytes per parameter
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stage import SessionStage


def bytes_by_category(stage: "SessionStage") -> dict[str, int]:
    params = list(stage.runtime.parameters().values())
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    optimizer = stage.optimizer.state_bytes()
    return {
        "weights": weights,
        "master": optimizer["master"],
        "optimizer": optimizer["optimizer"],
        "gradients": grads,
        "activations": stage.runtime.activation_bytes(),
        "checks": stage.audit.nbytes() if stage.audit else 0,
        "params": sum(p.numel() for p in params),
    }
