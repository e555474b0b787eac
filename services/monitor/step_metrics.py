"""The step metrics the monitor stores and serves: `StepCompleted`'s fields, named once.

The DuckDB `steps` table, the GraphQL `Step` and `StepSeries` types and the dashboard's
TypeScript types are generated from this list (`python -m computeall.monitor.codegen`) or
checked against it by tests/unit/monitor/test_one_vocabulary.py, so a field added to
`StepCompleted` is either everywhere or a failing test.
"""

from __future__ import annotations

from dataclasses import dataclass

from computeall.protocol.events import StepCompleted


@dataclass(frozen=True)
class StepColumn:
    name: str  # snake_case: the StepCompleted field and the steps table's column
    kind: type  # int or float

    @property
    def graphql_name(self) -> str:
        head, *rest = self.name.split("_")
        return head + "".join(word.capitalize() for word in rest)

    @property
    def graphql_type(self) -> str:
        return {int: "Int", float: "Float"}[self.kind]

    @property
    def duckdb_type(self) -> str:
        return {int: "BIGINT", float: "DOUBLE"}[self.kind]


def _payload_columns() -> list[StepColumn]:
    fields = {name: f for name, f in StepCompleted.model_fields.items() if name != "type"}
    bad = {name: f.annotation for name, f in fields.items() if f.annotation not in (int, float)}
    if bad:
        raise TypeError(f"StepCompleted fields must be int or float to be charted; these are not: {bad}")
    return [StepColumn(name, f.annotation) for name, f in fields.items()]


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
