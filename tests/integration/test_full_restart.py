"""Stop everything, NATS included, with Ctrl-C, and run `computeall up` again: running sessions go on from
the checkpoint written at Ctrl-C, `up` says so, and the dashboard keeps its port."""

import json
import signal
import subprocess
import sys
from pathlib import Path

from computeall.cli.client import connect
from computeall.cli.cluster_file import read
from computeall.cli.identity import deployment_security
from computeall.cli.session_view import session_events
from computeall.protocol.session_state import fold
from computeall.protocol.credentials import Credential

from .cluster import stdlib_corpus
from .sessions import losses, run_to_end, wait_for
from .sessions import config as session_config
from .test_training_run import NETWORK
from .waiting import wait_until

COMPUTEALL = str(Path(sys.executable).parent / "computeall")


def up(data_dir: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen([COMPUTEALL, "up", "--pnodes", "2", "--data-dir", str(data_dir)],
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT)


def wait_for_cluster(data_dir: Path, previous: str | None = None, timeout: float = 60) -> str:
    def written() -> str | None:  # the bus first, the dashboard's address once the monitor listens
        info = read(data_dir)
        return info.nats if info and info.nats != previous and info.monitor else None

    return wait_until(written, timeout, "computeall up writing cluster.json with its dashboard", interval=0.2)


def local_user(data_dir: Path) -> Credential:
    """What a client on this machine connects as: the local user, as `up` issued it this time."""
    return deployment_security(str(data_dir)).local("user", "local")


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGINT)
    assert process.wait(60) == 0


async def test_ctrl_c_checkpoints_and_up_again_continues_from_there(tmp_path):
    data_dir, log = tmp_path / "run", tmp_path / "up.log"
    first = up(data_dir, log)
    try:
        url = wait_for_cluster(data_dir)
        dashboard = read(data_dir).monitor
        created = subprocess.run(  # no periodic checkpoint: only the one Ctrl-C writes
            [COMPUTEALL, "session", "create", "--network", str(NETWORK), "--data", *stdlib_corpus(), "--steps", "60",
             "--seed", "3", "--checkpoint-every", "1000", "--min-pnodes", "2", "--json", "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=60,
        )
        assert created.returncode == 0, created.stderr
        sid = json.loads(created.stdout)["session_id"]
        async with connect(local_user(data_dir)) as client:
            await wait_for(client, sid, lambda s: s.next_step >= 8)
    finally:
        stop(first)  # everything stops: PNodes, orchestrator, dataset, monitor and nats-server
    said_before = log.read_text()
    second = up(data_dir, log)
    try:
        url = wait_for_cluster(data_dir, previous=url)
        assert read(data_dir).monitor == dashboard, "an open dashboard tab keeps working"
        async with connect(local_user(data_dir)) as client:
            at_stop = fold(sid, await session_events(client, sid))
            final = await wait_for(client, sid, lambda s: s.status == "completed", timeout=180)
            resumed = await losses(client, sid)
            clean = await losses(client, await run_to_end(client, session_config(steps=60)))
    finally:
        stop(second)
    assert at_stop.checkpoint_step >= 8 and at_stop.checkpoint_step == at_stop.next_step, "Ctrl-C checkpointed every step done"
    said = log.read_text()[len(said_before):]
    assert f"resumes    session {sid} at step {at_stop.checkpoint_step}/60" in said, said
    assert final.next_step == 60
    assert [s for s, _ in resumed] == list(range(60)), "each step recorded exactly once"
    assert resumed == clean
