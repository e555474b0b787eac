"""Tokens come from a file, stdin or the environment, never from argv (`protocol/secret_args.py`): the old
`--join TOKEN` form is refused with how to pass it (and without echoing it), every other way reads the
token, at most `SECRET_INPUT_BYTES` of it, and the processes `up` starts inherit none of the variables."""

from __future__ import annotations

import argparse
import io

import pytest

from computeall.protocol.limits import SECRET_INPUT_BYTES
from computeall.protocol.secret_args import JOIN, LEAF, SecretArgError, without_secrets

TOKEN = "ca-invite-1.eyJzZWNyZXQiOiAidmVyeSJ9"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="computeall pnode")
    JOIN.add_to(p.add_mutually_exclusive_group(), "join with an invite")
    return p


def test_a_token_on_the_command_line_is_refused_with_how_to_pass_it(capsys):
    with pytest.raises(SystemExit) as refused:
        parser().parse_args(["--join", TOKEN])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "never on the command line" in err and "--join-file PATH, --join - (stdin) or $COMPUTEALL_JOIN_TOKEN" in err
    assert TOKEN not in err, "the refusal does not repeat the secret"


def test_a_file_stdin_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(JOIN.env, raising=False)
    path = tmp_path / "invite.token"
    path.write_text(TOKEN + "\n")
    assert JOIN.read(parser().parse_args(["--join-file", str(path)]).join) == TOKEN
    assert JOIN.read(parser().parse_args(["--join", "-"]).join, stdin=io.StringIO(f"  {TOKEN}\n")) == TOKEN
    assert JOIN.read(parser().parse_args(["--join-file", "-"]).join, stdin=io.StringIO(TOKEN)) == TOKEN
    assert JOIN.read(None) is None and not JOIN.given(None), "no token: not joining"
    monkeypatch.setenv(JOIN.env, TOKEN)
    assert JOIN.given(None) and JOIN.read(None) == TOKEN
    assert JOIN.read(str(path)) == TOKEN, "a flag wins over the environment"


def test_what_holds_no_token_says_where_it_looked(tmp_path, monkeypatch):
    with pytest.raises(SecretArgError, match=r"cannot read the invite token of `computeall invite pnode` from .*nowhere"):
        JOIN.read(str(tmp_path / "nowhere"))
    with pytest.raises(SecretArgError, match=r"^stdin holds no invite token"):
        JOIN.read("-", stdin=io.StringIO("\n"))
    monkeypatch.setenv(LEAF.env, " ")
    with pytest.raises(SecretArgError, match=r"^\$COMPUTEALL_LEAF_TOKEN holds no invite token of `computeall invite leaf`"):
        LEAF.read(None)


def test_at_most_the_limit_is_read(tmp_path):
    huge = tmp_path / "huge"
    huge.write_text("x" * (SECRET_INPUT_BYTES + 10))
    with pytest.raises(SecretArgError, match=r"is over 1,048,576 bytes: it holds no invite token"):
        JOIN.read(str(huge))

    class Endless(io.StringIO):
        def read(self, n: int = -1) -> str:
            assert n == SECRET_INPUT_BYTES + 1, "a bounded read"
            return "x" * n

    with pytest.raises(SecretArgError, match="^stdin is over"):
        JOIN.read("-", stdin=Endless())


def test_children_inherit_no_token():
    environ = {"PATH": "/bin", JOIN.env: TOKEN, LEAF.env: TOKEN, "COMPUTEALL_DATA_DIR": "/d"}
    assert without_secrets(environ) == {"PATH": "/bin", "COMPUTEALL_DATA_DIR": "/d"}
