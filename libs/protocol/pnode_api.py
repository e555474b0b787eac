"""Orchestrator -> PNode requests on `ca.pn.<pid>.ctl` and their replies.

These are not recorded: they drive a step. What happened is recorded by the
orchestrator as events once the replies are in.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .config import OptimizerConfig, PipelineConfig
from .dataset_names import DatasetName
from .micro_tree import Exchange, exchanges, replica_block
from .object_store import CheckpointObject
from .replica_sync import ReplicaSync
from .sampling import SamplingConfig
from .verification import CheckItem, CheckReport, ItemDigests, KeepMaterial


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchSource(BaseModel):
    """Everything a PNode needs to ask the dataset service for a batch (the session's `batch_grants` let it)."""

    dataset: DatasetName
    split: str
    seed: int
    micro_batch_size: int
    context: int
    validation_split: str = "val"
    validation_batches: int = Field(4, ge=1)  # micro-batches of a validation (`RunValidation.batches`, at most)
    start_step: int = 0  # training step k reads the batch of step start_step + k (validation is not shifted)


class ReplicaPlan(BaseModel):
    """Data-parallel replicas: the PNode serves replica `index`; where every replica's VNodes live."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(..., ge=0)
    assignments: list[dict[str, str]]  # one vnode -> pnode map per replica, in replica order
    sync: ReplicaSync = Field(default_factory=ReplicaSync)

    @property
    def count(self) -> int:
        return len(self.assignments)


class LoadPlan(_Request):
    """The stage plan: the whole network and where every VNode lives.

    Each PNode derives its own VNodes, where their inputs come from and where their
    outputs go from `assignment` (its replica's, when there are several), so every PNode
    of a replica reads the same routes.
    """

    type: Literal["LoadPlan"] = "LoadPlan"
    session_id: str
    network: dict  # a validated NetworkSpec, as JSON
    assignment: dict[str, str]  # vnode id -> pnode id
    seed: int
    batches: BatchSource
    micro_batches: int
    optimizer: OptimizerConfig
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    verify: bool = False  # commit to a ledger of each step's results (spot checks are on)
    replicas: ReplicaPlan | None = None  # None: the one and only replica

    @model_validator(mode="after")
    def _assignment_is_its_replicas(self) -> "LoadPlan":
        if self.replicas and self.replicas.assignments[self.replicas.index] != self.assignment:
            raise ValueError(f"assignment is not replica {self.replicas.index}'s")
        return self

    @property
    def block(self) -> range:
        """The micro-batches of each step this PNode's replica runs."""
        if self.replicas is None:
            return range(self.micro_batches)
        return replica_block(self.micro_batches, self.replicas.count, self.replicas.index)

    @property
    def exchanges(self) -> list[Exchange]:
        """This replica's levels of the butterfly that sums gradients over the replicas (none alone)."""
        if self.replicas is None:
            return []
        return exchanges(self.micro_batches, self.replicas.count, self.replicas.index)


class WaitsForPeers(_Request):
    """A request whose answer waits for what other PNodes send."""

    give_up_s: float | None = Field(
        None, gt=0, description="stop waiting for inputs this long after the request came and answer `starved` "
                                "(or at the PNode's own --step-deadline, when that is sooner)")


class PassRequest(WaitsForPeers):
    """A pass over micro-batches: it waits for inputs from other PNodes and the dataset service."""


class RunStep(PassRequest):
    """Forward and backward of every micro-batch of `step`; reply once the local backward is done."""

    type: Literal["RunStep"] = "RunStep"
    session_id: str
    step: int
    loss_scale: float = 1.0
    after_apply: int | None = Field(
        None, ge=0, description="sent right behind the ApplyStep of this step (one round trip a step): the pass "
                                "starts once this PNode answered it, however long that takes, and gives way when "
                                "that update failed or a newer request of the session supersedes the pass")


class ApplyStep(WaitsForPeers):
    """Run the optimizer on the accumulated gradients of `step`, or drop them (`skip`); with diloco, land
    the outer step due after it, which waits for the other replicas' sync.

    `clip_factor` multiplies every gradient first (global norm clipping, decided from every PNode's
    `grad_sq_norms`); `measure_update`: reply with the update's and the weights' squared norms.
    With `replica_max_norm` (diloco's `inner_decisions: own`) the PNode decides the skip and the clip
    itself, from its replica's norms, and the request may come before the step's pass has ended: it
    is carried out once the pass request that came right before it has been answered.
    """

    type: Literal["ApplyStep"] = "ApplyStep"
    session_id: str
    step: int
    lr: float
    skip: bool = False
    clip_factor: float = Field(1.0, gt=0, le=1)
    replica_max_norm: float | None = Field(
        None, ge=0, description="decide skip and clip here, from this replica's gradient norms, with this max norm "
                                "(0: never clip); `skip` and `clip_factor` are then not read")
    measure_update: bool = False
    keep: list[KeepMaterial] = Field(default_factory=list)  # items picked for a check: keep what recomputing them needs
    release: list[str] = Field(default_factory=list)  # check ids settled: their material can go


class Unload(_Request):
    type: Literal["Unload"] = "Unload"
    session_id: str


class RunValidation(PassRequest):
    """Forward only, on `batches` micro-batches of the validation split; no parameter update."""

    type: Literal["RunValidation"] = "RunValidation"
    session_id: str
    step: int
    batches: int = Field(4, ge=1)


class SaveCheckpoint(WaitsForPeers):
    """Write the state of every hosted VNode to the Object Store; reply with the objects. With diloco, an
    outer sync in flight arrives first, so that its step is saved whole."""

    type: Literal["SaveCheckpoint"] = "SaveCheckpoint"
    session_id: str
    step: int
    bucket: str


class LoadCheckpoint(_Request):
    """Load the hosted VNodes' state from a committed checkpoint (digests verified)."""

    type: Literal["LoadCheckpoint"] = "LoadCheckpoint"
    session_id: str
    step: int
    bucket: str
    objects: list[CheckpointObject]
    weights_only: bool = False  # a new session's first weights: the optimizer state stays fresh


class GenerateSamples(_Request):
    """Continue each prompt (token ids) from a committed checkpoint, beside the PNode's training work."""

    type: Literal["GenerateSamples"] = "GenerateSamples"
    session_id: str
    step: int
    network_yaml: str
    bucket: str
    objects: list[CheckpointObject]
    prompts: list[list[int]] = Field(..., min_length=1)
    sampling: SamplingConfig


class SendCheckMaterial(_Request):
    """To a host: send the material kept for `check_id` (parameters, inputs, gradients) to the checker `to`."""

    type: Literal["SendCheckMaterial"] = "SendCheckMaterial"
    session_id: str
    check_id: str
    to: str


class Recompute(_Request):
    """To a checker: recompute `item` from the material its host sends; reply with a `CheckReport`."""

    type: Literal["Recompute"] = "Recompute"
    session_id: str
    item: CheckItem
    loss_scale: float = 1.0
    threads: int | None = None  # the host's torch threads: the same count gives the same bits

    @property
    def step(self) -> int:
        return self.item.step


class Reset(_Request):
    """Drop every session: this PNode was declared lost, its state is stale; it joins again as new."""

    type: Literal["Reset"] = "Reset"
    session_id: str = "*"


PNodeRequest = Annotated[
    Union[LoadPlan, RunStep, ApplyStep, Unload, RunValidation, SaveCheckpoint, LoadCheckpoint, GenerateSamples,
          SendCheckMaterial, Recompute, Reset],
    Field(discriminator="type"),
]


class PNodeReply(BaseModel):
    """One reply shape for every request: `ok` or an `error` that says why."""

    ok: bool
    error: str | None = None
    pnode: str
    # it holds no plan for the session: it restarted (or was reset) since the plan was loaded, and
    # what it held is gone; the orchestrator treats it as a lost PNode, not a broken session
    state_lost: bool = False
    # a pass gave up waiting for inputs that never came (`error` says which): its step runs again,
    # the PNode is not at fault (one that does not answer at all is)
    starved: bool = False
    step: int | None = None
    loss_sum: float | None = None  # summed over the tokens of the loss VNodes this PNode hosts
    micro_losses: dict[int, float] = Field(default_factory=dict)  # loss_sum by micro-batch: summed in order
    reduce_bytes: int = 0  # bytes this PNode sent to other replicas (gradient or pseudo-gradient sums)
    tokens: int = 0
    grads_finite: bool = True
    # per hosted VNode with parameters: its gradients' squared L2 norm, unscaled (RunStep, when finite)
    grad_sq_norms: dict[str, float] | None = None
    # per hosted VNode with parameters: the update's and the weights' squared norms (ApplyStep, measured)
    update_sq_norms: dict[str, float] | None = None
    weight_sq_norms: dict[str, float] | None = None
    compute_s: float = 0.0  # running work items on the compute thread
    wait_s: float = 0.0  # waiting for inputs from other PNodes or the dataset (the bubble)
    send_s: float = 0.0  # the outbox sending, overlapped with compute
    sent_bytes: dict[str, int] = Field(default_factory=dict)  # tensor frames sent this pass, by destination PNode
    checkpoint: list[CheckpointObject] | None = None
    ledger: list[ItemDigests] | None = None  # RunStep in a verified session: what this PNode committed to
    check: CheckReport | None = None  # Recompute
    samples: list[list[int]] | None = None  # GenerateSamples: the new token ids of each prompt

    @classmethod
    def no_plan(cls, pnode: str, session_id: str) -> "PNodeReply":
        """The reply of a PNode asked about a session it holds no plan for."""
        return cls(ok=False, pnode=pnode, state_lost=True, error=f"no plan loaded for session {session_id}")
