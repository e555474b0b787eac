"""Global gradient clipping on the real system: 1 PNode and 3 PNodes give the same bits.

One PNode that computes with the threads of one of three, a session on it alone; then two more
PNodes like it join and the same session runs spread over the three. With
clipping acting on most steps, both record the same losses, gradient norms and clip decisions,
and end with the same parameters and optimizer state (the final checkpoint's digests).
"""

import signal
import subprocess
import sys

from computeall.cli.session_view import session_events
from computeall.protocol.events import Allocated, CheckpointCommitted, StepCompleted, UpdateRatios

from .cluster import running_cluster
from .sessions import config, run_to_end
from .waiting import exit_code

STEPS = 6


async def run(client, cfg) -> tuple[list[StepCompleted], dict[str, str], list[str], list[UpdateRatios]]:
    sid = await run_to_end(client, cfg)
    events = [e.payload for _, e in await session_events(client, sid)]
    digests = {o.vnode: o.digest for o in [e for e in events if isinstance(e, CheckpointCommitted)][-1].objects}
    pnodes = next(e for e in events if isinstance(e, Allocated)).pnodes
    return ([e for e in events if isinstance(e, StepCompleted)], digests, pnodes,
            [e for e in events if isinstance(e, UpdateRatios)])


async def test_one_and_three_pnodes_clip_to_the_same_bits(tmp_path):
    cfg = {"steps": STEPS, "checkpoint_every": 0, "grad_clip": 0.3, "update_ratio_every": 3}
    async with running_cluster(tmp_path, pnodes=1, processes_on_machine=3) as (client, supervisor):
        alone = await run(client, config(min_pnodes=1, **cfg))
        others = [
            subprocess.Popen([sys.executable, "-m", "computeall.pnode", *supervisor.credential_args("pnode", name),
                              "--nats", supervisor.nats_url, "--processes-on-machine", "3"],
                             stdout=open(tmp_path / f"{name}.log", "wb"), stderr=subprocess.STDOUT)
            for name in ("pnode-1", "pnode-2")
        ]
        try:
            spread = await run(client, config(min_pnodes=3, **cfg))
        finally:
            for process in others:
                process.send_signal(signal.SIGTERM)
                await exit_code(process, 30)

    (steps3, digests3, pnodes3, ratios3), (steps1, digests1, pnodes1, ratios1) = spread, alone
    assert len(pnodes3) == 3 and pnodes1 == ["pnode-0"]
    assert sum(s.clipped for s in steps3) >= STEPS // 2, [s.grad_norm for s in steps3]
    assert [(s.loss, s.grad_norm, s.clipped) for s in steps3] == [(s.loss, s.grad_norm, s.clipped) for s in steps1]
    assert digests3 == digests1, "the same final parameters and optimizer state"
    # tokens per second per PNode: each PNode's compute time, recorded with every step
    assert all(set(s.compute_s_by_pnode) == set(pnodes3) for s in steps3)
    # update ratios at steps 0 and 3, per block, the same wherever the blocks lived
    assert [r.step for r in ratios3] == [0, 3] and [r.ratios for r in ratios3] == [r.ratios for r in ratios1]
    assert set(ratios3[0].ratios) == {"embed", "b0", "b1", "norm_f"}
    assert all(0 < v < 1 for r in ratios3 for v in r.ratios.values())
