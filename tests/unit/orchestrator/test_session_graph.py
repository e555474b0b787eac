"""The graph the allocator sees is the one the driver places: precision override and head fusion included."""

import time
from pathlib import Path

from computeall.protocol.credentials import Credential
from computeall.orchestrator.allocator import PNodeCapacity, allocate
from computeall.orchestrator.service import Orchestrator
from computeall.orchestrator.session_graph import session_graph
from computeall.protocol.config import DataConfig, SessionConfig
from computeall.protocol.session_state import SessionState
from computeall.protocol.subjects import Subjects
from computeall.protocol.telemetry import Heartbeat

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "networks"


def session(network: str = "tiny-gpt.yaml", **overrides) -> SessionState:
    config = SessionConfig(network_yaml=(EXAMPLES / network).read_text(), data=DataConfig(files=["corpus.txt"]),
                           steps=10, batch_size=32, **overrides)
    return SessionState(id="s1", config=config, fuse_heads=config.fuse_heads)


def need_bytes(state: SessionState) -> int:
    graph, _ = session_graph(state)
    return allocate(graph, [PNodeCapacity("big", 1 << 40)], state.config.batch_size, state.config.micro_batch_size).stages[0].memory_bytes


def test_precision_override_reaches_every_vnode():
    graph, _ = session_graph(session(precision="bf16"))
    assert {v.precision for v in graph.spec.vnodes} == {"bf16"}
    graph, _ = session_graph(session())
    assert {v.precision for v in graph.spec.vnodes} == {"fp32"}  # the YAML's default


def test_the_sessions_wire_replaces_the_networks_default_but_not_a_vnodes_own():
    network = (EXAMPLES / "micro-gpt.yaml").read_text().replace(
        "{id: norm_f, op: rmsnorm, inputs: [b1.res2]}", "{id: norm_f, op: rmsnorm, inputs: [b1.res2], wire: bf16}")
    config = SessionConfig(network_yaml=network, data=DataConfig(files=["corpus.txt"]), steps=10, wire="int8")
    graph, _ = session_graph(SessionState(id="s1", config=config))
    assert graph.wire("embed") == "int8" and graph.wire("b0.attn") == "int8"
    assert graph.wire("norm_f") == "bf16"
    graph, _ = session_graph(session())
    assert {graph.wire(v) for v in graph.order} == {"fp32"}


def test_head_fusion_follows_the_sessions_setting():
    fused, lines = session_graph(session("tiny-gpt-heads.yaml"))
    apart, _ = session_graph(session("tiny-gpt-heads.yaml").model_copy(update={"fuse_heads": False}))
    assert {v.op for v in fused.spec.vnodes} >= {"fused_attention_heads"} and lines
    assert "attention_head" in {v.op for v in apart.spec.vnodes}
    assert "fused_attention_heads" not in {v.op for v in apart.spec.vnodes}


async def test_a_bf16_session_fits_where_only_bf16_fits():
    fp32, bf16 = session(), session(precision="bf16")
    assert need_bytes(bf16) < need_bytes(fp32)  # activations are half the size
    memory = (need_bytes(bf16) + need_bytes(fp32)) // 2
    orchestrator = Orchestrator(Credential(role="orchestrator", name="orchestrator"), Subjects("test"))
    orchestrator.registry.beat(Heartbeat(pnode="p0", host="h", os_pid=1, device="cpu", memory_bytes=memory, ts=time.time()))
    assert await orchestrator._fits(bf16), "sized at bf16, as the driver will place it"
    assert not await orchestrator._fits(fp32)
