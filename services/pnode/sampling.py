"""Text samples of a session, from a committed checkpoint, on a thread beside the training work.

The session's stage is not touched: the checkpoint's objects become a whole model in this
process (`tensorcore.trained_model`, fp32), which `tensorcore.generation` continues with a KV
cache. The compute executor stays free for the next steps; the samples take their own thread, at
a low CPU priority, so that on a machine with no core to spare they wait for the steps, not
the other way round.
"""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import Executor, ThreadPoolExecutor

from nats.js import JetStreamContext

from computeall.protocol.object_store import open_bucket
from computeall.protocol.pnode_api import GenerateSamples
from computeall.tensorcore.generation import Generator
from computeall.tensorcore.trained_model import TrainedModel

from .checkpoint_objects import fetch

NICE = 10  # a tenth of a compute thread's share of a busy core; 19 would starve them behind other work


def sampling_executor(name: str) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-samples", initializer=_low_priority)


def _low_priority() -> None:
    """Nice this thread (Linux schedules threads one by one; threads it starts inherit it)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (AttributeError, OSError):  # not Linux, or not allowed: the samples just compete as equals
        pass


async def generate(js: JetStreamContext, request: GenerateSamples, executor: Executor) -> list[list[int]]:
    """The new token ids of each prompt; `ValueError` (its subclasses) when the checkpoint or a prompt does not fit."""
    store = await open_bucket(js, request.bucket)
    objects = {entry.vnode: await fetch(store, request.bucket, entry) for entry in request.objects}
    return await asyncio.get_running_loop().run_in_executor(executor, _continue, request, objects)


def _continue(request: GenerateSamples, objects: dict[str, bytes]) -> list[list[int]]:
    generator = Generator(TrainedModel.from_checkpoint(request.network_yaml, objects))
    return [list(generator.generate(prompt, request.sampling)) for prompt in request.prompts]
