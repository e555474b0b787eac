"""Dynamic loss scaling, decided once per step by the orchestrator for every PNode of a session.

Pure: the driver feeds it "did any PNode see a non-finite gradient this step?" and gets back
whether every PNode applies the step, the scale for the next step and whether to record a
change. On overflow the step is skipped everywhere and the scale backs off; after
`growth_interval` clean steps in a row it grows. Its state is two numbers, so a resumed session
rebuilds it from its events (`LossScaleChanged`, `StepSkipped`, `StepCompleted.loss_scale`).
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.protocol.config import LossScaleConfig


@dataclass(frozen=True)
class LossScaleState:
    scale: float
    clean_steps: int = 0  # applied steps in a row since the last change


@dataclass(frozen=True)
class LossScaleDecision:
    apply: bool  # False: every PNode drops this step's gradients
    old: float  # the scale the step ran with
    new: float  # the scale of the next step
    reason: str | None  # "overflow" | "growth" when the scale changed, else None

    @property
    def changed(self) -> bool:
        return self.new != self.old


class LossScaler:
    def __init__(self, config: LossScaleConfig, dynamic: bool, state: LossScaleState | None = None) -> None:
        """`dynamic`: whether the scale moves at all (see `uses_dynamic_scaling`); a fixed scaler stays
        at 1.0 and only turns overflows into skipped steps."""
        self.config = config
        self.dynamic = dynamic
        self.state = state or LossScaleState(scale=config.initial if dynamic else 1.0)

    @property
    def scale(self) -> float:
        return self.state.scale

    def update(self, found_overflow: bool) -> LossScaleDecision:
        c, old = self.config, self.state.scale
        if found_overflow:
            new = max(c.min_scale, old * c.backoff_factor) if self.dynamic else old
            self.state = LossScaleState(new, 0)
            return LossScaleDecision(False, old, new, "overflow" if new != old else None)
        clean = self.state.clean_steps + 1
        if self.dynamic and clean >= c.growth_interval:
            new = min(c.max_scale, old * c.growth_factor)
            self.state = LossScaleState(new, 0)
            return LossScaleDecision(True, old, new, "growth" if new != old else None)
        self.state = LossScaleState(old, clean)
        return LossScaleDecision(True, old, old, None)


def uses_dynamic_scaling(config: LossScaleConfig, precisions: list[str]) -> bool:
    """"auto": only when some VNode computes in fp16 (bf16 and fp32 share fp32's exponent range)."""
    if config.mode == "auto":
        return "fp16" in precisions
    return config.mode == "dynamic"


def replay(config: LossScaleConfig, dynamic: bool, events: list, before_step: int | None = None) -> LossScaler:
    """The scaler a resumed session continues with, from its recorded events in log order.

    Reads `StepCompleted`, `StepSkipped` and `LossScaleChanged` (ignores anything else), of steps
    before `before_step` when given (a resume from a checkpoint forgets the steps after it).
    """
    from computeall.protocol.events import LossScaleChanged, StepCompleted, StepSkipped

    scaler = LossScaler(config, dynamic)
    reset: set[int] = set()  # steps after which the clean count starts again
    for e in events:
        if not isinstance(e, (StepCompleted, StepSkipped, LossScaleChanged)):
            continue
        if before_step is not None and e.step >= before_step:
            continue
        if isinstance(e, StepSkipped):
            reset.add(e.step)
        elif isinstance(e, LossScaleChanged):
            reset.add(e.step)
            scaler.state = LossScaleState(e.new, 0)
        else:
            clean = 0 if e.step in reset else scaler.state.clean_steps + 1
            scaler.state = LossScaleState(scaler.state.scale, clean)
    return scaler
