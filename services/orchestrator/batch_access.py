"""A session's grant of its dataset's batches to the PNodes of its plan (`protocol.batch_grants`).

Preparation asked the dataset service for the dataset as the session's owner, so the owner may read
it; the grant passes that on to the PNodes that train for them, and to no other. It is written before
the plans go out (placement, at every allocation) and removed when the driver lets the session go.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nats.aio.client import Client as NATS
from nats.js.kv import KeyValue

from computeall.protocol import bus
from computeall.protocol.batch_grants import BatchGrant, grant, revoke, writable_grants
from computeall.protocol.bus_failover import through_failover
from computeall.protocol.subjects import Subjects


@dataclass(eq=False)
class BatchAccess:
    nc: NATS
    subjects: Subjects
    session_id: str
    _grants: KeyValue | None = field(default=None, init=False)
    _revision: int | None = field(default=None, init=False)  # of the grant this driver gave last

    async def give(self, dataset: str, pnodes: list[str]) -> None:
        """`pnodes` (and no others) may read `dataset`'s batches for this session from now on."""
        given = BatchGrant(dataset=dataset, pnodes=sorted(pnodes))
        self._revision = await through_failover(lambda: self._give(given), f"granting session {self.session_id}'s batches")

    async def end(self) -> None:
        """No PNode reads batches for this session any more, unless another orchestrator granted them since."""
        if self._revision is not None:
            revision, self._revision = self._revision, None
            await through_failover(lambda: self._end(revision), f"revoking session {self.session_id}'s batches")

    async def _give(self, given: BatchGrant) -> int:
        return await grant(await self._bucket(), self.session_id, given)

    async def _end(self, revision: int) -> bool:
        return await revoke(await self._bucket(), self.session_id, revision)

    async def _bucket(self) -> KeyValue:
        if self._grants is None:
            self._grants = await writable_grants(self.nc.jetstream(), self.subjects, bus.replicas(self.nc))
        return self._grants
