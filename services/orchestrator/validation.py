"""Validation: a forward pass over the validation split on one replica's PNodes, recorded as one loss."""

from __future__ import annotations

import math

from computeall.protocol.events import ValidationCompleted
from computeall.protocol.pnode_api import RunValidation

from .recorder import SessionRecorder
from .session_pnodes import SessionPNodes


async def validate(recorder: SessionRecorder, pnodes: SessionPNodes, step: int) -> None:
    state = recorder.state
    batches = state.config.validation_batches
    # replicas hold the same parameters (diloco's differ between outer steps: the first stands for all)
    replies = await pnodes.all(lambda p: RunValidation(session_id=state.id, step=step, batches=batches),
                               first_replica=True)
    tokens = sum(r.tokens for r in replies)
    loss = sum(r.loss_sum or 0.0 for r in replies) / max(1, tokens)
    await recorder.record(ValidationCompleted(step=step, loss=loss, perplexity=math.exp(min(loss, 50.0)), tokens=tokens))
