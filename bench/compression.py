"""Compression: one row per method and direction, bytes against fp32 and validation loss against the
same training uncompressed (issue 28).

Each direction's rows come from one function of `bench/compression_rows/`: `pseudo_grads` (what
data-parallel replicas send each other) so far. A row has `method`, `direction`,
`bytes_ratio_vs_fp32`, `val_loss`, `val_loss_ratio_vs_uncompressed` and `steps`, beside the common
`bench, name, metric, value, anchor, anchor_value, ratio, target, holds`. The script exits 1 when a
row's target does not hold.

    python bench/compression.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # bench.compression_rows

from bench.compression_rows.pseudo_grads import pseudo_grad_rows  # noqa: E402

DIRECTIONS = [pseudo_grad_rows]  # each: async (quick) -> rows


def show(rows: list[dict]) -> None:
    print(f"{'direction':<14}{'method':<76}{'bytes vs fp32':>14}{'val loss':>10}{'vs uncompressed':>17}  holds")
    for r in rows:
        print(f"{r['direction']:<14}{r['method']:<76}{r['bytes_ratio_vs_fp32']:>14.5f}{r['val_loss']:>10.4f}"
              f"{r['val_loss_ratio_vs_uncompressed']:>17.4f}  {'' if r['holds'] is None else r['holds']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="micro-gpt instead of tiny-gpt")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "compression.json")
    args = parser.parse_args()
    rows = [row for make in DIRECTIONS for row in asyncio.run(make(args.quick))]
    print(f"{os.cpu_count()} cores")
    show(rows)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if any(r["holds"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
