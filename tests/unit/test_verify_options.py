"""The spot-check options a user types: --verify-rate, and the testing option --fault, with clear errors."""

from __future__ import annotations

import argparse

import pytest

from computeall.cli.commands.run import add_training_args, run_faults, session_config
from computeall.cli.errors import UserError
from computeall.pnode.options import add_options
from computeall.protocol.faults import FaultSpec

from .tools import TOOLS

NETWORK = TOOLS.parent / "examples" / "networks" / "micro-gpt.yaml"


def training_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("network")
    add_training_args(p)
    return p.parse_args([str(NETWORK), "--data", str(NETWORK), *argv])


def test_verify_rate_reaches_the_session_config_and_defaults_to_off():
    assert session_config(training_args()).verify.rate == 0.0
    assert session_config(training_args("--verify-rate", "0.05")).verify.rate == 0.05
    with pytest.raises(SystemExit):  # argparse prints: '1.5' is not a share: give a number between 0 and 1
        training_args("--verify-rate", "1.5")


def test_run_faults_name_a_pnode_of_the_run():
    assert run_faults(["pnode-2=corrupt:0.1"], 3) == {"pnode-2": FaultSpec(rate=0.1)}
    with pytest.raises(UserError, match="--fault names pnode-7, but this run starts pnode-0, pnode-1, pnode-2"):
        run_faults(["pnode-7=corrupt:0.1"], 3)
    with pytest.raises(UserError, match="names no PNode"):
        run_faults(["corrupt:0.1"], 3)
    with pytest.raises(UserError, match="use corrupt:P with P between 0 and 1"):
        run_faults(["pnode-0=flip:2"], 3)


def test_the_pnode_option_and_which_results_it_hits():
    p = argparse.ArgumentParser()
    add_options(p)
    spec = p.parse_args(["--fault", "corrupt:0.25"]).fault
    assert spec == FaultSpec(rate=0.25) and str(spec) == "corrupt:0.25"
    hits = [spec.hits("p", step, 0, "v", "output") for step in range(4000)]
    assert hits == [spec.hits("p", step, 0, "v", "output") for step in range(4000)], "a pure function"
    assert 0.22 < sum(hits) / len(hits) < 0.28
    assert not any(FaultSpec(rate=0).hits("p", s, 0, "v", "output") for s in range(100))
