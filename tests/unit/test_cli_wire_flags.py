"""`--wire`, `--schedule` and `--in-flight` on `computeall run` and `session create` reach the
session's config; a bad value is refused with the flag's name, before anything starts."""

from pathlib import Path

import pytest

from computeall.cli.commands.run import session_config
from computeall.cli.errors import UserError
from computeall.cli.main import build_parser

NETWORK = str(Path(__file__).resolve().parents[2] / "examples" / "networks" / "micro-gpt.yaml")
COMMANDS = {"run": ["run", NETWORK], "session create": ["session", "create", "--network", NETWORK]}


@pytest.mark.parametrize("command", COMMANDS)
def test_the_flags_reach_the_session_config(command):
    args = build_parser().parse_args(COMMANDS[command] + ["--wire", "int8", "--schedule", "gpipe", "--in-flight", "3"])
    config = session_config(args)
    assert (config.wire, config.pipeline.schedule, config.pipeline.in_flight) == ("int8", "gpipe", 3)


@pytest.mark.parametrize("command", COMMANDS)
def test_without_the_flags_the_network_keeps_its_wire_and_1f1b_its_default_bound(command):
    config = session_config(build_parser().parse_args(COMMANDS[command]))
    assert (config.wire, config.pipeline.schedule, config.pipeline.in_flight) == (None, "1f1b", None)


def test_bad_values_name_the_flag():
    with pytest.raises(SystemExit):  # argparse lists the wire formats
        build_parser().parse_args(COMMANDS["run"] + ["--wire", "int4"])
    with pytest.raises(UserError, match="pipeline.in_flight"):
        session_config(build_parser().parse_args(COMMANDS["run"] + ["--in-flight", "0"]))
