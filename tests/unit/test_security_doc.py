"""docs/security.md is generated from the roles table: the permissions it shows are the server's."""

from __future__ import annotations

from computeall.cli.security.roles import ROLES, permissions
from computeall.protocol.subjects import Subjects

from .tools import load_tool

doc = load_tool("security_doc")


def test_the_committed_page_is_what_the_generator_writes():
    assert doc.OUTPUT.read_text() == doc.render(), f"docs/security.md is stale: run `{doc.REGENERATE}` and commit it"


def test_every_role_and_every_limit_is_on_the_page():
    page = doc.render()
    for role in ROLES:
        p = doc.role_permissions(role, Subjects())
        assert set(permissions(role, doc.TOKEN, Subjects()).publish) <= set(p.publish), role
        section = page.split(f"\n### {role}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        for subject in (*p.publish, *p.subscribe):
            assert f"`{doc.shown(subject)}`" in section, (role, subject)
        for note in p.notes:
            assert doc.shown(note) in page, (role, note)
