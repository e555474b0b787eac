"""A small async client of the dataset service, for PNodes, the trainer and the CLI.

Every request goes out on the subject of who asks (`dataset_api.user_subject`: a user, or the
orchestrator for a session's owner; `pnode_batch_subject`: a PNode), which the server lets only
them publish to: the service reads the requester from it.

A `batch` reply is either one tensor frame (it starts with `wire.MAGIC`) or a
`DatasetReply` JSON that says why there is no batch.
"""

from __future__ import annotations

import nats.errors

from pydantic import BaseModel, ValidationError

from . import wire
from .dataset_api import (
    BatchRequest, CheckData, CreateDataset, DatasetReply, DecodeTokens, EncodePrompts, GetDataset, ListDatasets,
    LocateFiles, OpenUploads, SampleRequest, ShareDataset, user_subject,
)
from .subjects import Subjects


class DatasetError(RuntimeError):
    """The dataset service refused a request; the message is the service's reason."""


class DatasetBusError(DatasetError, nats.errors.TimeoutError):
    """The dataset service could not answer because the bus failed it (a failover): ask again. A timeout of the
    bus, as every handler of one knows it (`bus_failover.TRANSIENT`: `through_failover` asks again)."""


async def _request(nc, subject: str, request: BaseModel, timeout: float) -> bytes:
    msg = await nc.request(subject, request.model_dump_json().encode(), timeout=timeout)
    return msg.data


def _reply(data: bytes) -> DatasetReply:
    try:
        reply = DatasetReply.model_validate_json(data)
    except ValidationError as exc:
        raise DatasetError(f"the dataset service sent an unreadable reply: {exc}") from None
    if not reply.ok:
        raise (DatasetBusError if reply.transient else DatasetError)(
            reply.error or "the dataset service refused the request without a reason")
    return reply


async def _ask(nc, subjects: Subjects, user: str, verb: str, request: BaseModel, timeout: float) -> DatasetReply:
    return _reply(await _request(nc, user_subject(subjects, user, verb), request, timeout))


async def fetch_batch(nc, subject: str, request: BatchRequest, timeout: float) -> tuple[str, list[int], bytearray]:
    """Token ids of one batch as (dtype, shape (B, T+1), raw little-endian bytes); `subject` is the
    asker's: `pnode_batch_subject`, or `user_subject(..., "batch")`."""
    data = await _request(nc, subject, request, timeout)
    if not data.startswith(wire.MAGIC):
        _reply(data)
        raise DatasetError("the dataset service answered a batch request without a batch")
    tensor = wire.Reassembler(max_pending=1).feed(data)
    if tensor is None:
        raise DatasetError("the dataset service sent a partial batch (more than one frame)")
    return tensor.dtype, tensor.shape, tensor.data


async def create_dataset(nc, subjects: Subjects, user: str, request: CreateDataset, timeout: float) -> dict:
    """Create (or, with `if_exists="reuse"`, find) a dataset of `user`'s; its manifest."""
    return (await _ask(nc, subjects, user, "create", request, timeout)).dataset or {}


async def check_data(nc, subjects: Subjects, user: str, request: CheckData, timeout: float) -> None:
    """Raises `DatasetError` with the reason when `user`'s session data could not be prepared."""
    await _ask(nc, subjects, user, "check", request, timeout)


async def get_dataset(nc, subjects: Subjects, user: str, name: str, timeout: float) -> dict:
    return (await _ask(nc, subjects, user, "get", GetDataset(name=name), timeout)).dataset or {}


async def list_datasets(nc, subjects: Subjects, user: str, timeout: float) -> list[dict]:
    """`user`'s datasets and the public ones."""
    return (await _ask(nc, subjects, user, "list", ListDatasets(), timeout)).datasets or []


async def share_dataset(nc, subjects: Subjects, user: str, name: str, public: bool, timeout: float) -> dict:
    """Make `user`'s dataset public (or private again); its manifest."""
    return (await _ask(nc, subjects, user, "share", ShareDataset(name=name, public=public), timeout)).dataset or {}


async def sample_text(nc, subjects: Subjects, user: str, request: SampleRequest, timeout: float) -> list[str]:
    return (await _ask(nc, subjects, user, "sample", request, timeout)).samples or []


async def locate_files(nc, subjects: Subjects, user: str, request: LocateFiles, timeout: float) -> list[str]:
    """The paths of `request` the service reads as they are (the client uploads the others)."""
    return (await _ask(nc, subjects, user, "locate", request, timeout)).readable or []


async def open_uploads(nc, subjects: Subjects, user: str, timeout: float) -> str:
    """`user`'s uploads bucket, created by the service when it is not there yet."""
    return (await _ask(nc, subjects, user, "uploads", OpenUploads(), timeout)).bucket or ""


async def encode_prompts(nc, subjects: Subjects, user: str, dataset: str, texts: list[str], timeout: float) -> DatasetReply:
    """The prompts as token ids (`tokens`), and the dataset's `eot_id` and `vocab_size`."""
    return await _ask(nc, subjects, user, "encode", EncodePrompts(dataset=dataset, texts=texts), timeout)


async def decode_tokens(nc, subjects: Subjects, user: str, dataset: str, tokens: list[list[int]], timeout: float) -> list[str]:
    return (await _ask(nc, subjects, user, "decode", DecodeTokens(dataset=dataset, tokens=tokens), timeout)).texts or []
