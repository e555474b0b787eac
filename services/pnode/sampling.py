"""Text samples of a session, from a committed checkpoint, on a thread beside the training work.

The session's stage is not touched: the checkpoint's objects become a whole model in this
process (`tensorcore.trained_model`, fp32), which `tensorcore.generation` continues with a KV
cache. The compute executor stays free for the next steps; the samples take their own thread, at
a low CPU priority (`background.py`).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor, ThreadPoolExecutor

from nats.js import JetStreamContext

from computeall.protocol.object_store import existing_bucket
from computeall.protocol.pnode_api import GenerateSamples
from computeall.tensorcore.generation import Generator
from computeall.tensorcore.trained_model import TrainedModel

from .background import background_executor
from .checkpoint_objects import fetch


def sampling_executor(name: str) -> ThreadPoolExecutor:
    return background_executor(f"{name}-samples")


async def generate(js: JetStreamContext, request: GenerateSamples, executor: Executor) -> list[list[int]]:
    """The new token ids of each prompt; `ValueError` (its subclasses) when the checkpoint or a prompt does not fit."""
    store = await existing_bucket(js, request.bucket)
    objects = {entry.vnode: await fetch(store, request.bucket, entry) for entry in request.objects}
    return await asyncio.get_running_loop().run_in_executor(executor, _continue, request, objects)


def _continue(request: GenerateSamples, objects: dict[str, bytes]) -> list[list[int]]:
    generator = Generator(TrainedModel.from_checkpoint(request.network_yaml, objects))
    return [list(generator.generate(prompt, request.sampling)) for prompt in request.prompts]
