"""A session's metrics as TensorBoard event files, for the tools people already use.

One run folder per session (`DIR/<session id>`), written with TensorBoard's own event-file writer
(the `tensorboard` package: no torch, no TensorFlow), so `tensorboard --logdir DIR` shows every
session side by side. The x axis is steps completed, for training and validation alike (a step's
`StepCompleted.step` is its index, so it lands at index + 1)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from pathlib import Path

from computeall.protocol.events import EventEnvelope, StepCompleted, ValidationCompleted

Scalars = Callable[[object], Iterable[tuple[str, int, float | None]]]


def _step(p: StepCompleted) -> Iterable[tuple[str, int, float | None]]:
    done = p.step + 1
    yield "train/loss", done, p.loss
    yield "train/lr", done, p.lr
    yield "train/grad_norm", done, p.grad_norm
    yield "train/step_time_s", done, p.step_time_s
    yield "train/tokens_per_s", done, p.tokens / p.step_time_s if p.step_time_s > 0 else None
    yield "train/loss_scale", done, p.loss_scale


def _validation(p: ValidationCompleted) -> Iterable[tuple[str, int, float | None]]:
    yield "val/loss", p.step, p.loss
    yield "val/perplexity", p.step, p.perplexity


def add_tensorboard_argument(p: argparse.ArgumentParser) -> None:
    """`--tensorboard DIR` of the commands that follow the session they train (`run`, `up --train`)."""
    p.add_argument("--tensorboard", type=Path, default=None, metavar="DIR",
                   help="also write the session's metrics as TensorBoard event files, live, to DIR/<session id>")


# what each recorded event shows in TensorBoard; events of other types show nothing there
SCALARS: dict[type, Scalars] = {StepCompleted: _step, ValidationCompleted: _validation}


def run_folder(directory: Path, session_id: str) -> Path:
    return directory / session_id


class TensorBoardRun:
    """The event file of one session's run; `record` each of its events as it comes (or from the log)."""

    def __init__(self, directory: Path, session_id: str) -> None:
        from tensorboard.compat.proto.event_pb2 import Event  # imported here: only this command needs it
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(run_folder(directory, session_id)))

    def record(self, event: EventEnvelope) -> None:
        scalars = SCALARS.get(type(event.payload))
        if scalars is None:
            return
        values = [(tag, step, value) for tag, step, value in scalars(event.payload) if value is not None]
        for step in sorted({step for _, step, _ in values}):
            summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))
                                           for tag, at, value in values if at == step])
            self._writer.add_event(self._event(wall_time=event.ts, step=step, summary=summary))

    def close(self) -> None:
        self._writer.close()
