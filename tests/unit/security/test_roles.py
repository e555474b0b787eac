"""The roles table: least privilege, checked on the generated lists (the real server enforces them:
tests/integration/test_security_stories.py)."""

from computeall.cli.security.roles import ROLES, permissions
from computeall.cli.security.server_config import ServerSettings, server_config
from computeall.protocol.subjects import Subjects, is_inbox

S = Subjects("ca")


def test_only_the_superuser_may_do_everything():
    for role in ROLES:
        p = permissions(role, "x", S)
        assert (">" in p.publish) == (role == "superuser"), role
        assert (">" in p.subscribe) == (role == "superuser"), role


def test_a_pnode_speaks_only_for_itself():
    p = permissions("pnode", "p1", S)
    assert "ca.hb.p1" in p.publish and "ca.tel.p1.>" in p.publish
    assert not any(s.startswith(("ca.evt", "ca.cmd", "ca.hb.*", "ca.tel.*")) for s in p.publish)
    assert not any("STREAM.CREATE.CA_" in s or "CA_LOG" in s for s in p.publish), "no stream management, no log"
    assert p.subscribe == ("ca.pn.p1.>", "ca.orch.hb.*", "_INBOX.pnode.p1.>")


def test_only_the_orchestrator_appends_session_events_and_only_the_dataset_service_dataset_events():
    writers = {role: permissions(role, "x", S).publish for role in ROLES if role != "superuser"}
    assert [r for r, pub in writers.items() if "ca.evt.session.>" in pub] == ["orchestrator"]
    assert [r for r, pub in writers.items() if "ca.evt.dataset.>" in pub] == ["dataset"]
    assert [r for r, pub in writers.items() if any(s.startswith("$JS.API.STREAM.CREATE.CA_") for s in pub)] == \
        ["orchestrator", "dataset", "monitor"], "only services set up the streams"


def test_each_identity_reads_only_its_own_inbox():
    for role in ROLES:
        if role not in ("superuser", "leaf"):  # a leaf carries its site's PNodes' inboxes, has none of its own
            inboxes = [s for s in permissions(role, "x", S).subscribe if s.startswith("_INBOX")]
            assert inboxes == [f"_INBOX.{role}.x.>"], role


def test_replies_go_only_to_inboxes():
    assert is_inbox("_INBOX.user.alice.abc") and not is_inbox("ca.evt.session.s.SessionCompleted") and not is_inbox(None)


def test_the_config_quotes_every_subject():
    text = server_config(ServerSettings(host="127.0.0.1", port=1, store_dir="/d"), [("UKEY", permissions("orchestrator", "o", S))])
    assert '"$JS.API.STREAM.CREATE.CA_LOG"' in text and "authorization" in text
