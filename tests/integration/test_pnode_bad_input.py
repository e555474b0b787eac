"""A PNode that receives garbage, truncated chunks, wrong digests or bad requests logs it and keeps training.

Only a PNode may send tensors and only the orchestrator control requests, so the garbage comes
from a rogue PNode and a confused orchestrator."""

import asyncio

import torch

from computeall.cli.follow import follow_session, start_session
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.pnode_api import PNodeReply
from computeall.tensorcore.tensor_frames import tensor_frames

from .cluster import running_cluster, stdlib_corpus, wait_for_pnodes
from .identities import connect_as
from .sessions import spread
from .test_training_run import NETWORK


async def test_pnode_survives_bad_frames_and_requests(tmp_path):
    config = SessionConfig(network_yaml=NETWORK.read_text(), data=DataConfig(files=stdlib_corpus()), steps=6, min_pnodes=2,
                           pipeline=spread())
    async with running_cluster(tmp_path, pnodes=2) as (client, supervisor):
        subjects = client.subjects
        rogue = await connect_as(supervisor.credentials, "pnode", "pnode-rogue")
        orchestrator = await connect_as(supervisor.credentials, "orchestrator")
        await wait_for_pnodes(supervisor, ["pnode-0", "pnode-1"])
        frame = tensor_frames("k", torch.ones(1000), 1 << 20, meta={"session": "x", "step": 0})[0]
        corrupted = bytearray(frame)
        corrupted[-1] ^= 0xFF
        chunks = tensor_frames("big", torch.ones(200_000), 300_000)
        bad_frames = [b"garbage", frame[:-10], bytes(corrupted), chunks[0][:1000], frame]  # the last: no such session
        for pnode in ("pnode-0", "pnode-1"):
            for bad in bad_frames:
                await rogue.publish(subjects.pnode_tensor(pnode, "pnode-rogue"), bad)
            reply = PNodeReply.model_validate_json(
                (await orchestrator.request(subjects.pnode_ctl(pnode), b'{"type": "RunStep"}', timeout=10)).data
            )
            assert not reply.ok and "malformed request" in reply.error
            reply = PNodeReply.model_validate_json(
                (await orchestrator.request(subjects.pnode_ctl(pnode), b"\xff\xfe not json", timeout=10)).data
            )
            assert not reply.ok

        sid, command_id = await start_session(client, config)
        # more garbage while the session trains
        for bad in bad_frames:
            await rogue.publish(subjects.pnode_tensor("pnode-1", "pnode-rogue"), bad)
        await rogue.flush()
        outcome = await asyncio.wait_for(
            follow_session(client, sid, config.steps, progress=False, command_id=command_id), 180
        )
        assert outcome.ok, outcome.message
        await rogue.close()
        await orchestrator.close()
        assert all(s.state == "running" and s.restarts == 0 for s in supervisor.services.values() if s.spec.kind == "pnode")

    log = (tmp_path / "logs" / "pnode-1.log").read_text()
    # a digest is checked only once the plan expects the frame from its sender (tests/unit/pnode/test_admission.py)
    for reason in ("bad magic", "truncated", "does not host"):
        assert reason in log, reason
