"""The demo's corpus when the user names none: the installed Python standard library's source.

Every machine that runs computeall has it, so the demo never downloads anything.
"""

from __future__ import annotations


from computeall.protocol.data_files import stdlib_root


def stdlib_files(max_bytes: int = 4 << 20) -> list[str]:
    """Top-level standard library modules, in name order, up to about `max_bytes` of text."""
    root = stdlib_root()  # a data root of every dataset service: read where it is, never uploaded
    chosen, total = [], 0
    for path in sorted(root.glob("*.py")):
        size = path.stat().st_size
        if total + size > max_bytes:
            break
        chosen.append(str(path))
        total += size
    if not chosen:
        raise FileNotFoundError(f"no Python sources under {root}; pass --data FILES")
    return chosen
