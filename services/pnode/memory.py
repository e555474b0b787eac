"""Bytes a session stage holds, by hosted VNode and kind, and by PNode: what the monitor shows.

Per VNode (`VNodeMemory`, a tied weight under its owner):
- weights: the parameters as the VNode computes with them, in its precision
- master: fp32 master copies of low-precision parameters, or a bf16 weight's low half (fp32 parameters
  are their own: 0)
- optimizer: Adam moments (fp32, or 8-bit codes with their scales)
- gradients: the parameters' gradients (their precision)
- activations: what is kept for backward (a VNode's output, or a recomputing VNode's inputs)
- params: the number of parameters, so a reader can turn any kind into bytes per parameter

Per PNode (`bytes_by_category`): the sums over its VNodes, and "checks", what is kept for spot checks
until they are settled (parameter copies, inputs, gradients). The optimizer's step counters, a word per
bucket, count nowhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from computeall.protocol.telemetry import VNODE_MEMORY_KINDS, VNodeMemory

if TYPE_CHECKING:
    from .stage import SessionStage


def vnode_memory(session_id: str, stage: "SessionStage") -> list[VNodeMemory]:
    state = stage.optimizer.parameter_state_bytes()
    activations = stage.runtime.activation_bytes_by_vnode()
    out = []
    for vid, params in stage.runtime.vnode_parameters().items():
        held = [state[f"{vid}.{name}"] for name in params]
        out.append(VNodeMemory(
            session_id=session_id, vnode=vid,
            params=sum(p.numel() for p in params.values()),
            weights=sum(p.numel() * p.element_size() for p in params.values()),
            master=sum(h["master"] for h in held),
            optimizer=sum(h["optimizer"] for h in held),
            gradients=sum(p.grad.numel() * p.grad.element_size() for p in params.values() if p.grad is not None),
            activations=activations[vid],
        ))
    return out


def bytes_by_category(vnodes: list[VNodeMemory], checks: int) -> dict[str, int]:
    """A PNode's bytes by kind: its VNodes' summed, with what its spot checks keep."""
    totals = {kind: sum(getattr(v, kind) for v in vnodes) for kind in (*VNODE_MEMORY_KINDS, "params")}
    return {**totals, "checks": checks}
