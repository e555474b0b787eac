"""Which PNodes may read a dataset's batches: the orchestrator's grants, in a key-value bucket only it writes.

A PNode asks for batches on its own subject (`dataset_api.pnode_batch_subject`), naming the session it
reads for. The orchestrator, which checked when it prepared the session that its owner may read the
dataset, records under the session's id the dataset and the PNodes of its allocation before it sends them
their plans, again at every reallocation, and removes its grant when it lets the session go (done,
failed, paused, stopped; not when another orchestrator took the session over, whose grant is newer). The dataset service serves a PNode's batch only when the session's grant names
that PNode and that dataset. The server's permissions make the bucket the orchestrator's to write and the
dataset service's to read, so a grant cannot be forged by a PNode or a user.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import APIError, BucketNotFoundError, KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict, ValidationError

from .dataset_names import DatasetName
from .subjects import Subjects, check_token


WRONG_LAST_SEQUENCE = 10071  # JetStream's error code: the key has a newer revision than the one expected


def grants_bucket(subjects: Subjects) -> str:
    return f"{subjects.prefix}-batch-grants"


class BatchGrant(BaseModel):
    """The session's dataset and the PNodes that may read its batches."""

    model_config = ConfigDict(extra="forbid")

    dataset: DatasetName
    pnodes: list[str]


async def writable_grants(js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> KeyValue:
    """The bucket, created on first use (the orchestrator's)."""
    bucket = grants_bucket(subjects)
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        return await js.create_key_value(KeyValueConfig(bucket=bucket, history=1, storage=StorageType.FILE,
                                                        replicas=replicas, direct=True))


async def grant(grants: KeyValue, session_id: str, given: BatchGrant) -> int:
    """Record the session's grant; its revision, which only `revoke` with it removes."""
    return await grants.put(check_token(session_id, "session id"), given.model_dump_json().encode())


async def revoke(grants: KeyValue, session_id: str, revision: int) -> bool:
    """Remove the session's grant if it is still the one of `revision`: an orchestrator that lost the session
    to another never removes the grant the other gave since. False when it was not."""
    try:
        await grants.delete(check_token(session_id, "session id"), last=revision)
    except APIError as exc:
        if exc.err_code == WRONG_LAST_SEQUENCE:
            return False
        raise
    return True


async def granted(grants: KeyValue, session_id: str) -> BatchGrant | None:
    """The session's grant; None when there is none (never given, revoked, or not valid)."""
    try:
        entry = await grants.get(check_token(session_id, "session id"))
    except (KeyNotFoundError, KeyDeletedError):
        return None
    try:
        return BatchGrant.model_validate_json(entry.value or b"")
    except ValidationError:
        return None
