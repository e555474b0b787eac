"""Failover cost: time from `kill -9` of a PNode to the first new step, split into detection,
reallocation, state reload and re-run; steps re-run against the checkpoint interval; and the
overhead of checkpointing every N steps on the time per step (against no checkpoints). Then the loss
of a whole machine of a bus spanning three (network namespaces; skipped, saying why, where they
cannot be made): its server (leading CA_LOG), the active orchestrator and a PNode killed -9 at once
mid-session; a standby on another machine takes the session over. Target: the next step within the
stall timeout (an orchestrator's heartbeat timeout) + 5 s, nothing recorded twice, the losses and
digests of a clean run.

    python bench/failover.py [--quick] [--json PATH] [--network examples/networks/tiny-gpt.yaml]
    python bench/failover.py --machines 3 [--json PATH]        # the machine kill only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.wanlab import LabUnavailable  # noqa: E402
from bench.wanlab.machine_bus import MachineBus  # noqa: E402
from bench.wanlab.machines import Machines  # noqa: E402
from computeall.cli.client import connect  # noqa: E402
from computeall.cli.embedded import running_cluster  # noqa: E402
from computeall.cli.follow import start_session  # noqa: E402
from computeall.cli.session_view import session_events  # noqa: E402
from computeall.protocol.config import DataConfig, SessionConfig  # noqa: E402
from computeall.protocol.events import SessionClaimed, StepCompleted  # noqa: E402
from computeall.protocol.telemetry import HEARTBEAT_TIMEOUT_S  # noqa: E402
from tests.integration.cluster import stdlib_corpus  # noqa: E402
from tests.integration.sessions import final_digests, losses, run_to_end, wait_for  # noqa: E402


def session(network: Path, steps: int, checkpoint_every: int) -> SessionConfig:
    return SessionConfig(network_yaml=network.read_text(), data=DataConfig(files=stdlib_corpus()), steps=steps, seed=1,
                         checkpoint_every=checkpoint_every, min_pnodes=3)


async def seconds_per_step(client, network: Path, steps: int, checkpoint_every: int) -> float:
    sid = await run_to_end(client, session(network, steps, checkpoint_every))
    events = [e for _, e in await session_events(client, sid)]
    started = next(e.ts for e in events if e.type == "SessionClaimed")
    ended = next(e.ts for e in events if e.type == "SessionCompleted")
    return (ended - started) / steps


async def failover(client, supervisor, network: Path, steps: int, interval: int) -> dict:
    sid, _ = await start_session(client, session(network, steps, interval))
    await wait_for(client, sid, lambda s: s.next_step >= interval + interval // 2 + 1, timeout=600)
    killed_at = time.time()
    supervisor.services.pop("pnode-1").process.kill()  # kill -9, and no restart
    await wait_for(client, sid, lambda s: s.status == "completed", timeout=900)
    events = [e for _, e in await session_events(client, sid)]
    lost = next(e for e in events if e.type == "PNodeLost")
    realloc = next(e for e in events if e.type == "Reallocated")
    rolled = next(e for e in events if e.type == "RolledBack")
    first_new = next(e for e in events if e.type == "StepCompleted" and e.ts > rolled.ts)
    return {
        "detection_s": lost.ts - killed_at,
        "reallocation_s": realloc.ts - lost.ts,
        "state_reload_s": rolled.ts - realloc.ts,
        "rerun_s": first_new.ts - rolled.ts,
        "kill_to_first_new_step_s": first_new.ts - killed_at,
        "steps_rerun": rolled.payload.from_step - rolled.payload.to_step,
        "checkpoint_interval": interval,
    }


async def machine_kill(network: Path, steps: int = 12, kill_at: int = 6) -> dict:
    """The first of three machines lost mid-session: its server, which leads CA_LOG, the active orchestrator
    and a PNode of the session (`MachineBus`, as tests/integration/test_bus_machines.py sets it up)."""
    with tempfile.TemporaryDirectory() as tmp, Machines(3) as lab:
        machines = MachineBus(lab, Path(tmp), pnodes=(1, 1, 0))
        machines.start()
        for i in range(3):
            await _until(lambda i=i: machines.log(i).exists() and "computeall is up" in machines.log(i).read_text(
                errors="replace"), 300)
        async with connect(machines.user(up=[1])) as client:  # the CLI's connection does not fail over
            cfg = session(network, steps, 3).model_copy(update={"min_pnodes": 1})
            clean = await run_to_end(client, cfg, timeout=600)
            sid, _ = await start_session(client, cfg)
            await wait_for(client, sid, lambda s: s.next_step >= kill_at, timeout=300)
            killed_at = machines.kill(0)
            await wait_for(client, sid, lambda s: s.status == "completed", timeout=600)
            got, events = await losses(client, sid), [e for _, e in await session_events(client, sid)]
            clean_losses, clean_events = await losses(client, clean), await session_events(client, clean)
    before = [e.payload.step for e in events if isinstance(e.payload, StepCompleted) and e.ts <= killed_at]
    after = next(e for e in events if isinstance(e.payload, StepCompleted) and e.ts > killed_at)
    claimed = next(e for e in events if isinstance(e.payload, SessionClaimed) and e.ts > killed_at)
    steps_recorded = [s for s, _ in got]
    return {
        "scenario": "machine-kill",
        "kill_to_claim_s": claimed.ts - killed_at,
        "kill_to_next_step_s": after.ts - killed_at,
        "stall_timeout_s": HEARTBEAT_TIMEOUT_S,
        "target_s": HEARTBEAT_TIMEOUT_S + 5.0,
        "steps_rerun": (max(before) + 1 if before else 0) - claimed.payload.resume_from_step,
        "steps_recorded_twice": len(steps_recorded) - len(set(steps_recorded)),
        "losses_equal_clean_run": got == clean_losses,
        "digests_equal_clean_run": final_digests([(0, e) for e in events]) == final_digests(clean_events),
    }


async def _until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout_s:.0f}s")
        await asyncio.sleep(0.5)


async def main(args: argparse.Namespace) -> dict:
    steps = 20 if args.quick else 60
    with tempfile.TemporaryDirectory() as tmp:
        async with running_cluster(Path(tmp), pnodes=3) as (client, supervisor):
            await seconds_per_step(client, args.network, 3, 0)  # warm-up: dataset, imports
            plain = await seconds_per_step(client, args.network, steps, 0)
            every = {n: await seconds_per_step(client, args.network, steps, n) for n in (1, 5)}
            recovery = await failover(client, supervisor, args.network, steps, 5)
    return {
        "network": args.network.name,
        "seconds_per_step_no_checkpoints": plain,
        "checkpoint_overhead": {f"every_{n}": {"seconds_per_step": s, "ratio": s / plain} for n, s in every.items()},
        "failover": recovery,
    }


def print_machine_kill(row: dict) -> None:
    print(f"machine kill: the standby claimed the session {row['kill_to_claim_s']:.1f}s after, the next step "
          f"{row['kill_to_next_step_s']:.1f}s after (target {row['target_s']:.0f}s: "
          f"{'met' if row['kill_to_next_step_s'] <= row['target_s'] else 'MISSED'}); {row['steps_rerun']} steps re-run, "
          f"{row['steps_recorded_twice']} recorded twice; losses {'equal' if row['losses_equal_clean_run'] else 'DIFFER'}, "
          f"digests {'equal' if row['digests_equal_clean_run'] else 'DIFFER'} to a clean run's")


async def machines_row(args: argparse.Namespace) -> dict | None:
    try:
        return await machine_kill(args.network, steps=9 if args.quick else 12, kill_at=5)
    except LabUnavailable as exc:
        print(f"machine kill skipped: {exc}")
        return None


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--machines", type=int, choices=[3], default=None,
                        help="only the loss of one of 3 machines whose bus spans them")
    parser.add_argument("--network", type=Path, default=REPO / "examples" / "networks" / "micro-gpt.yaml")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "failover.json")
    args = parser.parse_args()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    if args.machines:
        row = asyncio.run(machines_row(args))
        if row:
            print_machine_kill(row)
        args.json.write_text(json.dumps([row] if row else [], indent=1) + "\n")
        sys.exit(0)
    result = asyncio.run(main(args))
    f = result["failover"]
    print(f"{result['network']}: {result['seconds_per_step_no_checkpoints']:.3f} s/step without checkpoints")
    for name, row in result["checkpoint_overhead"].items():
        print(f"  checkpoint {name.replace('_', ' ')} steps: {row['seconds_per_step']:.3f} s/step, ratio {row['ratio']:.2f}")
    print(f"kill -> first new step {f['kill_to_first_new_step_s']:.2f}s = detection {f['detection_s']:.2f}s + "
          f"reallocation {f['reallocation_s']:.2f}s + state reload {f['state_reload_s']:.2f}s + re-run {f['rerun_s']:.2f}s; "
          f"{f['steps_rerun']} steps re-run with a checkpoint every {f['checkpoint_interval']}")
    result["machine_kill"] = asyncio.run(machines_row(args))
    if result["machine_kill"]:
        print_machine_kill(result["machine_kill"])
    args.json.write_text(json.dumps(result, indent=1) + "\n")
