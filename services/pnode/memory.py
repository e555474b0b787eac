"""Bytes a session stage holds, by category: what the monitor shows per PNode."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .stage import SessionStage


def bytes_by_category(stage: "SessionStage") -> dict[str, int]:
    params = list(stage.runtime.parameters().values())
    weights = sum(p.numel() * p.element_size() for p in params)
    grads = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    optimizer = sum(
        t.numel() * t.element_size()
        for state in stage.optimizer.state.values()
        for t in state.values()
        if hasattr(t, "numel")
    )
    return {
        "weights": weights,
        "master": 0,  # fp32 weights are their own master copy
        "gradients": grads,
        "optimizer": optimizer,
        "activations": stage.runtime.activation_bytes(),
    }
