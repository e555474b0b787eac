"""Compression: bytes against fp32 and validation loss against the same training uncompressed (issue 28),
one row per method and direction.

Each direction's rows come from one module of `bench/compression_rows/`: `activations` and
`activation_grads` (what crosses a pipeline cut, `activations.py`) and `pseudo_grads` (what
data-parallel replicas send each other, `pseudo_grads.py`). A bytes row carries `method`, `direction`,
`bytes_ratio_vs_fp32`, `val_loss`, `val_loss_ratio_vs_uncompressed` and `steps` beside the common
fields; a method's loss has its own row (direction `loss`) so that each target is one ratio.

    python -m bench.compression [--quick] [--json PATH] [--steps N] [--method NAME ...] [--directions ...]
"""

from __future__ import annotations

import asyncio
import sys

from .common import Bench
from .compression_rows.activations import METHODS, activation_rows
from .compression_rows.pseudo_grads import pseudo_grad_rows

DIRECTIONS = ("activations", "pseudo_grads")


def main() -> int:
    bench = Bench("compression", __doc__, quick_help="80 steps of the pipeline cut (anchor and rank 16), replicas on micro-gpt")
    bench.parser.add_argument("--steps", type=int, help="the pipeline cut's training steps (default 300, quick 80)")
    bench.parser.add_argument("--method", action="append", choices=[m.name for m in METHODS],
                              help="the pipeline cut's methods to train (the anchor always)")
    bench.parser.add_argument("--directions", nargs="*", choices=DIRECTIONS, default=list(DIRECTIONS))
    args = bench.parse()
    if "activations" in args.directions:
        activation_rows(bench, args.quick, args.steps, args.method)
    if "pseudo_grads" in args.directions:
        asyncio.run(pseudo_grad_rows(bench, args.quick))
    return bench.finish()


if __name__ == "__main__":
    sys.exit(main())
