"""What `make docker` (tools/docker_engine.py) and the Dockerfile promise without running an engine:
no image comes from a registry, torch is the pinned CPU build `make setup` installs, and a machine
that cannot run an engine is told so (the status the compose test skips on). The engine itself runs
in tests/integration/test_docker_compose.py."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from .tools import load_tool

REPO = Path(__file__).resolve().parents[2]
engine = load_tool("docker_engine")

CPU_METADATA = "Name: torch\nVersion: 2.13.0+cpu\nRequires-Dist: filelock\nRequires-Dist: sympy>=1.13.3\n"
CUDA_METADATA = ("Name: torch\nVersion: 2.13.0\nRequires-Dist: filelock\n"
                 'Requires-Dist: nvidia-cublas-cu12==12.8.4.1; platform_system == "Linux"\n'
                 'Requires-Dist: nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux"\n')


def fake_wheel(folder: Path, name: str, metadata: str) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("torch/__init__.py", "")
        archive.writestr(f"{name.split('-')[0]}-{name.split('-')[1]}.dist-info/METADATA", metadata)
    return path


def test_a_cuda_build_is_told_from_a_cpu_build(tmp_path):
    assert engine.cuda_requirements(fake_wheel(tmp_path, "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl", CPU_METADATA)) == []
    cuda = fake_wheel(tmp_path, "torch-2.13.0-cp311-cp311-linux_x86_64.whl", CUDA_METADATA)
    assert engine.cuda_requirements(cuda) == ["nvidia-cublas-cu12==12.8.4.1", "nvidia-cudnn-cu12==9.10.2.21"]


def test_a_cuda_wheel_is_refused_and_removed(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "INPUTS", tmp_path)
    cuda = fake_wheel(tmp_path, f"torch-{pinned_version()}-cp311-cp311-linux_x86_64.whl", CUDA_METADATA)
    with pytest.raises(SystemExit, match="CUDA build of torch") as refused:
        engine.stage_torch_wheel()
    assert "nvidia-cublas-cu12" in str(refused.value) and not cuda.exists(), "the next build asks pip again"


def test_the_wheel_of_another_version_makes_way_for_the_pinned_one(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "INPUTS", tmp_path)
    stale = fake_wheel(tmp_path, "torch-2.12.0+cpu-cp311-cp311-linux_x86_64.whl", CPU_METADATA)
    asked = []

    def pip_download(argv, **_):  # what `pip download` leaves in --dest
        asked.append(argv)
        fake_wheel(Path(argv[argv.index("--dest") + 1]), f"torch-{pinned_version()}+cpu-cp311-cp311-linux_x86_64.whl", CPU_METADATA)

    monkeypatch.setattr(engine, "run", pip_download)
    staged = engine.stage_torch_wheel()
    assert not stale.exists() and staged.name.startswith(f"torch-{pinned_version()}+cpu-")
    assert asked and asked[0][-1] == engine.torch_requirement()
    assert engine.stage_torch_wheel() == staged and len(asked) == 1, "a staged wheel is not fetched again"


def test_the_image_gets_the_torch_make_setup_installs():
    requirement = engine.torch_requirement()
    assert re.fullmatch(r"torch==[0-9.]+", requirement)
    assert f"pip install --quiet {requirement}" in (REPO / "Makefile").read_text()


def test_no_stage_of_the_image_comes_from_a_registry():
    """Every FROM is the base the build is given (BASE_IMAGE: the debootstrap image `make docker`
    makes) or an earlier stage of the same Dockerfile."""
    stages: list[str] = []
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("FROM "):
            source, *alias = line.split()[1:]
            assert source == "${BASE_IMAGE}" or source in stages, line
            stages += alias[1:]  # FROM x AS name
    assert stages and "ARG BASE_IMAGE=" in (REPO / "Dockerfile").read_text()


@pytest.mark.parametrize(("argv", "status"), [([], engine.SKIP), (["--optional"], 0)])
def test_a_machine_without_an_engine_is_told_why(monkeypatch, capsys, argv, status):
    monkeypatch.setattr(engine.shutil, "which", lambda command: None)
    monkeypatch.setattr(engine, "engine_answers", lambda: False)
    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    assert engine.main(argv) == status
    assert "needs root" in capsys.readouterr().err


def pinned_version() -> str:
    return engine.torch_requirement().split("==")[1]
