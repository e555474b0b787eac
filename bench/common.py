"""What every benchmark shares: one result row, its target, the `--quick` and `--json` flags, the table.

A benchmark is a module `bench/<name>.py`, run from the repository root as
`python -m bench.<name> [--quick] [--json PATH]`. Every figure is a `Row`: a value, the anchor it is
divided by (measured in the same run, never a constant of the code), the ratio, and the target the
ratio must meet, declared next to the row. A script prints its rows, writes them as JSON
(`bench/results/<name>.json` unless `--json` says elsewhere) and exits 1 when a target does not hold;
`bench/run_all.py` runs them all and writes docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


class Target(BaseModel):
    """Where a ratio must stand."""

    model_config = ConfigDict(frozen=True)
    relation: Literal[">=", "<=", "=="]
    bound: float

    def holds(self, ratio: float) -> bool:
        return {">=": ratio >= self.bound, "<=": ratio <= self.bound, "==": ratio == self.bound}[self.relation]

    def __str__(self) -> str:
        return f"{self.relation} {self.bound:g}"


def at_least(bound: float) -> Target:
    return Target(relation=">=", bound=bound)


def at_most(bound: float) -> Target:
    return Target(relation="<=", bound=bound)


def exactly(bound: float) -> Target:
    return Target(relation="==", bound=bound)


class Row(BaseModel):
    """One figure: `value` / `anchor_value` = `ratio`, which `target` bounds (None: reported, not bounded).

    A benchmark may add fields of its own (bench/compression.py: `method`, `direction`, `val_loss`, ...):
    they are kept in the JSON beside these."""

    model_config = ConfigDict(extra="allow")
    bench: str
    name: str  # what was measured, on what (network, shape, setting)
    metric: str  # what value and anchor_value are, with the unit: "s/step", "tokens/s", "bytes", ...
    value: float
    anchor: str  # what the value is divided by
    anchor_value: float
    ratio: float
    target: str | None = None  # e.g. ">= 0.9"
    holds: bool | None = None


class Bench:
    """A benchmark's command line and its rows: `bench.row(...)` per figure, then `bench.finish()`."""

    def __init__(self, name: str, doc: str, quick_help: str = "a shorter run: fewer steps, shapes and repeats") -> None:
        self.name = name
        self.rows: list[Row] = []
        self.parser = argparse.ArgumentParser(prog=f"python -m bench.{name}", description=doc,
                                              formatter_class=argparse.RawDescriptionHelpFormatter)
        self.parser.add_argument("--quick", action="store_true", help=quick_help)
        self.parser.add_argument("--json", type=Path, default=RESULTS / f"{name}.json", help="where to write the rows")

    def parse(self) -> argparse.Namespace:
        self.args = self.parser.parse_args()
        return self.args

    def row(self, name: str, metric: str, value: float, anchor: str, anchor_value: float,
            target: Target | None = None, **fields: float | int | str | None) -> Row:
        """One figure; `fields` are the benchmark's own, kept beside the common ones."""
        ratio = value / anchor_value if anchor_value else float("inf") if value else 1.0
        out = Row(bench=self.name, name=name, metric=metric, value=value, anchor=anchor, anchor_value=anchor_value,
                  ratio=ratio, target=None if target is None else str(target),
                  holds=None if target is None else target.holds(ratio), **fields)
        self.rows.append(out)
        print(f"  {name}: {_number(value)} {metric} / {anchor} {_number(anchor_value)} = {ratio:.3f}"
              + ("" if target is None else f" (target {target}: {'holds' if out.holds else 'MISSED'})"), flush=True)
        return out

    def run(self, measure: Callable[["Bench", bool], Awaitable[None]]) -> int:
        """The whole benchmark of one coroutine `measure(bench, quick)`: parse, measure, finish."""
        asyncio.run(measure(self, self.parse().quick))
        return self.finish()

    def finish(self) -> int:
        """Write the rows, print them; 1 when a target does not hold."""
        write_rows(self.rows, self.args.json)
        print_table(self.rows)
        missed = [r for r in self.rows if r.holds is False]
        for r in missed:
            print(f"MISSED: {r.name}: ratio {r.ratio:.3f}, target {r.target}")
        return 1 if missed else 0


def write_rows(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.model_dump() for r in rows], indent=1) + "\n")


def read_rows(path: Path) -> list[Row]:
    return [Row.model_validate(r) for r in json.loads(path.read_text())]


def _number(x: float) -> str:
    return f"{x:.4g}"


COLUMNS = ("bench", "figure", "value", "anchor", "anchor value", "ratio", "target", "holds")


def table_cells(r: Row) -> tuple[str, ...]:
    holds = {None: "", True: "yes", False: "**no**"}[r.holds]
    return (r.bench, r.name, f"{_number(r.value)} {r.metric}", r.anchor, _number(r.anchor_value), f"{r.ratio:.3f}",
            r.target or "", holds)


def print_table(rows: list[Row]) -> None:
    cells = [COLUMNS, *(table_cells(r) for r in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    for n, line in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))
