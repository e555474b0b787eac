"""`free_port` never hands out one port twice in a process: a cluster draws every server's ports
before the first binds, so a port drawn twice went to whichever server bound it first."""

from computeall.cli import nats_server


class Repeating:
    """A draw that comes up with the same port again before a new one."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports

    def randrange(self, low: int, high: int) -> int:
        return self.ports.pop(0)


def test_a_port_drawn_before_is_drawn_again_never(monkeypatch):
    low = max(1024, nats_server._ephemeral_range()[0] - 20000)
    first = next(p for p in range(low, low + 1000) if nats_server.port_free(p) and nats_server.port_free(p + 1))
    monkeypatch.setattr(nats_server, "_DRAWN", set())
    monkeypatch.setattr(nats_server, "_PORTS", Repeating([first, first, first + 1]))
    assert [nats_server.free_port(), nats_server.free_port()] == [first, first + 1]
