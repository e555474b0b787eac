"""`--replicas` on the command line: parsed into the session config, refused with the reason when it cannot work."""

import subprocess
import sys
from pathlib import Path

import pytest

from computeall.cli.main import build_parser
from computeall.cli.commands.run import session_config
from computeall.cli.errors import UserError
from computeall.protocol.replica_sync import SparseCompression

NETWORK = Path(__file__).resolve().parents[2] / "examples" / "networks" / "micro-gpt.yaml"


def parse(*flags: str):
    return build_parser().parse_args(["run", str(NETWORK), "--data", str(NETWORK), *flags])


def test_replicas_and_diloco_reach_the_session_config():
    config = session_config(parse("--micro-batches", "4", "--replicas", "auto", "--sync", "diloco", "--inner-steps", "7"))
    assert config.replicas == "auto" and config.sync.mode == "diloco" and config.sync.inner_steps == 7
    assert session_config(parse("--micro-batches", "4", "--replicas", "4")).replicas == 4
    sparse = session_config(parse("--micro-batches", "4", "--replicas", "2", "--sync", "diloco", "--inner-steps", "4",
                                  "--sparse-sync", "--overlap-steps", "1", "--inner-decisions", "own")).sync
    assert sparse.compression == SparseCompression() and sparse.overlap_steps == 1 and sparse.replicas_decide


def test_a_sparse_sync_without_diloco_is_refused_in_plain_words():
    with pytest.raises(UserError, match="sync.compression, sync.overlap_steps and sync.inner_decisions apply to diloco"):
        session_config(parse("--micro-batches", "4", "--replicas", "2", "--sparse-sync"))
    with pytest.raises(UserError, match="set sync.mode: diloco"):
        session_config(parse("--micro-batches", "4", "--replicas", "2", "--inner-decisions", "own"))


def test_a_replica_count_that_would_change_the_sum_is_refused_in_plain_words():
    with pytest.raises(UserError) as err:
        session_config(parse("--micro-batches", "4", "--replicas", "3"))
    assert str(err.value).startswith("config: 3 replicas cannot share 4 micro-batches")
    assert "choose replicas from 1, 2, 4" in str(err.value)


def test_run_refuses_more_replicas_than_pnodes_before_starting_anything():
    result = subprocess.run([sys.executable, "-m", "computeall.cli.main", "run", str(NETWORK), "--data", str(NETWORK),
                             "--micro-batches", "4", "--replicas", "4", "--pnodes", "2"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--replicas 4 needs at least 4 PNodes" in result.stderr
