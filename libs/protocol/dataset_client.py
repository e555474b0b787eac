"""A small async client of the dataset service, for PNodes, the trainer and the CLI.

A `batch` reply is either one tensor frame (it starts with `wire.MAGIC`) or a
`DatasetReply` JSON that says why there is no batch.
"""

from __future__ import annotations

from pydantic import BaseModel, ValidationError

from . import wire
from .dataset_api import (
    BatchRequest, CreateDataset, DatasetReply, DecodeTokens, EncodePrompts, GetDataset, ListDatasets,
    LocateFiles, SampleRequest,
)
from .subjects import Subjects


class DatasetError(RuntimeError):
    """The dataset service refused a request; the message is the service's reason."""


async def _request(nc, subject: str, request: BaseModel, timeout: float) -> bytes:
    msg = await nc.request(subject, request.model_dump_json().encode(), timeout=timeout)
    return msg.data


def _reply(data: bytes) -> DatasetReply:
    try:
        reply = DatasetReply.model_validate_json(data)
    except ValidationError as exc:
        raise DatasetError(f"the dataset service sent an unreadable reply: {exc}") from None
    if not reply.ok:
        raise DatasetError(reply.error or "the dataset service refused the request without a reason")
    return reply


async def fetch_batch(nc, subjects: Subjects, request: BatchRequest, timeout: float) -> tuple[str, list[int], bytearray]:
    """Token ids of one batch as (dtype, shape (B, T+1), raw little-endian bytes)."""
    data = await _request(nc, subjects.dataset_api("batch"), request, timeout)
    if not data.startswith(wire.MAGIC):
        _reply(data)
        raise DatasetError("the dataset service answered a batch request without a batch")
    tensor = wire.Reassembler(max_pending=1).feed(data)
    if tensor is None:
        raise DatasetError("the dataset service sent a partial batch (more than one frame)")
    return tensor.dtype, tensor.shape, tensor.data


async def create_dataset(nc, subjects: Subjects, request: CreateDataset, timeout: float) -> dict:
    """Create (or, with `if_exists="reuse"`, find) a dataset; its manifest."""
    return _reply(await _request(nc, subjects.dataset_api("create"), request, timeout)).dataset or {}


async def get_dataset(nc, subjects: Subjects, name: str, timeout: float) -> dict:
    return _reply(await _request(nc, subjects.dataset_api("get"), GetDataset(name=name), timeout)).dataset or {}


async def list_datasets(nc, subjects: Subjects, timeout: float) -> list[dict]:
    return _reply(await _request(nc, subjects.dataset_api("list"), ListDatasets(), timeout)).datasets or []


async def sample_text(nc, subjects: Subjects, request: SampleRequest, timeout: float) -> list[str]:
    return _reply(await _request(nc, subjects.dataset_api("sample"), request, timeout)).samples or []


async def locate_files(nc, subjects: Subjects, request: LocateFiles, timeout: float) -> list[str]:
    """The paths of `request` the service reads as they are (the client uploads the others)."""
    return _reply(await _request(nc, subjects.dataset_api("locate"), request, timeout)).readable or []

async def encode_prompts(nc, subjects: Subjects, dataset: str, texts: list[str], timeout: float) -> DatasetReply:
    """The prompts as token ids (`tokens`), and the dataset's `eot_id` and `vocab_size`."""
    return _reply(await _request(nc, subjects.dataset_api("encode"), EncodePrompts(dataset=dataset, texts=texts), timeout))


async def decode_tokens(nc, subjects: Subjects, dataset: str, tokens: list[list[int]], timeout: float) -> list[str]:
    request = DecodeTokens(dataset=dataset, tokens=tokens)
    return _reply(await _request(nc, subjects.dataset_api("decode"), request, timeout)).texts or []
