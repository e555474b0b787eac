"""`computeall export SID --format hf OUT`: a session's checkpoint as files another tool loads.

`hf` writes a Hugging Face directory: `AutoModelForCausalLM.from_pretrained(OUT)` gives a
`LlamaForCausalLM` with the same logits, `AutoTokenizer.from_pretrained(OUT)` the dataset's
tokenizer. torch is imported only once the command runs.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from computeall.protocol.dataset_api import EOT_TOKEN, PAD_TOKEN

from ..errors import UserError
from ..session_checkpoint import SessionCheckpoint, add_checkpoint_args, checkpoint_from_args, trained_model


def _hf(checkpoint: SessionCheckpoint, out: Path) -> list[Path]:
    from computeall.tensorcore.hf_export import ExportError, export_llama

    try:
        return export_llama(trained_model(checkpoint), checkpoint.tokenizer_json, out, EOT_TOKEN, PAD_TOKEN)
    except ExportError as exc:
        raise UserError(f"session {checkpoint.session_id} cannot be exported as a Hugging Face Llama: {exc}") from None


FORMATS = {"hf": _hf}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a session's checkpoint in another format (hf: Hugging Face transformers)")
    add_checkpoint_args(p)
    p.add_argument("--format", choices=sorted(FORMATS), default="hf")
    p.add_argument("out", type=Path, help="the directory to write (new or empty)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.out.exists() and (not args.out.is_dir() or any(args.out.iterdir())):
        raise UserError(f"{args.out} exists and is not an empty directory; name a new or empty one")
    checkpoint = asyncio.run(checkpoint_from_args(args))
    files = FORMATS[args.format](checkpoint, args.out)
    print(f"exported session {checkpoint.session_id} at step {checkpoint.step} to {args.out}: "
          f"{', '.join(f.name for f in files)}")
    return 0
