"""Dependencies the project declares: a test that needs one imports it here, and a missing one fails
the run with what to do. A skip would let a broken install pass as green; only hardware (a GPU, root,
network namespaces) may skip."""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from types import ModuleType

import pytest


def module(name: str, install: str = "make setup (pip install -e '.[dev,kernels]')") -> ModuleType:
    """Import a declared Python dependency, or fail the run naming it and how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(f"{name} is a declared dependency and does not import ({exc}); install it: {install}", pytrace=False)


def present(name: str, install: str = "make setup (pip install -e '.[dev,kernels]')") -> None:
    """A declared Python dependency that must be found but not imported yet (Triton loads differently
    under its interpreter flag)."""
    if importlib.util.find_spec(name) is None:
        pytest.fail(f"{name} is a declared dependency and is not installed; install it: {install}", pytrace=False)


def program(name: str, install: str, *aliases: str) -> str:
    """The path of a declared program (Chromium, npm), or fail the run naming how to install it."""
    path = next((p for p in map(shutil.which, (name, *aliases)) if p), None)
    if path is None:
        pytest.fail(f"{name} is a declared dependency and is not on PATH; install it: {install}", pytrace=False)
    return path
