"""Drive computeall with nothing but nats-py and docs/protocol.md: no computeall imports here.

The system is started with the `computeall up` command, as a user would, and found through
the cluster.json it writes.
"""

import asyncio
import json
import signal
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import nats
from nats.js.api import DeliverPolicy

from .waiting import wait_until  # a test helper: still no computeall import

REPO = Path(__file__).resolve().parents[2]


async def test_create_a_session_and_read_its_steps_with_plain_nats(tmp_path):
    up = subprocess.Popen([str(Path(sys.executable).parent / "computeall"), "up", "--pnodes", "1",
                           "--data-dir", str(tmp_path)], stdout=open(tmp_path / "up.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_until((tmp_path / "cluster.json").exists, 60, "computeall up writing cluster.json", interval=0.2)
        url = json.loads((tmp_path / "cluster.json").read_text())["nats"]
        # the local user's credential, kept by `up` in the data dir (docs/protocol.md, "Connecting")
        credential = json.loads((tmp_path / "security" / "credentials" / "user" / "local.json").read_text())
        nc = await nats.connect(url, nkeys_seed_str=credential["nkey_seed"], inbox_prefix="_INBOX.user.local")
        js = nc.jetstream()
        sid = "interop-" + uuid.uuid4().hex[:8]
        command_id = uuid.uuid4().hex
        corpus = sorted(str(p) for p in Path(sysconfig.get_paths()["stdlib"]).glob("a*.py"))
        command = {
            "id": command_id, "type": "CreateSession", "ts": time.time(), "actor": "interop",
            "session_id": sid, "schema_version": 1,
            "payload": {"type": "CreateSession", "config": {
                "network_yaml": (REPO / "examples" / "networks" / "micro-gpt.yaml").read_text(),
                "data": {"files": corpus}, "steps": 3, "batch_size": 4, "seed": 5,
            }},
        }
        await js.publish(f"ca.cmd.session.{sid}", json.dumps(command).encode(), headers={"Nats-Msg-Id": command_id})
        sub = await js.subscribe(f"ca.evt.session.{sid}.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
        steps, seen = [], []
        async def read() -> None:
            async for msg in sub.messages:
                event = json.loads(msg.data)
                seen.append(event["type"])
                assert event["type"] != "CommandRejected", event
                if event["type"] == "StepCompleted":
                    steps.append(event["payload"])
                if event["type"] in ("SessionCompleted", "SessionFailed"):
                    return
        await asyncio.wait_for(read(), 180)
        await nc.close()
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    assert seen[:2] == ["SessionCreated", "SessionStarted"] and seen[-1] == "SessionCompleted"
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(s["tokens"] == 4 * 64 and s["loss"] > 0 for s in steps)
