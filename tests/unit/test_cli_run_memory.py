"""`computeall run --memory SIZE`: each PNode of the embedded cluster offers SIZE; a bad size is the user's error."""

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from computeall.cli.commands import run as run_command
from computeall.cli.main import build_parser

NETWORK = str(Path(__file__).resolve().parents[2] / "examples" / "networks" / "llama-micro.yaml")


def test_each_pnode_offers_the_memory_given(monkeypatch, tmp_path):
    seen = {}

    @asynccontextmanager
    async def cluster(directory, pnodes, **options):  # stands in for the real cluster: we only read what it is asked
        seen.update(options, pnodes=pnodes)
        raise RuntimeError("stop here")
        yield

    monkeypatch.setattr(run_command, "running_cluster", cluster)
    args = build_parser().parse_args(["run", NETWORK, "--pnodes", "4", "--memory", "5GiB", "--data", NETWORK,
                                      "--data-dir", str(tmp_path)])
    with pytest.raises(RuntimeError, match="stop here"):
        asyncio.run(run_command.run(args))
    assert seen["pnode_memory"] == "5GiB" and seen["pnodes"] == 4


def test_without_memory_each_pnode_takes_its_share(tmp_path):
    assert build_parser().parse_args(["run", NETWORK]).memory is None


def test_a_size_that_is_no_size_is_refused_saying_how_to_write_one(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", NETWORK, "--memory", "five gigs"])
    assert "'five gigs' is not a size; write e.g. 4GiB, 512MiB or 2000000000" in capsys.readouterr().err
