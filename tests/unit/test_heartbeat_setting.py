"""One heartbeat timeout: the orchestrator declares a PNode lost when the monitor shows it lost."""

from computeall.protocol.credentials import Credential
from computeall.monitor.settings import MonitorSettings, parse_args
from computeall.orchestrator.service import Orchestrator
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S


def test_orchestrator_and_monitor_default_to_the_protocol_timeout():
    assert Orchestrator(Credential(role="orchestrator", name="orchestrator", servers=["nats://127.0.0.1:1"]), Subjects("ca")).heartbeat_timeout_s == HEARTBEAT_TIMEOUT_S
    assert MonitorSettings.model_fields["heartbeat_timeout_s"].default == HEARTBEAT_TIMEOUT_S
    assert parse_args(["--nats", "nats://127.0.0.1:1", "--data-dir", "d"]).heartbeat_timeout_s == HEARTBEAT_TIMEOUT_S


def test_the_flag_still_overrides_it():
    assert parse_args(["--nats", "n", "--data-dir", "d", "--heartbeat-timeout", "12"]).heartbeat_timeout_s == 12.0


def test_several_heartbeats_fit_in_the_timeout():
    # one lost heartbeat message must not make a live PNode look dead
    assert HEARTBEAT_TIMEOUT_S >= 3 * HEARTBEAT_INTERVAL_S
