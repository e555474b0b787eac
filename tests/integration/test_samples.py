"""Samples while training: recorded every `sample_every` steps and at the end, from the PNodes, without
changing a loss, and exactly what `computeall generate` writes from the same checkpoint and seed."""

import asyncio
import subprocess
import sys
from pathlib import Path

from computeall.cli.session_view import session_events
from computeall.protocol.events import SamplesGenerated
from computeall.protocol.sampling import SamplingConfig

from .cluster import running_cluster
from .sessions import config, losses, run_to_end

COMPUTEALL = Path(sys.executable).parent / "computeall"
PROMPTS = ["def main(", ""]
SAMPLING = SamplingConfig(max_new_tokens=12, temperature=0.8, top_k=50, seed=7)


async def test_samples_are_recorded_without_changing_the_math_and_generate_reproduces_them(tmp_path):
    plain = config(steps=7, checkpoint_every=0, min_pnodes=2)
    sampled = plain.model_copy(update={"sample_every": 3, "sample_prompts": PROMPTS, "sampling": SAMPLING})
    async with running_cluster(tmp_path / "cluster", pnodes=2) as (client, _):
        here = tmp_path / "cluster"
        without, with_samples = [await run_to_end(client, cfg) for cfg in (plain, sampled)]
        assert await losses(client, with_samples) == await losses(client, without)

        recorded = [e.payload for _, e in await session_events(client, with_samples)
                    if isinstance(e.payload, SamplesGenerated)]
        assert [s.step for s in recorded] == [3, 6, 7]  # every 3 steps, and the end
        for event in recorded:
            assert [s.prompt for s in event.samples] == PROMPTS
            assert all(0 < s.tokens <= SAMPLING.max_new_tokens and s.text for s in event.samples)
        assert recorded[0].samples != recorded[-1].samples  # the model moved on

        last = recorded[-1].samples[0]
        generated = await asyncio.to_thread(subprocess.run, [
            str(COMPUTEALL), "generate", with_samples, "--step", "7", "--prompt", last.prompt, "--data-dir", str(here),
            "--max-new-tokens", str(SAMPLING.max_new_tokens), "--temperature", str(SAMPLING.temperature),
            "--top-k", str(SAMPLING.top_k), "--seed", str(SAMPLING.seed),
        ], capture_output=True, text=True, timeout=120)
        assert generated.returncode == 0, generated.stderr[-2000:]
        assert generated.stdout == last.prompt + last.text + "\n"
