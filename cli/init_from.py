"""`session create --init-from SID[@STEP] | DIR`: where a new session's first weights come from.

SID[@STEP] is a session's kept checkpoint (the newest when no step is named), pinned in the
config. DIR is a local Hugging Face Llama directory, converted here (`tensorcore.hf_import`) and
put in the user's own uploads bucket (a user may write there, not in the checkpoints'); the config names the objects and their
digests. Either way the weights are checked against the new network here, so a mismatch is
refused, naming the tensor, before anything is created. torch is imported only for --init-from.
"""

from __future__ import annotations

from pathlib import Path

import nats.errors
from nats.js.errors import BucketNotFoundError

from computeall.protocol.config import InitFrom, UploadedWeights
from computeall.protocol.dataset_client import DatasetError, open_uploads
from computeall.protocol.object_store import CheckpointObject, existing_bucket
from computeall.protocol.prompts import without_document_start
from computeall.protocol.wire import digest

from .client import Client
from .errors import UserError
from .session_checkpoint import read_session_checkpoint

TOKENIZER_FILE = "tokenizer.json"  # what `export --format hf` writes and transformers reads


async def init_from(client: Client, value: str, network_yaml: str, sid: str) -> InitFrom:
    """The `init_from` of session `sid` (not created yet) for `--init-from value`."""
    directory = Path(value)
    if directory.is_dir():
        return await _from_directory(client, directory, network_yaml, sid)
    source, _, step = value.partition("@")
    if step and not step.isdigit():
        raise UserError(f"--init-from {value}: name a session as SID or SID@STEP (STEP a number), or a directory")
    checkpoint = await read_session_checkpoint(client, source, int(step) if step else None)
    _check_fits(f"session {source} at step {checkpoint.step}", network_yaml, checkpoint.objects)
    return InitFrom(session_id=source, step=checkpoint.step)


def _check_fits(what: str, network_yaml: str, objects: dict[str, bytes]) -> None:
    """The weights of a checkpoint (any topology) load into the new network, tensor by tensor."""
    from computeall.tensorcore.trained_model import ModelLoadError, TrainedModel, checkpoint_weights, inference_network

    try:
        spec = inference_network(network_yaml)
        TrainedModel.from_weights(spec, checkpoint_weights(spec, objects))
    except ModelLoadError as exc:
        raise UserError(f"--init-from {what} does not fit the network: {exc}") from None


async def _from_directory(client: Client, directory: Path, network_yaml: str, sid: str) -> InitFrom:
    from computeall.tensorcore.hf_import import WeightsMismatch, llama_objects
    from computeall.tensorcore.trained_model import ModelLoadError, inference_network

    tokenizer = directory / TOKENIZER_FILE
    if not tokenizer.is_file():
        raise UserError(f"--init-from {directory}: there is no {TOKENIZER_FILE}, so nothing says which text its token ids are")
    try:
        objects = llama_objects(inference_network(network_yaml), directory)
    except (WeightsMismatch, ModelLoadError) as exc:
        raise UserError(f"--init-from {directory} does not fit the network: {exc}") from None
    try:
        bucket = await open_uploads(client.nc, client.subjects, client.user, timeout=60.0)  # the user's own
        store = await existing_bucket(client.js, bucket)
    except (DatasetError, BucketNotFoundError, nats.errors.NoRespondersError) as exc:
        raise UserError(f"your uploads bucket cannot be opened ({exc or type(exc).__name__}); is the dataset service running?") from None
    uploaded = []
    for vid, data in objects.items():
        name = f"init/{sid}/{vid}.safetensors"
        await store.put(name, data)
        uploaded.append(CheckpointObject(vnode=vid, object=name, digest=digest(data), bytes=len(data)))
    return InitFrom(uploaded=UploadedWeights(
        source=f"Hugging Face directory {directory.resolve()}", bucket=bucket, objects=uploaded,
        tokenizer_digest=digest(without_document_start(tokenizer.read_bytes())),  # the dataset's, as exported
    ))
