"""`computeall export SID --format hf|tensorboard OUT`: a session in a format another tool reads.

`hf` writes a Hugging Face directory from the session's checkpoint: `AutoModelForCausalLM.from_pretrained(OUT)`
gives a `LlamaForCausalLM` with the same logits, `AutoTokenizer.from_pretrained(OUT)` the dataset's
tokenizer. torch is imported only once the command runs. `tensorboard` writes the session's recorded
metrics as TensorBoard event files under `OUT/<session id>` (`tensorboard --logdir OUT`).
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN
from computeall.protocol.events import standing

from ..client import connect
from ..errors import UserError
from ..identity import user_credential
from ..session_checkpoint import add_checkpoint_args, checkpoint_from_args, trained_model
from ..session_view import find_session, session_events
from ..tensorboard_log import TensorBoardRun, run_folder


def _empty(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory; name a new or empty one")
    return out


def _hf(args: argparse.Namespace) -> str:
    from computeall.tensorcore.hf_export import ExportError, export_llama

    out = _empty(args.out)
    checkpoint = asyncio.run(checkpoint_from_args(args))
    try:
        files = export_llama(trained_model(checkpoint), checkpoint.tokenizer_json, out, EOT_TOKEN, PAD_TOKEN)
    except ExportError as exc:
        raise UserError(f"session {checkpoint.session_id} cannot be exported as a Hugging Face Llama: {exc}") from None
    return (f"exported session {checkpoint.session_id} at step {checkpoint.step} to {out}: "
            f"{', '.join(f.name for f in files)}")


def _tensorboard(args: argparse.Namespace) -> str:
    if args.step is not None:
        raise UserError("--step names a checkpoint; the tensorboard format writes every recorded step")

    async def events():
        async with connect(user_credential(args), args.prefix) as client:
            return await session_events(client, args.session_id)

    recorded = asyncio.run(events())
    find_session(args.session_id, recorded)  # the user's error when there is no such session
    kept = {id(p) for p in standing([e.payload for _, e in recorded])}  # a step re-run after a quarantine, once
    folder = run_folder(args.out, args.session_id)
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"{folder} already holds a run; name another OUT or remove it")
    run = TensorBoardRun(args.out, args.session_id)
    try:
        for _, event in recorded:
            if id(event.payload) in kept:
                run.record(event)
    finally:
        run.close()
    return f"exported session {args.session_id}'s metrics to {folder} (tensorboard --logdir {args.out})"


@dataclass(frozen=True)
class Format:
    help: str
    export: Callable[[argparse.Namespace], str]  # what it wrote, for the user


FORMATS = {
    "hf": Format("a Hugging Face transformers directory of the checkpoint", _hf),
    "tensorboard": Format("TensorBoard event files of the recorded metrics, in OUT/<session id>", _tensorboard),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a session in another tool's format: "
                                      + "; ".join(f"{name}: {f.help}" for name, f in FORMATS.items()))
    add_checkpoint_args(p)
    p.add_argument("--format", choices=sorted(FORMATS), default="hf")
    p.add_argument("out", type=Path, help="the directory to write (hf: new or empty; tensorboard: a log dir)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(FORMATS[args.format].export(args))
    return 0
