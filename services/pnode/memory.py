"""Bytes a session stage holds, by category: what the monitor shows per PNode."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stage import SessionStage


def bytes_by_category(stage: "SessionStage") -> dict[str, int]:
    params = list(stage.runtime.parameters().values())
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    return {
        "weights": weights,
        "gradients": grads,
        **stage.optimizer.state_bytes(),
        "activations": stage.runtime.activation_bytes(),
    }
