"""Text samples while a session trains: what the model writes every `sample_every` steps and at the end.

A sample reads a committed checkpoint of its step (saved first when that step has none), never
the PNodes' training state, so sampling cannot change a loss. One PNode of the session continues
the prompts with `tensorcore.generation` on a thread beside its compute (`GenerateSamples`); the
step loop does not wait for it, and the reply is recorded as `SamplesGenerated` at a later step
boundary (or before the session ends). The dataset service, which owns the tokenizer, encodes the
prompts and decodes the texts; the PNode sees token ids only. The sampling seed is the config's: the
same checkpoint and settings give the same text, which `computeall generate` reproduces.
"""

from __future__ import annotations

import asyncio
import logging
import time

from computeall.protocol.dataset_client import decode_tokens, encode_prompts
from computeall.protocol.events import Sample, SamplesGenerated
from computeall.protocol.pnode_api import GenerateSamples, PNodeReply
from computeall.protocol.sampling import SamplingConfig

from .checkpoints import Checkpoints
from .errors import PNodeFailure, SessionError
from .placement import Placement
from .preparation import dataset_call
from .recorder import SessionRecorder

log = logging.getLogger("computeall.orchestrator.samples")

SAMPLE_TIMEOUT_S = 600.0
SAMPLE_TRIES = 3  # a writer lost mid-sample is replaced: its checkpoint is still there, another PNode reads it
DRAIN_TIMEOUT_S = 120.0  # how long the end of a session (or a pause) waits for samples still being written


class Sampler:
    def __init__(self, recorder: SessionRecorder, placement: Placement, checkpoints: Checkpoints) -> None:
        self.recorder = recorder
        self.placement = placement
        self.checkpoints = checkpoints
        self.calls = placement.session_pnodes.calls  # to the PNodes, and (its connection) the dataset service
        self.prompts: list[list[int]] = []
        self.sampling: SamplingConfig | None = None
        self.pending: dict[int, asyncio.Task[PNodeReply]] = {}
        self.asked: dict[int, float] = {}  # step -> when the samples were asked for
        self.tries: dict[int, int] = {}  # step -> writers asked so far, while its samples are not recorded
        self.lost: set[int] = set()  # steps whose writer failed: asked again at the next boundary
        self.writers: dict[int, tuple[str, int]] = {}  # step -> the PNode writing it, and its generation then

    @property
    def enabled(self) -> bool:
        config = self.recorder.state.config
        return bool(config.sample_every) and config.replay_of is None

    async def start(self) -> None:
        """Encode the prompts; a prompt that leaves no room to write fails the session now, before any
        step, rather than at its first sample."""
        if not self.enabled:
            return
        config = self.recorder.state.config
        owner = self.recorder.state.owner
        encoded = await dataset_call(lambda: encode_prompts(self.calls.nc, self.calls.subjects, owner, self.placement.dataset,
                                                            config.sample_prompts, timeout=30.0))
        self.prompts = encoded.tokens
        self.sampling = config.sampling.for_tokenizer(encoded.eot_id, encoded.vocab_size)
        context = self.placement.graph.spec.context
        for text, ids in zip(config.sample_prompts, self.prompts):
            if len(ids) >= context:
                raise SessionError(f"sample prompt {text[:40]!r} is {len(ids)} tokens and the network's context is "
                                   f"{context}: shorten it so the model has room to write")

    def due(self, step: int, end: int) -> bool:
        """Whether the state after `step` steps is sampled: every `sample_every` steps and at the end, once."""
        if not self.enabled or step in self.pending:
            return False
        every = self.recorder.state.config.sample_every
        return (step % every == 0 or step == end) and step > self.recorder.state.last_sampled_step

    async def request(self, step: int) -> None:
        """Ask one PNode for the samples of the checkpoint after `step` steps; the reply is recorded later."""
        await self.checkpoints.save(step)
        self._ask(step)

    def ask_again(self) -> None:
        """Ask another writer for the samples a lost one was writing, while their checkpoint is kept (a
        rollback before it discards it, and the re-run samples that step afresh)."""
        state = self.recorder.state
        for step in sorted(self.lost):
            self.lost.discard(step)
            kept = any(c.step == step for c in state.checkpoints)
            if kept and step not in self.pending and step > state.last_sampled_step and self.tries[step] < SAMPLE_TRIES:
                self._ask(step)
            else:
                self.checkpoints.pinned.discard(step)

    def _ask(self, step: int) -> None:
        state = self.recorder.state
        checkpoint = next(c for c in state.checkpoints if c.step == step)
        self.checkpoints.pinned.add(step)  # not pruned while the PNode reads it
        request = GenerateSamples(
            session_id=state.id, step=step, network_yaml=state.config.network_yaml, bucket=checkpoint.bucket,
            objects=checkpoint.model_objects, prompts=self.prompts, sampling=self.sampling,
        )
        writer = self._writer()
        self.asked[step] = time.monotonic()
        self.tries[step] = self.tries.get(step, 0) + 1
        self.writers[step] = (writer, self.placement.registry.generation(writer))
        self.pending[step] = asyncio.create_task(self.calls.one(writer, request, timeout=SAMPLE_TIMEOUT_S))

    async def record_ready(self) -> None:
        """Record the samples that have come back, in step order; those whose writer was lost meanwhile
        (its request went with it: no answer would ever come) are asked again at the next boundary."""
        registry = self.placement.registry
        for step, (writer, generation) in list(self.writers.items()):
            if not self.pending[step].done() and not (registry.is_live(writer) and registry.generation(writer) == generation):
                log.warning("session %s: %s was lost writing the samples of step %d; asking another",
                            self.recorder.state.id, writer, step)
                self.pending.pop(step).cancel()
                del self.asked[step], self.writers[step]
                self.lost.add(step)  # its checkpoint stays pinned
        for step in sorted(s for s, task in self.pending.items() if task.done()):
            task, asked = self.pending.pop(step), self.asked.pop(step)
            del self.writers[step]
            try:
                reply = task.result()
                texts = await dataset_call(lambda: decode_tokens(self.calls.nc, self.calls.subjects, self.recorder.state.owner,
                                                                 self.placement.dataset, reply.samples, timeout=30.0))
            except PNodeFailure as exc:  # training goes on; another writer is asked at the next boundary
                log.warning("session %s: the samples of step %d are asked again: %s", self.recorder.state.id, step, exc)
                self.lost.add(step)  # its checkpoint stays pinned
                continue
            except SessionError as exc:  # training goes on; a re-run of this step samples again
                log.warning("session %s: no samples for step %d: %s", self.recorder.state.id, step, exc)
                self.checkpoints.pinned.discard(step)
                continue
            self.checkpoints.pinned.discard(step)
            self.tries.pop(step, None)
            samples = [Sample(prompt=prompt, text=text, tokens=len(ids))
                       for prompt, text, ids in zip(self.recorder.state.config.sample_prompts, texts, reply.samples)]
            await self.recorder.record(SamplesGenerated(step=step, samples=samples, pnode=reply.pnode,
                                                        seconds=time.monotonic() - asked))

    async def drain(self) -> None:
        """Wait (a while) for the samples still being written and record them; give up on the rest."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        self.ask_again()
        while self.pending and time.monotonic() < deadline:  # a second at a time: a writer may be lost meanwhile
            await asyncio.wait(self.pending.values(), timeout=min(1.0, deadline - time.monotonic()))
            await self.record_ready()
            self.ask_again()
        for step in self.pending:
            log.warning("session %s: gave up waiting for the samples of step %d", self.recorder.state.id, step)
        self.abandon()

    def abandon(self) -> None:
        """The driver stops: nobody will record what is still being written."""
        for step, task in self.pending.items():
            task.cancel()
        self.checkpoints.pinned.difference_update(self.pending.keys() | self.lost)
        self.pending.clear()
        self.asked.clear()
        self.lost.clear()
        self.tries.clear()
        self.writers.clear()

    def _writer(self) -> str:
        """The session's PNode with the most memory: it holds the whole model while it samples."""
        registry = self.placement.registry
        live = {hb.pnode: registry.memory_bytes(hb) for hb in registry.live()}
        return max(self.placement.pnodes, key=lambda p: (live.get(p, 0), p))
