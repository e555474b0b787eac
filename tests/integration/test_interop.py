"""Drive computeall with nothing but nats-py and docs/protocol.md: no computeall imports here.

The system is started with the `computeall up` command, as a user would; a user is made with
`computeall user create --json`, whose `nats` object is all a plain nats-py client needs.
"""

import asyncio
import json
import signal
import ssl
import subprocess
import sys
import sysconfig
import time
import uuid
from pathlib import Path

import nats

from .waiting import wait_until  # a test helper: still no computeall import

REPO = Path(__file__).resolve().parents[2]
COMPUTEALL = str(Path(sys.executable).parent / "computeall")


async def connect(options: dict):
    """The example of docs/protocol.md, "Connecting"."""
    tls = ssl.create_default_context(cadata=options["tls_ca_pem"]) if "tls_ca_pem" in options else None
    return await nats.connect(servers=options["servers"], nkeys_seed_str=options["nkeys_seed_str"],
                              inbox_prefix=options["inbox_prefix"], tls=tls, tls_hostname=options.get("tls_hostname"))


async def test_create_a_session_and_read_its_steps_with_plain_nats(tmp_path):
    up = subprocess.Popen([COMPUTEALL, "up", "--pnodes", "1", "--data-dir", str(tmp_path)],
                          stdout=open(tmp_path / "up.log", "wb"), stderr=subprocess.STDOUT)
    try:
        wait_until((tmp_path / "cluster.json").exists, 60, "computeall up writing cluster.json", interval=0.2)
        made = wait_until(lambda: (r := subprocess.run([COMPUTEALL, "user", "create", "interop", "--json", "--data-dir",
                                                        str(tmp_path)], capture_output=True, text=True)).returncode == 0
                          and r, 60, "the monitor making a user", interval=0.5)
        user = json.loads(made.stdout)
        nc = await connect(user["nats"])
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
        await nc.jetstream().publish(f"ca.cmd.interop.session.{sid}", json.dumps(command).encode(),
                                     headers={"Nats-Msg-Id": command_id})
        steps, seen, after = [], [], 0

        async def read() -> None:
            nonlocal after
            while True:  # long polls: each answer holds the events after `after_seq`
                request = {"session_id": sid, "after_seq": after, "wait_s": 10}
                reply = json.loads((await nc.request("ca.api.interop.events", json.dumps(request).encode(), timeout=30)).data)
                assert reply["ok"], reply
                for recorded in reply["events"]:
                    after = recorded["seq"]
                    event = json.loads(recorded["data"])
                    seen.append(event["type"])
                    assert event["type"] != "CommandRejected", event
                    if event["type"] == "StepCompleted":
                        steps.append(event["payload"])
                    if event["type"] in ("SessionCompleted", "SessionFailed"):
                        return
        await asyncio.wait_for(read(), 180)
        other = json.loads((await nc.request("ca.api.interop.events", json.dumps({"session_id": "nope"}).encode(), timeout=30)).data)
        await nc.close()
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    assert seen[:2] == ["SessionCreated", "SessionStarted"] and seen[-1] == "SessionCompleted"
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert all(s["tokens"] == 4 * 64 and s["loss"] > 0 for s in steps)
    assert other["ok"] is False and "has no session nope" in other["error"]
