"""Link profiles of the WAN lab: what one PNode's access link to the bus looks like.

`delay_ms` is the ONE-WAY delay of one access link, in each direction. A PNode talking to NATS
crosses one link (RTT = 2 x delay_ms); two PNodes talking to each other (gloo, or computeall via
NATS) cross two links (one-way 2 x delay_ms, RTT 4 x delay_ms), as two machines each behind its
own line would. `rate_mbit` caps each direction of the link separately.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LinkProfile(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    rate_mbit: float | None = Field(None, gt=0, description="per-direction bandwidth cap; None = unshaped")
    delay_ms: float = Field(0.0, ge=0, description="one-way delay of the link, each direction")
    jitter_ms: float = Field(0.0, ge=0, description="+- uniform jitter added to delay_ms, never reordering")

    @property
    def delay_s(self) -> float:
        return self.delay_ms / 1e3

    @property
    def jitter_s(self) -> float:
        return self.jitter_ms / 1e3


PROFILES: dict[str, LinkProfile] = {p.name: p for p in [
    LinkProfile(name="loopback"),
    LinkProfile(name="lan", rate_mbit=1000, delay_ms=1),
    LinkProfile(name="city", rate_mbit=100, delay_ms=20),
    LinkProfile(name="home", rate_mbit=20, delay_ms=50),
]}


def profile(name: str) -> LinkProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown WAN lab profile {name!r}; choose one of {', '.join(PROFILES)}") from None
