"""Progress of a create: tqdm bars on the service's stderr, and `DatasetProgress` messages for clients.

The build runs in a worker thread; messages are handed to the event loop, and
throttled so that a fast stage does not flood the bus.
"""

from __future__ import annotations

import asyncio
import sys
import time

from tqdm import tqdm

from computeall.protocol.dataset_api import DatasetProgress, progress_subject
from computeall.protocol.subjects import Subjects

_MIN_INTERVAL_S = 0.25


class ProgressReporter:
    def __init__(self, nc, subjects: Subjects, user: str, name: str, loop: asyncio.AbstractEventLoop) -> None:
        """Progress of `user`'s create of dataset `name`, to that user only."""
        self.nc = nc
        self.subject = progress_subject(subjects, user, name)
        self.name = name
        self.loop = loop
        self._bars: dict[str, tqdm] = {}
        self._sent: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int, unit: str) -> None:
        bar = self._bars.get(stage)
        if bar is not None and bar.disable:  # closed: the stage is done
            return
        if bar is None:
            bar = self._bars[stage] = tqdm(
                total=total, desc=f"{self.name}: {stage}", unit=unit, unit_scale=True, file=sys.stderr, mininterval=1.0, leave=False
            )
        bar.update(done - bar.n)
        if done >= total:
            bar.close()
        now = time.monotonic()
        if done < total and now - self._sent.get(stage, 0.0) < _MIN_INTERVAL_S:
            return
        self._sent[stage] = now
        data = DatasetProgress(name=self.name, stage=stage, done=done, total=total, unit=unit).model_dump_json().encode()
        self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self.nc.publish(self.subject, data)))

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
