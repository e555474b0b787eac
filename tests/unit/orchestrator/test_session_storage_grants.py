"""A placement's grants that the authority leaves unanswered stall the placement (recovery places
again and grants again) instead of failing the session as an internal error."""

import nats.errors
import pytest

from computeall.orchestrator import session_storage
from computeall.orchestrator.errors import SessionError, StepStalled
from computeall.orchestrator.session_storage import SessionStorage
from computeall.protocol.subjects import Subjects


@pytest.mark.parametrize("raised, expected", [(nats.errors.TimeoutError, StepStalled),
                                              (nats.errors.NoRespondersError, SessionError)])
async def test_an_unanswered_grant_stalls_and_a_missing_authority_fails(monkeypatch, raised, expected):
    async def host_session(*args, **kwargs):
        raise raised

    monkeypatch.setattr(session_storage, "host_session", host_session)
    storage = SessionStorage(None, Subjects("ca"), "s1", "authority")
    with pytest.raises(expected):
        await storage.host(["p0"], as_of=3)
    assert not storage.hosted
