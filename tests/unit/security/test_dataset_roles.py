"""Who may reach uploads and the dataset service, as the server config says it (issue #27, items 7, 8)."""

from __future__ import annotations

from computeall.cli.security.members import Member
from computeall.cli.security.roles import permissions
from computeall.cli.security.server_config import member_users
from computeall.cli.security.session_grants import SessionGrants
from computeall.protocol.batch_grants import grants_bucket
from computeall.protocol.credentials import new_nkey_seed, nkey_public
from computeall.protocol.dataset_api import pnode_batch_subject, progress_subject, user_subject
from computeall.protocol.object_store import uploads_bucket
from computeall.protocol.subjects import Subjects

S = Subjects()


def allowed(subject: str, patterns: tuple[str, ...]) -> bool:
    """NATS subject matching: `*` one token, `>` the rest."""
    def matches(tokens: list[str], wanted: list[str]) -> bool:
        if wanted and wanted[-1] == ">":
            return len(tokens) >= len(wanted) and matches(tokens[:len(wanted) - 1], wanted[:-1])
        return len(tokens) == len(wanted) and all(w in ("*", t) for w, t in zip(wanted, tokens))

    return any(matches(subject.split("."), pattern.split(".")) for pattern in patterns)


def member(role, name) -> Member:
    return Member(role=role, name=name, public_key=nkey_public(new_nkey_seed()), source="local")


def test_a_user_reaches_their_own_uploads_and_requests_and_nobody_elses():
    alice = permissions("user", "alice", S)
    theirs, hers = uploads_bucket(S, "bob"), uploads_bucket(S, "alice")
    for subject in (f"$O.{hers}.C.abc", f"$JS.API.STREAM.INFO.OBJ_{hers}", f"$JS.API.STREAM.PURGE.OBJ_{hers}",
                    user_subject(S, "alice", "get")):
        assert allowed(subject, alice.publish), subject
    for subject in (f"$O.{theirs}.C.abc", f"$O.{theirs}.M.abc", f"$JS.API.STREAM.INFO.OBJ_{theirs}",
                    f"$JS.API.DIRECT.GET.OBJ_{theirs}", f"$JS.API.CONSUMER.CREATE.OBJ_{theirs}",
                    f"$JS.API.STREAM.PURGE.OBJ_{theirs}", user_subject(S, "bob", "get"), pnode_batch_subject(S, "p0"),
                    f"$KV.{grants_bucket(S)}.s1",
                    # no stream set up by a user: one with subjects `$O.<bob's bucket>.>` would capture his uploads
                    f"$JS.API.STREAM.CREATE.OBJ_{hers}", f"$JS.API.STREAM.UPDATE.OBJ_{hers}", "$JS.API.STREAM.CREATE.x"):
        assert not allowed(subject, alice.publish), subject
    assert allowed(progress_subject(S, "alice", "d"), alice.subscribe)
    assert not allowed(progress_subject(S, "bob", "d"), alice.subscribe)


def test_a_pnode_asks_for_batches_as_itself_and_writes_no_grant():
    p0 = permissions("pnode", "p0", S)
    assert allowed(pnode_batch_subject(S, "p0"), p0.publish)
    for subject in (pnode_batch_subject(S, "p1"), user_subject(S, "alice", "batch"), f"$KV.{grants_bucket(S)}.s1"):
        assert not allowed(subject, p0.publish), subject


def test_the_dataset_service_reads_every_users_uploads_recomputed_from_the_members():
    before = [member("dataset", "dataset"), member("user", "alice")]
    after = [*before, member("user", "carol")]

    def dataset_lists(members) -> tuple[str, ...]:
        return next(p for key, p in member_users(members, S, SessionGrants()) if key == members[0].public_key).publish

    carols = f"$JS.API.STREAM.CREATE.OBJ_{uploads_bucket(S, 'carol')}"
    assert allowed(f"$O.{uploads_bucket(S, 'alice')}.C.x", dataset_lists(before))
    assert not allowed(carols, dataset_lists(before))
    assert allowed(carols, dataset_lists(after)), "a user made later gets a bucket the service may create and read"
    assert allowed(f"$JS.API.DIRECT.GET.KV_{grants_bucket(S)}.$KV.{grants_bucket(S)}.s1", dataset_lists(after))
    assert not allowed(f"$KV.{grants_bucket(S)}.s1", dataset_lists(after)), "grants are the orchestrator's to write"
    assert allowed(f"$KV.{grants_bucket(S)}.s1", permissions("orchestrator", "o", S).publish)
