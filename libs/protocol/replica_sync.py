"""How data-parallel replicas of a session's pipeline keep their parameters together.

`gradients` (the default): every step's gradients are summed over the replicas along the fixed
micro-batch tree (`micro_tree`), so every replica applies the same update and R = 1, 2, 4 give
the same bits. `diloco`: each replica takes `inner_steps` AdamW steps on its own micro-batches,
then the replicas average their pseudo-gradients (anchor - local parameters, sent as bf16 or
int8) and take one outer Nesterov step from the anchor. Far fewer bytes cross the network; the
result depends on R (still deterministic for a fixed R).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Replicas = int | Literal["auto"]


class ReplicaSync(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mode: Literal["gradients", "diloco"] = "gradients"
    inner_steps: int = Field(20, ge=1, description="diloco: local steps between two outer steps (H)")
    # DiLoCo's paper uses 0.7 and 0.9 with H = 500 over long runs; over a few hundred steps that
    # momentum costs ~8% of loss, these ~1.4% (docs/decisions.md, "diloco")
    outer_lr: float = Field(0.8, gt=0, description="diloco: the outer Nesterov step's learning rate")
    outer_momentum: float = Field(0.5, ge=0, lt=1, description="diloco: the outer Nesterov momentum")
    wire: Literal["bf16", "int8"] = Field("bf16", description="diloco: how pseudo-gradients travel")

    def is_outer_step(self, step: int) -> bool:
        """diloco: whether the replicas meet after `step` (its inner update applied)."""
        return self.mode == "diloco" and (step + 1) % self.inner_steps == 0
