"""Input files -> documents, and the bad inputs a user can give."""

from __future__ import annotations

import json

import pytest

from computeall.dataset.errors import DatasetUserError
from computeall.dataset.data_roots import DataRoots
from computeall.dataset.sources import Reader


def test_paragraphs_files_folders_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("first doc\nline two\n\n\nsecond doc\n  \nthird")
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "b.txt").write_text("in a folder")
    (folder / ".hidden.txt").write_text("not read")
    (folder / "image.bin").write_bytes(b"\x89PNG\0\0data")
    (tmp_path / "c.jsonl").write_text("\n".join(json.dumps({"body": t, "id": i}) for i, t in enumerate(["j1", "j2"])) + "\n")
    reader = Reader(jsonl_field="body")
    scan = reader.scan([str(tmp_path / "a.txt"), str(folder), str(tmp_path / "c.jsonl")], DataRoots([tmp_path]))
    docs = list(reader.documents(scan.files))
    assert docs == ["first doc\nline two", "second doc", "third", "in a folder", "j1", "j2"]
    assert scan.documents == 6
    assert scan.skipped_binary_files == [str(folder / "image.bin")]
    whole = Reader(document_unit="file")
    assert list(whole.documents(whole.scan([str(tmp_path / "a.txt")], DataRoots([tmp_path])).files)) == [(tmp_path / "a.txt").read_text()]


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda p: None, "no such file or folder"),
        (lambda p: p.write_text(""), "the file is empty"),
        (lambda p: p.write_bytes(b"text\0\x01\x02"), "looks binary \\(NUL byte at offset 4\\)"),
        (lambda p: p.write_bytes(b"ok\n\nbad \xff here"), "invalid UTF-8 at byte offset 8"),
        (lambda p: p.write_text("\n\n  \n"), "no text in it"),
    ],
)
def test_bad_files_are_named_with_the_reason(tmp_path, setup, message):
    path = tmp_path / "input.txt"
    setup(path)
    with pytest.raises(DatasetUserError, match=message):
        Reader().scan([str(path)], DataRoots([tmp_path]))


def test_invalid_utf8_can_be_skipped_and_counted(tmp_path):
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"good one\n\nbad \xc3\x28 one\n\ngood two")
    reader = Reader(on_invalid_utf8="skip")
    scan = reader.scan([str(path)], DataRoots([tmp_path]))
    assert scan.skipped_invalid_utf8 == 1 and scan.documents == 2
    assert list(reader.documents(scan.files)) == ["good one", "good two"]


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n{"title": "no text"}\n')
    with pytest.raises(DatasetUserError, match=r"d.jsonl:2: no string field 'text'.*--jsonl-field.*title"):
        Reader().scan([str(path)], DataRoots([tmp_path]))
    path.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(DatasetUserError, match=r"d.jsonl:2: not valid JSON"):
        Reader().scan([str(path)], DataRoots([tmp_path]))


def test_folder_without_text(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetUserError, match="no non-empty text files"):
        Reader().scan([str(tmp_path / "empty")], DataRoots([tmp_path]))


def test_paths_outside_the_data_roots_are_refused_without_being_looked_at(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("not for the service")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "corpus").mkdir()
    (root / "corpus" / "ok.txt").write_text("a document inside the root")
    (root / "corpus" / "escape.txt").symlink_to(outside / "secret.txt")
    roots = DataRoots([root])
    for name in ("/etc/passwd", str(outside / "secret.txt"), str(outside / "missing.txt"), str(root / "link.txt")):
        with pytest.raises(DatasetUserError, match="outside the dataset service's data roots.*upload.*--data-root") as info:
            Reader().scan([name], roots)
        assert "no such file" not in str(info.value), "a refusal says nothing about what exists outside"
    with pytest.raises(DatasetUserError, match="give an absolute path"):
        Reader().scan(["root/corpus/ok.txt"], roots)
    scan = Reader().scan([str(root / "corpus")], roots)
    assert [f.path.name for f in scan.files] == ["ok.txt"]
    assert scan.skipped_binary_files == [str(root / "corpus" / "escape.txt")], "a link out of the root is skipped"
