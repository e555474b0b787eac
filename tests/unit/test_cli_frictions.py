"""What a newcomer meets on the command line: tables with headers, rounded losses, runs named for what
they are, -v anywhere, YAML errors that name the file, and a refused API key said as such."""

import asyncio
import os
import shutil

import pytest

from computeall.cli.follow import progress_bar
from computeall.cli.main import build_parser
from computeall.cli.session_view import session_table
from computeall.network import NetworkError, load_network_file
from computeall.protocol.credentials import Credential, new_api_key


def row(sid="a1b2c3", status="running", step=12, steps=200, loss=5.139998912811279, verifies=None):
    return {"session_id": sid, "status": status, "owner": "local", "step": step, "steps": steps,
            "last_loss": loss, "verifies": verifies, "reason": None}


def test_session_list_has_a_header_and_rounded_losses():
    lines = session_table([row(), row(sid="d4e5f6", status="completed", step=200, loss=None)]).splitlines()
    assert lines[0].split() == ["SESSION", "STATUS", "STEP", "LOSS", "OWNER", "KIND"]
    assert lines[1].split() == ["a1b2c3", "running", "12/200", "5.1400", "local", "training"]
    assert lines[2].split() == ["d4e5f6", "completed", "200/200", "-", "local", "training"]


def test_a_waiting_session_says_why():
    waiting = {**row(status="queued", step=0), "reason": "local has 2 sessions running (limit 2)"}
    assert session_table([waiting]).splitlines()[1].endswith("(local has 2 sessions running (limit 2))")


def test_an_empty_session_list_says_how_to_make_a_session():
    assert "computeall session create" in session_table([])


def test_a_verification_run_is_named_as_one():
    line = session_table([row(sid="v1", status="failed", step=10, steps=15, verifies="a1b2c3")]).splitlines()[1]
    assert line.endswith("verify of a1b2c3") and "10/15" in line


@pytest.mark.parametrize("argv", [["-v", "session", "list"], ["session", "list", "-v"], ["session", "show", "x", "--verbose"]])
def test_verbose_goes_before_or_after_the_subcommand(argv):
    assert build_parser().parse_args(argv).verbose is True


def test_not_verbose_unless_asked():
    assert build_parser().parse_args(["session", "list"]).verbose is False


def test_a_yaml_syntax_error_names_the_file_and_line(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: x\nvnodes: [\n  - {id: a\n")
    with pytest.raises(NetworkError) as caught:
        load_network_file(path)
    message = str(caught.value)
    assert f"{path}, line 3" in message and "<unicode string>" not in message


def test_a_refused_api_key_is_said_as_such(nats_server, caplog):
    from computeall.cli.client import connect
    from computeall.cli.errors import UserError

    wrong = Credential.for_api_key(new_api_key("mallory"), [nats_server.url])

    async def attempt():
        async with connect(wrong):
            pass

    with pytest.raises(UserError) as caught:
        asyncio.run(attempt())
    message = str(caught.value)
    assert "knows no such API key" in message and "is `computeall up` running" not in message
    assert not [r for r in caplog.records if "Authorization Violation" in r.getMessage()], "no raw nats error logged"


def test_an_unreachable_bus_asks_whether_up_runs():
    from computeall.cli.client import connect
    from computeall.cli.errors import UserError

    async def attempt():
        async with connect(Credential(role="user", name="local", servers=["nats://127.0.0.1:9"])):
            pass

    with pytest.raises(UserError, match="is `computeall up` running"):
        asyncio.run(attempt())


def test_the_progress_bar_leaves_the_terminals_last_column_free(monkeypatch):
    """A bar as wide as the terminal wraps there, and every redraw left a copy: the final bar printed
    three times (the step, then once after each sample written above it)."""
    monkeypatch.setattr(shutil, "get_terminal_size", lambda fallback=(80, 24): os.terminal_size((97, 30)))
    bar = progress_bar(200, "session s", enabled=True)
    try:
        bar.n = 200
        bar.set_postfix(loss="5.1400", refresh=False)
        assert bar.ncols == 96 and len(bar.__str__()) <= 96
    finally:
        bar.close()
