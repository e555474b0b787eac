"""Human sizes: "4GiB", "512MiB", "2G", "1000000" -> bytes."""

from __future__ import annotations

import re

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40,
          "p": 10**15, "pb": 10**15, "pib": 2**50}


def parse_size(text: str) -> int:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"{text!r} is not a size; write e.g. 4GiB, 512MiB or 2000000000")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
