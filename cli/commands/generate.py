"""`computeall generate SID --prompt TEXT`: sample from a session's checkpoint, here, without its PNodes.

The prompt starts a document, as every document does in training: after `<|endoftext|>`.
Generation ends at the next `<|endoftext|>`, after --max-new-tokens, or at the network's context.
torch is imported only once the command runs, so the other commands start without it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from pydantic import ValidationError

from computeall.protocol.prompts import PromptCodec
from computeall.protocol.sampling import SamplingConfig

from ..errors import UserError
from ..session_checkpoint import add_checkpoint_args, checkpoint_from_args, trained_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="sample text from a session's checkpoint")
    add_checkpoint_args(p)
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.8, help="0 picks the most likely token every time")
    p.add_argument("--top-k", type=int, default=None, help="draw only among the k most likely tokens")
    p.add_argument("--top-p", type=float, default=None, help="draw only among the most likely tokens that make up p")
    p.add_argument("--seed", type=int, default=0, help="the same seed gives the same text")
    p.add_argument("--stream", action="store_true", help="print the text as it is generated")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from computeall.tensorcore.generation import GenerationError, Generator

    try:  # the flags first: a mistake there needs no trip to the bus
        sampling = SamplingConfig(
            max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
            seed=args.seed,
        )
    except ValidationError as exc:
        raise UserError("; ".join(f"--{str(e['loc'][0]).replace('_', '-')}: {e['msg']}" for e in exc.errors())) from None
    checkpoint = asyncio.run(checkpoint_from_args(args))
    # on stderr: stdout stays the text alone, for pipes
    print(f"(session {checkpoint.session_id}, checkpoint at step {checkpoint.step})", file=sys.stderr)
    codec = PromptCodec.from_json(checkpoint.tokenizer_json)
    prompt = codec.prompt(args.prompt)
    try:
        generator = Generator(trained_model(checkpoint))
        tokens = generator.generate(prompt, codec.limits(sampling))
        sys.stdout.write(args.prompt)
        new = _write(tokens, codec, args.stream)
    except GenerationError as exc:
        raise UserError(f"session {checkpoint.session_id}, step {checkpoint.step}: {exc}") from None
    sys.stdout.write("\n")
    if len(prompt) + new == generator.context and new < args.max_new_tokens:
        print(f"(stopped after {new} tokens: the network's context is {generator.context} tokens)", file=sys.stderr)
    return 0


def _write(tokens, codec: PromptCodec, stream: bool) -> int:
    """Print the new tokens' text (with `stream`, each piece as soon as it is whole UTF-8); how many there were."""
    ids: list[int] = []
    shown = ""
    for token in tokens:
        ids.append(token)
        if stream:
            text = codec.text(ids)
            if not text.endswith("\ufffd"):  # a character split over tokens: wait for its last byte
                sys.stdout.write(text[len(shown):])
                sys.stdout.flush()
                shown = text
    sys.stdout.write(codec.text(ids)[len(shown):])
    return len(ids)
