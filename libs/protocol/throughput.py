"""What a PNode measured of itself: how fast it computes and how fast it reaches the bus.

A PNode measures these when it starts, and its link again now and then while it is idle; it
reports them in `PNodeJoined` and in every `Heartbeat`. The allocator turns them into an
estimated step time (services/orchestrator/step_time.py), so a slow PNode gets less work and
a slow link is cut where the activations are smallest.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Throughput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    flops_per_s: float = Field(
        ..., gt=0, description="FLOP/s of a small MLP's forward and backward on its device, counted as the op registry counts"
    )
    bandwidth_bytes_per_s: float = Field(
        ..., gt=0, description="bytes/s through the bus and back to itself: the slower of its link's two directions"
    )
    rtt_s: float = Field(..., ge=0, description="round trip to the NATS server")
    measured_at: float = Field(..., description="Unix time of the link measurement")
