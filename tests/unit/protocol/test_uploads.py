"""The upload format: a file's digests in parts, names that cannot point anywhere but at a file."""

import hashlib

import pytest
from pydantic import ValidationError

from computeall.protocol.uploads import UploadedFile, UploadManifest, manifest_of


def test_a_manifest_has_the_whole_files_and_each_parts_digest(tmp_path):
    path = tmp_path / "corpus.txt"
    data = bytes(range(256)) * 700  # 179,200 bytes: two whole parts of 64 KiB and a shorter one
    path.write_bytes(data)
    manifest = manifest_of(path, part_bytes=1 << 16)
    assert manifest.sha256 == hashlib.sha256(data).hexdigest() and manifest.size == len(data)
    assert manifest.parts == [hashlib.sha256(data[i:i + (1 << 16)]).hexdigest() for i in range(0, len(data), 1 << 16)]
    assert [manifest.part_size(i) for i in range(3)] == [65536, 65536, len(data) - 2 * 65536]


def test_a_manifest_whose_parts_cannot_hold_the_file_is_refused():
    with pytest.raises(ValidationError, match="3 parts of 65536 bytes cannot hold 10 bytes"):
        UploadManifest(sha256="0" * 64, size=10, part_bytes=1 << 16, parts=["0" * 64] * 3)


@pytest.mark.parametrize("name", ["..", ".", ".profile", "a/b", "a\\b", "", "x" * 256])
def test_an_uploaded_files_name_is_one_plain_name(name):
    with pytest.raises(ValidationError):
        UploadedFile(name=name, sha256="0" * 64, size=1)
    assert UploadedFile(name="notes..v2.jsonl", sha256="0" * 64, size=1).name == "notes..v2.jsonl"
