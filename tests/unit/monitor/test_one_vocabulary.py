"""The step metrics and the session statuses are spelled once; every copy is generated or checked here.

StepCompleted's fields -> steps table (migrations), GraphQL Step/StepSeries, web/src/api/protocol.ts.
SessionStatus (computeall.protocol.session_status) -> GraphQL SessionStatus, web/src/api/protocol.ts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from graphql import GraphQLEnumType, GraphQLNonNull

from computeall.monitor import codegen
from computeall.monitor.db import Database
from computeall.monitor.projection import HANDLERS
from computeall.monitor.projector import KNOWN_COMMANDS, KNOWN_EVENTS
from computeall.monitor.server import schema
from computeall.monitor.step_metrics import STEP_COLUMNS, STEP_MAPS, STEP_METRICS
from computeall.protocol.events import StepCompleted
from computeall.protocol.session_status import SessionStatus

WEB_API = Path(codegen.TYPESCRIPT_PATH).parent


def test_generated_schema_and_typescript_are_current():
    stale = [str(p) for p in codegen.stale()]
    assert not stale, f"{stale} differ from what computeall.protocol gives: run `{codegen.COMMAND}` and commit the result"


def test_step_metrics_are_step_completed_fields_plus_the_record_time():
    # the per-PNode maps have tables of their own
    assert {c.name for c in STEP_METRICS} == (set(StepCompleted.model_fields) - {"type", *STEP_MAPS}) | {"ts"}


def test_step_maps_have_their_tables(tmp_path):
    db = Database(tmp_path / "m.duckdb", readers=1)
    try:
        assert set(STEP_MAPS.values()) <= set(db.column_types)
    finally:
        db.close()
    assert set(STEP_MAPS) <= set(StepCompleted.model_fields)


def test_steps_table_has_one_column_per_metric(tmp_path):
    db = Database(tmp_path / "m.duckdb", readers=1)
    try:
        columns = db.column_types["steps"]
    finally:
        db.close()
    expected = {"session_id": "VARCHAR", **{c.name: c.duckdb_type for c in STEP_METRICS}}
    assert columns == expected, (
        "the steps table and StepCompleted differ: add a migration "
        "(services/monitor/migrations/NNN_*.sql, ALTER TABLE steps ADD COLUMN ...) for the new field"
    )
    assert STEP_COLUMNS == tuple(expected)


def test_graphql_step_types_and_status_enum_follow_the_protocol():
    built = schema()
    for type_name in ("Step", "StepSeries"):
        assert list(built.type_map[type_name].fields) == [c.graphql_name for c in STEP_METRICS]
    for c in STEP_METRICS:
        assert str(built.type_map["Step"].fields[c.graphql_name].type) == c.graphql_type
    enum = built.type_map["SessionStatus"]
    assert isinstance(enum, GraphQLEnumType) and list(enum.values) == [s.value for s in SessionStatus]
    status = built.type_map["Session"].fields["status"].type
    assert isinstance(status, GraphQLNonNull) and status.of_type is enum


def test_typescript_types_take_the_vocabulary_from_the_generated_module():
    # types.ts is graphql-codegen's (web/codegen.yml maps the schema's SessionStatus onto ./protocol's)
    types = (WEB_API / "types.ts").read_text()
    assert "import type { SessionStatus } from './protocol'" in types
    for word in ("requested", "rejected", *(s.value for s in SessionStatus)):
        assert f'"{word}"' not in types and f"'{word}'" not in types, \
            f"types.ts spells the status {word!r}: take it from ./protocol (generated)"


@pytest.mark.parametrize("name", sorted(HANDLERS))
def test_every_handler_projects_a_protocol_type(name):
    # a handler receives the validated model, which only a type of the protocol's unions has
    assert name in KNOWN_EVENTS | KNOWN_COMMANDS
