"""A newcomer's own data under `computeall up`, and commands run from any directory."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from computeall.cli.cluster_file import read, running_pointer

from .waiting import wait_until

COMPUTEALL = str(Path(sys.executable).parent / "computeall")


def cli(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """A command as a user types it, in `cwd`, with no --data-dir."""
    env = {k: v for k, v in os.environ.items() if k not in ("COMPUTEALL_DATA_DIR", "NATS_URL")}
    return subprocess.run([COMPUTEALL, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=180)


def test_up_in_one_directory_serves_commands_and_own_files_from_another(tmp_path):
    project, elsewhere, notes = tmp_path / "project", tmp_path / "elsewhere", tmp_path / "home" / "notes"
    for d in (project, elsewhere, notes):
        d.mkdir(parents=True)
    (notes / "input.txt").write_text("The quick brown fox jumps over the lazy dog.\n\n" * 400)
    env = {k: v for k, v in os.environ.items() if k not in ("COMPUTEALL_DATA_DIR", "NATS_URL")}
    up = subprocess.Popen([COMPUTEALL, "up", "--pnodes", "1"], cwd=project, env=env,
                          stdout=open(tmp_path / "up.log", "wb"), stderr=subprocess.STDOUT)
    try:
        data_dir = project / ".computeall"
        wait_until(lambda: read(data_dir) is not None, 90, "computeall up writing cluster.json", interval=0.2)
        assert Path(running_pointer().read_text()) == data_dir, "up records where it runs"

        listed = cli(elsewhere, "session", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == []
        status = cli(elsewhere, "status", "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["nats"] == read(data_dir).nats, status.stderr

        created = cli(elsewhere, "dataset", "create", "notes", "--files", str(notes / "input.txt"), "--vocab-size", "300",
                      "--json")
        assert created.returncode == 0, created.stderr
        assert "give an absolute path" not in created.stderr
    finally:
        up.send_signal(signal.SIGINT)
        assert up.wait(60) == 0
    assert not running_pointer().exists(), "a stopped up leaves no pointer behind"
    gone = cli(elsewhere, "session", "list")
    assert gone.returncode != 0 and "no running computeall found" in gone.stderr, gone.stderr
