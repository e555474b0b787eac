"""`computeall generate` and `export` against a real session: checkpoint and tokenizer read from the bus."""

import asyncio
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from computeall.cli.follow import start_session

from .cluster import running_cluster
from .sessions import config, losses, run_to_end
from .test_training_run import scalars

COMPUTEALL = Path(sys.executable).parent / "computeall"


async def _cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """The CLI of the machine that runs the cluster in `data_dir`: it acts as the local user."""
    return await asyncio.to_thread(
        subprocess.run, [str(COMPUTEALL), *args, "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=120
    )


async def test_generate_and_export_a_trained_session(tmp_path):
    cfg = config(steps=6, checkpoint_every=3, keep_checkpoints=1, min_pnodes=1)
    async with running_cluster(tmp_path / "cluster", pnodes=1) as (client, _):
        here = tmp_path / "cluster"
        sid = await run_to_end(client, cfg)
        idle, _ = await start_session(client, cfg, start=False)

        gen = ["generate", sid, "--prompt", "def main(", "--max-new-tokens", "24"]
        first, again, other = [await _cli(here, *gen, "--seed", s) for s in ("1", "1", "2")]
        assert first.returncode == 0, first.stderr[-2000:]
        assert first.stdout.startswith("def main(") and len(first.stdout) > len("def main(\n")
        assert first.stdout == again.stdout
        assert f"(session {sid}, checkpoint at step 6)" in first.stderr, "it says which checkpoint it used"
        assert other.stdout != first.stdout
        streamed = await _cli(here, *gen, "--seed", "1", "--stream", "--step", "6")
        assert streamed.stdout == first.stdout

        refusals = {
            "user local has no session nosuch": ["generate", "nosuch", "--prompt", "x"],
            f"session {idle} has no checkpoint yet": ["generate", idle, "--prompt", "x"],
            "the checkpoint at step 3 of session": ["generate", sid, "--prompt", "x", "--step", "3"],
            "has no checkpoint at step 4; kept steps: 6": ["generate", sid, "--prompt", "x", "--step", "4"],
            "shorten it to at most 63 tokens": ["generate", sid, "--prompt", "word " * 200],
        }
        for message, args in refusals.items():
            result = await _cli(here, *args)
            assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)

        ours = await _cli(here, "generate", sid, "--prompt", "def main(", "--temperature", "0", "--max-new-tokens", "24")
        assert ours.returncode == 0, ours.stderr[-2000:]
        out = tmp_path / "hf"
        exported = await _cli(here, "export", sid, "--format", "hf", str(out))
        assert exported.returncode == 0, exported.stderr[-2000:]
        board = await _cli(here, "export", sid, "--format", "tensorboard", str(tmp_path / "board"))
        assert board.returncode == 0, board.stderr[-2000:]
        again = await _cli(here, "export", sid, "--format", "tensorboard", str(tmp_path / "board"))
        assert again.returncode == 2 and "already holds a run" in again.stderr
        recorded = await losses(client, sid)

    exported_scalars = scalars(tmp_path / "board" / sid)
    assert [(s.step, s.value) for s in exported_scalars["train/loss"]] == [
        (step + 1, float(np.float32(loss))) for step, loss in recorded]
    assert {"train/lr", "train/grad_norm", "train/step_time_s", "train/tokens_per_s"} <= exported_scalars.keys()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out).eval()
    ids = tokenizer("def main(", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        greedy = model.generate(ids, max_new_tokens=24, do_sample=False, attention_mask=torch.ones_like(ids))
    # the whole greedy continuation, in transformers as in `computeall generate --temperature 0`
    assert tokenizer.decode(greedy[0], skip_special_tokens=True) == ours.stdout.rstrip("\n")
