"""The step metrics the monitor stores and serves: `StepCompleted`'s fields, named once.

The DuckDB `steps` table, the GraphQL `Step` and `StepSeries` types and the dashboard's
TypeScript types are generated from this list (`python -m computeall.monitor.codegen`) or
checked against it by tests/unit/monitor/test_one_vocabulary.py, so a field added to
`StepCompleted` is either everywhere or a failing test. A per-PNode map is not a column: it is
named in `STEP_MAPS` and has a table of its own (one row per step and PNode).
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass

from computeall.protocol.events import StepCompleted


_GRAPHQL = {int: "Int", float: "Float", bool: "Boolean"}
_DUCKDB = {int: "BIGINT", float: "DOUBLE", bool: "BOOLEAN"}
_TYPESCRIPT = {int: "number", float: "number", bool: "boolean"}


@dataclass(frozen=True)
class StepColumn:
    name: str  # snake_case: the StepCompleted field and the steps table's column
    kind: type  # int, float or bool
    nullable: bool = False  # `float | None`: absent on some steps (a skipped step has no grad norm)

    @property
    def graphql_name(self) -> str:
        head, *rest = self.name.split("_")
        return head + "".join(word.capitalize() for word in rest)

    @property
    def graphql_type(self) -> str:
        return _GRAPHQL[self.kind] + ("" if self.nullable else "!")

    @property
    def duckdb_type(self) -> str:
        return _DUCKDB[self.kind]

    @property
    def typescript_type(self) -> str:
        return _TYPESCRIPT[self.kind] + (" | null" if self.nullable else "")


def scalar_column(name: str, annotation: object) -> StepColumn | None:
    """A pydantic field of type int, float or bool (or one of them | None) in its GraphQL, DuckDB and
    TypeScript forms; None for any other type."""
    if annotation in _GRAPHQL:
        return StepColumn(name, annotation)
    args = set(typing.get_args(annotation))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        (kind,) = args - {type(None)}
        if kind in _GRAPHQL:
            return StepColumn(name, kind, nullable=True)
    return None


def _payload_columns() -> list[StepColumn]:
    fields = {name: f for name, f in StepCompleted.model_fields.items() if name not in ("type", *STEP_MAPS)}
    columns = {name: scalar_column(name, f.annotation) for name, f in fields.items()}
    bad = {name: fields[name].annotation for name, c in columns.items() if c is None}
    if bad:
        raise TypeError(
            f"StepCompleted fields must be int, float or bool (or one of them | None) to be charted; these are not: "
            f"{bad}; a per-PNode map goes into STEP_MAPS with its own projection"
        )
    return [c for c in columns.values() if c is not None]


# StepCompleted's maps, projected into their own tables rather than columns: field -> table
STEP_MAPS = {"compute_s_by_pnode": "pnode_steps"}

_PAYLOAD = _payload_columns()

# `step` first (rows sort by it), then `ts` (the envelope's: when the step was recorded), then the rest
STEP_METRICS: tuple[StepColumn, ...] = (
    *(c for c in _PAYLOAD if c.name == "step"),
    StepColumn("ts", float),
    *(c for c in _PAYLOAD if c.name != "step"),
)
STEP_FIELDS: tuple[str, ...] = tuple(c.name for c in STEP_METRICS)
# the steps table's columns: the session, then every metric
STEP_COLUMNS: tuple[str, ...] = ("session_id", *STEP_FIELDS)

# A session's step count everywhere it is shown: steps completed, the session fold's `next_step` (the
# first step not yet recorded), which `session list` prints as done/total. The steps table keeps a
# row per recorded step and drops discarded ones, so that is one past its highest row
# (tests/unit/monitor/test_steps_completed.py checks it against the fold over whole lives).
COUNT_STEPS_COMPLETED = (
    "UPDATE sessions SET step = (SELECT coalesce(max(step) + 1, 0) FROM steps WHERE session_id = ?) WHERE id = ?"
)
