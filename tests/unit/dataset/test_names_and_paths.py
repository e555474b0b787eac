"""Names and paths that would leave the dataset service's folders are refused where they enter and where
they are used (issue #27, item 8): one validator for names, one confinement for paths."""

from __future__ import annotations

import json
import os
import time
import typing

import pytest
from pydantic import BaseModel, ValidationError

from computeall.cli.data_upload import expand
from computeall.cli.errors import UserError
from computeall.dataset.data_roots import confined
from computeall.dataset.errors import DatasetUserError
from computeall.dataset.store import DatasetStore
from computeall.protocol import dataset_api
from computeall.protocol.dataset_api import requester_of, user_subject
from computeall.protocol.dataset_names import OneToken
from computeall.protocol.limits import UPLOAD_FILE_BYTES
from computeall.protocol.subjects import Subjects
from computeall.protocol.uploads import UploadedFile

S = Subjects()
ESCAPES = ["../x", "/etc/passwd", "a/b", "..", ".", "x.y", "a\\b", "", "x" * 65, "na me", "*", ">"]
REQUESTS = [dataset_api.CreateDataset, dataset_api.GetDataset, dataset_api.ShareDataset, dataset_api.BatchRequest,
            dataset_api.SampleRequest, dataset_api.EncodePrompts, dataset_api.DecodeTokens]
VALID = {"name": "ok", "dataset": "ok", "files": ["/f"], "public": True, "step": 0, "batch": 1, "context": 8,
         "texts": ["x"], "tokens": [[1]]}


def token_fields(model: type[BaseModel]) -> list[str]:
    """The fields of a request whose type is a checked token (`DatasetName`, `SplitName`), optional ones too."""
    def checked(annotation) -> bool:
        return any(isinstance(m, OneToken) for m in getattr(annotation, "__metadata__", ())) or any(
            checked(a) for a in typing.get_args(annotation))

    return [name for name, field in model.model_fields.items()
            if any(isinstance(m, OneToken) for m in field.metadata) or checked(field.annotation)]


@pytest.mark.parametrize("model", REQUESTS, ids=lambda m: m.__name__)
def test_every_name_of_every_request_is_one_token(model):
    fields = token_fields(model)
    assert fields, f"{model.__name__} names no dataset?"
    base = {k: v for k, v in VALID.items() if k in model.model_fields}
    model.model_validate(base)
    for field in fields:
        for bad in ESCAPES:
            with pytest.raises(ValidationError, match="is not valid: use 1 to"):
                model.model_validate({**base, field: bad})


def test_the_requester_is_read_from_the_subject_and_nothing_else_is_one():
    assert requester_of(S, user_subject(S, "alice", "get")) == dataset_api.Requester("user", "alice", "get")
    assert requester_of(S, dataset_api.pnode_batch_subject(S, "p0")) == dataset_api.Requester("pnode", "p0", "batch")
    for subject in ("ca.ds.get", "ca.ds.pnode.p0.get", "ca.ds.progress.alice.d", "ca.ds.user.alice", "xx.ds.user.a.get"):
        with pytest.raises(ValueError):
            requester_of(S, subject)


def test_an_upload_is_never_named_as_the_service_names_its_own_files():
    with pytest.raises(ValidationError, match="manifest.json is the name of the dataset service's own files"):
        UploadedFile(name="manifest.json", sha256="0" * 64, size=1)
    with pytest.raises(ValidationError):
        UploadedFile(name="../x", sha256="0" * 64, size=1)
    with pytest.raises(ValidationError):
        UploadedFile(name="big.txt", sha256="0" * 64, size=UPLOAD_FILE_BYTES + 1)


def test_a_path_is_confined_after_its_links_are_resolved(tmp_path):
    root = tmp_path / "root"
    (root / "inside").mkdir(parents=True)
    (root / "inside" / "f").write_text("x")
    (tmp_path / "outside").mkdir()
    (root / "out").symlink_to(tmp_path / "outside")
    (root / "in").symlink_to(root / "inside")
    assert confined(root, "inside/f", "d") == (root / "inside" / "f").resolve()
    assert confined(root, "in/f", "d") == (root / "inside" / "f").resolve(), "a link that stays inside is inside"
    for escape in ("../outside", "/etc/passwd", "out", "out/anything", "inside/../../outside"):
        with pytest.raises(DatasetUserError, match="leads out of the dataset service's folder root"):
            confined(root, escape, "d")


def test_the_store_refuses_a_dataset_folder_or_manifest_that_leads_out(tmp_path):
    store = DatasetStore(tmp_path / "data", js=None, bucket="b", chunk_bytes=1 << 16)
    (tmp_path / "elsewhere").mkdir()
    (store.root / "linked").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(DatasetUserError, match="'linked' leads out"):
        store.local("linked")
    (store.root / "other").mkdir()
    (store.root / "other" / "manifest.json").write_text(json.dumps({"name": "someone-else"}))
    with pytest.raises(DatasetUserError, match="dataset 'other': its manifest here is not valid"):
        store.local("other")


def test_the_client_refuses_a_file_over_the_limit_by_its_size_before_reading_it(tmp_path):
    huge = tmp_path / "huge.txt"
    with open(huge, "wb") as f:
        f.truncate(64 << 30)  # sparse: reading it would take minutes, its size is known at once
    started = time.monotonic()
    with pytest.raises(UserError, match=r"huge.txt: 68,719,476,736 bytes, more than the 4,294,967,296"):
        expand([str(huge)])
    assert time.monotonic() - started < 1.0
    os.truncate(huge, 10)
    assert expand([str(huge)]) == [huge.resolve()]
