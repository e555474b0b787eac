"""The folders the dataset service reads paths from: nothing outside them is opened, listed or even looked at.

Always the Python standard library (the demo's corpus); `--data-root DIR` adds more. Its uploads
folder is not among them: an uploaded file is read only for a request of its owner that names it as
an upload (by its digest), so no one reads another's uploads by path. A path counts as inside when
its real path is: a symbolic link inside a root that points out of it is outside.

The service's own folders (datasets, uploads) are not data roots either, but every path it builds in
them from a name or a manifest goes through `confined`, the same rule for one folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import DatasetUserError


def inside(real: Path, root: Path) -> bool:
    """Whether the real path `real` is the real folder `root` or lies in it."""
    return real == root or root in real.parents


def confined(root: Path, relative: str, what: str) -> Path:
    """The real path of `root / relative` (links resolved) when it is inside `root`'s; otherwise a
    `DatasetUserError` naming `what` (the dataset and file it is). `relative` comes from a name or a
    manifest, so nothing about what lies outside is said."""
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(real_root / relative))
    if Path(relative).is_absolute() or not inside(real, real_root):
        raise DatasetUserError(f"{what}: {relative!r} leads out of the dataset service's folder {root.name}, so it is "
                               "not read; the dataset is damaged or forged: recreate it")
    return real


class DataRoots:
    def __init__(self, roots: list[Path]) -> None:
        self.roots = list(dict.fromkeys(Path(os.path.realpath(r)) for r in roots))

    def including(self, folders: list[Path]) -> "DataRoots":
        return DataRoots([*self.roots, *folders])

    def holds(self, path: Path) -> bool:
        real = Path(os.path.realpath(path))
        return any(inside(real, root) for root in self.roots)

    def check(self, name: str) -> Path:
        """The real path of `name` when it is inside a root; otherwise a `DatasetUserError` saying what to do."""
        path = Path(name)
        if not path.is_absolute():
            raise DatasetUserError(f"{name}: give an absolute path (paths are read by the dataset service, on its machine)")
        if not self.holds(path):
            raise DatasetUserError(
                f"{name}: outside the dataset service's data roots ({', '.join(map(str, self.roots))}), so it is not read. "
                "Let the client upload it (`computeall dataset create --files` and `computeall session create --data` "
                "upload what the service cannot read), or start the dataset service with `--data-root` naming its folder"
            )
        return Path(os.path.realpath(path))
