"""A deployment's per-user limits: how many sessions one user runs at once, how many PNodes their
sessions hold, how fast their commands are taken. The orchestrator enforces them
(`services/orchestrator/fair_share.py`); `computeall up` and `python -m computeall.orchestrator`
take each as a flag named after its field (`--max-running-sessions-per-user 4`), and
docs/operations.md explains them.
"""

from __future__ import annotations

import argparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class FairShareLimits(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_running_sessions_per_user: int = Field(
        2, ge=1, description="sessions one user runs at once; another one asked to run is queued and starts when "
                             "one of theirs ends or pauses")
    max_pnodes_per_user: int | None = Field(
        None, ge=1, description="PNodes one user's running sessions hold together, at most; whatever the cap, "
                                "the live PNodes are split equally among the users running sessions")
    commands_per_second_per_user: float = Field(
        5.0, gt=0, description="commands one user sends per second, sustained; faster ones are refused unread")
    command_burst_per_user: int = Field(
        60, ge=1, description="commands one user may send at once before the per-second rate applies")


def add_limit_arguments(parser: argparse.ArgumentParser, with_defaults: bool = True) -> None:
    """One flag per limit. Without defaults a flag left out stays None: the orchestrator's default applies."""
    group = parser.add_argument_group("per-user limits (fair share)")
    for name, field in FairShareLimits.model_fields.items():
        number = float if field.annotation is float else int
        default = "no cap" if field.default is None else field.default
        group.add_argument(_flag(name), dest=name, type=number, default=field.default if with_defaults else None,
                           metavar="N", help=f"{field.description} (default: {default})")


def limits_from_args(args: argparse.Namespace) -> FairShareLimits:
    """The limits the flags name; ValueError naming the flag and what is wrong with its value."""
    given = {name: getattr(args, name) for name in FairShareLimits.model_fields if getattr(args, name, None) is not None}
    try:
        return FairShareLimits(**given)
    except ValidationError as exc:
        raise ValueError("; ".join(f"{_flag(str(e['loc'][0]))}: {e['msg']}" for e in exc.errors())) from None


def limit_argv(limits: FairShareLimits) -> list[str]:
    """The flags that hand the limits set explicitly on to another process."""
    return [arg for name in sorted(limits.model_fields_set) for arg in (_flag(name), str(getattr(limits, name)))]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")
