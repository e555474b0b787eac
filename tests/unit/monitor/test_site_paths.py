"""What the monitor answers outside /graphql: the dashboard's files, and a 404 page (never a
traceback) for a path it does not have, built dashboard or not."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from computeall.monitor.server import MonitorApp

UNKNOWN = ["/favicon.ico", "/api/nonexistent", "/sessions/abc", "/assets/gone.js"]


def client(web_dir) -> TestClient:
    # raise_server_exceptions: an exception that escapes the app (what uvicorn answered 500 to) fails the test
    services = SimpleNamespace(auth=SimpleNamespace(login=lambda key, client: None))
    return TestClient(MonitorApp(services, web_dir), raise_server_exceptions=True)


@pytest.fixture
def built(tmp_path):
    (tmp_path / "assets").mkdir()
    (tmp_path / "index.html").write_text("<!doctype html><title>computeall</title>")
    (tmp_path / "assets" / "app.js").write_text("console.log(1)")
    (tmp_path / "favicon.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'/>")
    return tmp_path


def test_a_built_dashboard_serves_its_files_and_404s_the_rest(built):
    c = client(built)
    assert c.get("/").status_code == 200 and "computeall" in c.get("/").text
    assert c.get("/assets/app.js").text == "console.log(1)"
    assert c.get("/favicon.svg").status_code == 200
    for path in UNKNOWN:
        response = c.get(path)
        assert response.status_code == 404, path
        assert "Not found" in response.text and path in response.text


def test_an_unbuilt_dashboard_says_how_to_build_it_and_404s_the_rest(tmp_path):
    c = client(tmp_path / "absent")
    assert "not built" in c.get("/").text
    for path in UNKNOWN:
        assert c.get(path).status_code == 404, path


def test_a_path_from_a_message_is_escaped_in_the_page(built):
    response = client(built).get("/<script>alert(1)</script>")
    assert response.status_code == 404 and "<script>" not in response.text


def test_a_websocket_anywhere_but_graphql_is_refused(built):
    with pytest.raises(WebSocketDisconnect):
        with client(built).websocket_connect("/ws"):
            pass


def test_graphql_without_a_key_is_still_401(built):
    assert client(built).post("/graphql", json={"query": "{ me { name } }"}).status_code == 401
