"""Network work kept off the event loop: checking a network, resolving a session's, allocating it.

The module-level functions run in a child process (`offloop.OffLoop` preloads this module); they
take and return plain data. `NetworkJobs` is the event loop's side: it sends them their inputs
and turns their answers back into the exceptions its callers handle. Every network reaching them
was checked against `computeall.protocol.limits` first, so a job's time is bounded; the time
limits here catch what the size limits cannot foresee (and #16's large allocations).
"""

from __future__ import annotations

from computeall.network import Graph, NetworkError, NetworkSpec, load_network
from computeall.protocol.config import OptimizerState, Stages
from computeall.protocol.replica_sync import Replicas
from computeall.protocol.session_state import SessionState

from .allocator import AllocationError, PNodeCapacity
from .errors import SessionError
from .offloop import JobError, OffLoop
from .replication import ReplicatedAllocation, allocate_replicas
from .session_graph import session_graph

CHECK_TIMEOUT_S = 10.0  # a network at every limit checks in well under a second
ALLOCATE_TIMEOUT_S = 300.0  # a runaway guard: a placement that takes longer fails the session with the reason


# -- in the child process -----------------------------------------------------------------
def _problems(network_yaml: str) -> list[str]:
    try:
        load_network(network_yaml)
    except NetworkError as exc:
        return exc.problems
    return []


def _resolve(state: SessionState) -> tuple[str | None, list[str]]:
    """(the resolved spec as JSON, head fusion's log lines), or (None, the network's problems)."""
    try:
        graph, lines = session_graph(state)
    except NetworkError as exc:
        return None, exc.problems
    return graph.spec.model_dump_json(), lines


def _allocate(spec_json: str, capacities: list[PNodeCapacity], replicas: Replicas, batch_size: int,
              micro_batches: int, stages: Stages, state: OptimizerState) -> ReplicatedAllocation | str:
    graph = Graph(NetworkSpec.model_validate_json(spec_json))
    try:
        return allocate_replicas(graph, capacities, replicas, batch_size, micro_batches, stages, state)
    except AllocationError as exc:
        return str(exc)


def _fits(state: SessionState, capacities: list[PNodeCapacity]) -> bool:
    try:
        graph, _ = session_graph(state)
        config = state.config
        allocate_replicas(graph, capacities, config.replicas, config.batch_size, config.micro_batches,
                          config.pipeline.stages, config.optimizer.state)
    except (AllocationError, NetworkError):
        return False
    return True


# -- on the event loop ----------------------------------------------------------------------
class NetworkJobs:
    def __init__(self, offloop: OffLoop | None = None, check_timeout_s: float = CHECK_TIMEOUT_S,
                 allocate_timeout_s: float = ALLOCATE_TIMEOUT_S) -> None:
        self.offloop = offloop or OffLoop()
        self.check_timeout_s = check_timeout_s
        self.allocate_timeout_s = allocate_timeout_s

    async def check(self, network_yaml: str) -> None:
        """Raises `NetworkError` with every problem of the network (a check that fails counts as one)."""
        try:
            problems = await self.offloop.run(_problems, (network_yaml,), self.check_timeout_s)
        except JobError as exc:
            raise NetworkError([f"checking the network failed: {exc}"]) from None
        if problems:
            raise NetworkError(problems)

    async def session_graph(self, state: SessionState) -> tuple[Graph, list[str]]:
        """The session's graph as it will be placed, and head fusion's log lines; raises `SessionError`."""
        try:
            resolved = await self.offloop.run(_resolve, (state,), self.check_timeout_s)
        except JobError as exc:
            raise SessionError(f"resolving the network failed: {exc}") from None
        spec_json, lines = resolved
        if spec_json is None:
            raise SessionError(str(NetworkError(lines)))
        return Graph(NetworkSpec.model_validate_json(spec_json)), lines

    async def allocate(self, graph: Graph, capacities: list[PNodeCapacity], replicas: Replicas, batch_size: int,
                       micro_batches: int, stages: Stages = "auto", state: OptimizerState = "fp32") -> ReplicatedAllocation:
        """One pipeline per replica (`replication.allocate_replicas`); `AllocationError` when the PNodes cannot
        hold them, `SessionError` when allocating failed or overran its time."""
        args = (graph.spec.model_dump_json(), capacities, replicas, batch_size, micro_batches, stages, state)
        try:
            result = await self.offloop.run(_allocate, args, self.allocate_timeout_s)
        except JobError as exc:
            raise SessionError(
                f"allocating {len(graph.vnodes)} VNodes over {len(capacities)} PNodes failed: {exc}"
            ) from None
        if isinstance(result, str):
            raise AllocationError(result)
        return result

    async def fits(self, state: SessionState, capacities: list[PNodeCapacity]) -> bool:
        """Whether these PNodes can hold the session's network now (False when finding out fails)."""
        try:
            return await self.offloop.run(_fits, (state, capacities), self.allocate_timeout_s)
        except JobError:
            return False
