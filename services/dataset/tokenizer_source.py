"""Where a new dataset's tokenizer comes from when it is not trained: another dataset, or a file.

A file is a `tokenizer.json` (the `tokenizers` format a Hugging Face directory holds): on the
service's machine inside its data roots, or uploaded by the client. It is checked before any
tokenizing starts: it loads, it is not too big, and it has the end-of-text token the datasets
put between documents.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from computeall.protocol.dataset_api import EOT_TOKEN, CreateDataset
from computeall.protocol.limits import TOKENIZER_FILE_BYTES

from . import tokenizer as bpe
from .data_roots import DataRoots
from .errors import DatasetUserError
from .store import DatasetStore
from .uploads import UploadCache


async def tokenizer_source(
    request: CreateDataset, owner: str, store: DatasetStore, roots: DataRoots, uploads: UploadCache
) -> tuple[str, Path] | None:
    """(what `tokenizer_from` records, the tokenizer file) when `owner`'s request names one; None: train one.
    A `tokenizer_from` dataset is one `owner` may read: theirs or a public one."""
    if request.tokenizer_from:
        current = await store.current(request.tokenizer_from)
        source = await store.find(request.tokenizer_from) if current and current.readable_by(owner) else None
        if source is None:
            raise DatasetUserError(f"--tokenizer-from {request.tokenizer_from!r}: no such dataset of yours or public; "
                                   "`computeall dataset list` shows them")
        return source.name, store.file(source, source.tokenizer.file)
    if request.tokenizer_file:
        path = roots.check(request.tokenizer_file)
    elif request.tokenizer_upload:
        path = await uploads.local(owner, request.tokenizer_upload)
    else:
        return None
    await asyncio.to_thread(_check_file, path)
    return f"file {path.name} {bpe.file_digest(path)}", path


def _check_file(path: Path) -> None:
    if not path.is_file():
        raise DatasetUserError(f"--tokenizer-file {path}: no such file")
    if path.stat().st_size > TOKENIZER_FILE_BYTES:
        raise DatasetUserError(f"--tokenizer-file {path.name}: larger than {TOKENIZER_FILE_BYTES.what} allows ({TOKENIZER_FILE_BYTES} bytes)")
    try:
        tokenizer = bpe.load(path)
    except Exception as exc:  # `tokenizers` raises a bare Exception for a file it cannot read
        raise DatasetUserError(
            f"--tokenizer-file {path.name}: not a tokenizers JSON file ({exc}); give the tokenizer.json of a "
            "Hugging Face directory or of another dataset"
        ) from None
    if tokenizer.token_to_id(EOT_TOKEN) is None:
        raise DatasetUserError(
            f"--tokenizer-file {path.name}: the tokenizer has no {EOT_TOKEN} token, which datasets put between "
            "documents; add it as a special token to the tokenizer, or train one (leave out --tokenizer-file)"
        )
