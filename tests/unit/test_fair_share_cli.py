"""The per-user limits are flags of `computeall up`, handed to the orchestrator only where they are
set; the orchestrator reads them back to the same limits, a bad value is refused with the flag's
name, and docs/operations.md states every flag with its default. `session list/show` say why a
session is queued."""

import argparse
from pathlib import Path

import pytest

from computeall.cli.errors import UserError
from computeall.cli.commands.up import up
from computeall.cli.main import build_parser
from computeall.cli.session_view import summary
from computeall.cli.supervisor import default_services
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.events import EventEnvelope
from computeall.protocol.fair_share import FairShareLimits, add_limit_arguments, limit_argv, limits_from_args
from computeall.protocol.session_state import RunningSlots, SessionState

OPERATIONS = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()


def orchestrator_reads(argv: list[str]) -> FairShareLimits:
    parser = argparse.ArgumentParser()
    add_limit_arguments(parser)
    return limits_from_args(parser.parse_args(argv))


def test_the_limits_set_on_up_reach_the_orchestrator_and_only_those():
    args = build_parser().parse_args(["up", "--max-running-sessions-per-user", "4", "--commands-per-second-per-user", "2.5"])
    limits = limits_from_args(args)
    spec = default_services(0, with_monitor=False, orchestrator_args=limit_argv(limits))[0]
    assert spec.kind == "orchestrator"
    assert orchestrator_reads(spec.args) == FairShareLimits(max_running_sessions_per_user=4, commands_per_second_per_user=2.5)
    plain = limits_from_args(build_parser().parse_args(["up"]))
    assert limit_argv(plain) == [] and orchestrator_reads([]) == FairShareLimits()


async def test_a_bad_limit_is_refused_with_its_flag_before_anything_starts(tmp_path):
    args = build_parser().parse_args(["up", "--max-running-sessions-per-user", "0", "--data-dir", str(tmp_path)])
    with pytest.raises(UserError, match="--max-running-sessions-per-user: Input should be greater than or equal to 1"):
        await up(args)
    assert list(tmp_path.iterdir()) == []


def test_operations_states_every_limit_and_its_default():
    for name, field in FairShareLimits.model_fields.items():
        default = "no cap" if field.default is None else f"{field.default:g}"
        assert f"| `--{name.replace('_', '-')}` | {default} |" in OPERATIONS, name


def test_session_list_and_show_say_why_a_session_is_queued():
    state = SessionState(id="s1")
    config = SessionConfig(network_yaml="name: t\n", data=DataConfig(files=["a"]), steps=9)
    for seq, event in enumerate(state.create(config, owner="alice", slots=RunningSlots(running=2, limit=2)), 1):
        state.apply(EventEnvelope(session_id="s1", payload=event), seq)
    row = summary(state)
    assert (row["status"], row["reason"]) == ("queued", "alice has 2 sessions running (limit 2)")
