"""docs/protocol.md is generated from libs/protocol: it lists every message and stays current."""

from __future__ import annotations

import json

import pytest

from computeall.protocol.commands import Command
from computeall.protocol.events import Event, EventEnvelope

from .tools import load_tool

doc = load_tool("protocol_doc")
model_doc = load_tool("model_doc")


def test_the_committed_page_is_what_the_generator_writes():
    assert doc.OUTPUT.read_text() == doc.render(), f"docs/protocol.md is stale: run `{doc.REGENERATE}` and commit it"


def test_every_command_and_event_has_a_section_with_its_fields():
    page = doc.render()
    for model in [*model_doc.members(Command), *model_doc.members(Event)]:
        assert f"\n#### {model.__name__}\n" in page, f"{model.__name__} is missing from docs/protocol.md"
        section = page.split(f"\n#### {model.__name__}\n", 1)[1].split("\n#### ", 1)[0]
        for name in model.model_fields:
            assert f"| `{name}` |" in section, f"{model.__name__}.{name} is not in its table"


def test_the_events_the_hand_written_page_missed_are_there():
    page = doc.render()
    for name in ("LossScaleChanged", "StepSkipped", "PNodeSlow", "StepAborted", "Reallocated", "RolledBack"):
        assert f"[`{name}`](#{name.lower()})" in page and f"\n#### {name}\n" in page


def test_every_example_is_a_message_the_system_accepts():
    for model in model_doc.members(Event):
        envelope = {"type": model.__name__, "session_id": "a1b2c3d4e5f6", "payload": model_doc.example(model, doc.EXAMPLES)}
        assert EventEnvelope.model_validate_json(json.dumps(envelope)).payload == model.model_validate(model_doc.example(model, doc.EXAMPLES))


def test_field_descriptions_come_from_line_comments_and_descriptions():
    from computeall.protocol.config import SessionConfig
    from computeall.protocol.events import Reallocated, SessionPaused

    assert model_doc.description(SessionPaused, "step", SessionPaused.model_fields["step"]) == "the next step to run"
    assert model_doc.description(SessionConfig, "checkpoint_every", SessionConfig.model_fields["checkpoint_every"]) == (
        "0 = only on pause, stop and completion")
    assert model_doc.description(Reallocated, "type", Reallocated.model_fields["type"]) == ""  # a linter's comment is not a description


def test_every_subject_builder_is_documented():
    assert doc.undocumented_subject_builders() == []


def test_a_new_subject_without_a_row_stops_the_generator(monkeypatch):
    from computeall.protocol.subjects import Subjects

    monkeypatch.setattr(Subjects, "brand_new", lambda self, pid: f"{self.prefix}.new.{pid}", raising=False)
    with pytest.raises(SystemExit, match="Subjects.brand_new not documented"):
        doc.render()


def test_streams_are_derived_from_the_stream_subjects():
    subjects = doc.Subjects("ca")
    assert doc._stream(subjects, subjects.session_evt("__sid__", "__type__")) == "`CA_LOG`"
    assert doc._stream(subjects, subjects.tel("__pid__", "__kind__")) == "`CA_TEL`"
    assert doc._stream(subjects, subjects.heartbeat("__pid__")) == "none"


def test_a_template_without_a_block_is_refused():
    template = doc.TEMPLATE.read_text().replace("{{types}}\n", "")
    with pytest.raises(SystemExit, match="types"):
        doc.render(template)


def test_the_page_is_the_same_on_every_run():
    assert doc.render() == doc.render()
