"""The request/reply tables (`responder.Api`): what every API promises, checked over all of them."""

from __future__ import annotations

import pytest

from computeall.protocol import dataset_api, membership_api, monitor_api, session_reads
from computeall.protocol.responder import Responder
from computeall.protocol.subjects import Subjects

APIS = (dataset_api.API, session_reads.API, monitor_api.API, membership_api.API)
S = Subjects("ca")


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.service)
def test_every_request_refuses_a_field_it_does_not_know_and_every_reply_can_say_why_not(api):
    """An unknown field (`user`, `actor`) is refused, so no request carries an identity of its own; a
    failure is the reply model itself, so a client reads every answer one way."""
    assert len(set(api.verbs)) == len(api.verbs)
    for endpoint in api.endpoints:
        assert endpoint.request.model_config.get("extra") == "forbid", endpoint.request
    assert api.failure("why").model_dump(include={"ok", "error"}) == {"ok": False, "error": "why"}


@pytest.mark.parametrize("api", APIS, ids=lambda api: api.service)
def test_a_service_answers_every_verb_of_its_api_and_nothing_else(api):
    async def handler(request, asker):
        raise AssertionError("not called")

    table = {verb: handler for verb in api.verbs}
    Responder(None, S, api, table, concurrent=False)  # complete: accepted
    for wrong in ({k: v for k, v in table.items() if k != api.verbs[0]}, {**table, "extra": handler}):
        with pytest.raises(ValueError, match=f"{api.service} must answer exactly"):
            Responder(None, S, api, wrong, concurrent=False)


def test_who_asks_is_read_from_the_subject_or_the_inbox_only():
    inbox = "_INBOX.user.alice.x1"
    assert dataset_api.API.asker(S, dataset_api.user_subject(S, "alice", "get"), "_INBOX.user.mallory.x") == \
        dataset_api.Requester("user", "alice", "get")
    assert session_reads.API.asker(S, session_reads.reads_subject(S, "alice", session_reads.EVENTS), inbox) == "alice"
    assert monitor_api.API.asker(S, monitor_api.monitor_subject(S, monitor_api.AUTH), inbox) == "user:alice"
    assert membership_api.API.asker(S, "ca.sec.users", "_INBOX.monitor.monitor.y") == "monitor:monitor"
    assert monitor_api.API.asker(S, monitor_api.monitor_subject(S, monitor_api.AUTH), "_INBOX.x") is None
    with pytest.raises(ValueError):
        session_reads.reader_of(S, "ca.api.alice.events.more")
