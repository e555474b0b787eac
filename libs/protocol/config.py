"""Typed session configuration: what a user asks for when creating a session."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from .dataset_names import DatasetName
from .micro_tree import replica_problem
from .object_store import CheckpointObject
from .replica_sync import Replicas, ReplicaSync
from .sampling import SamplingConfig
from .uploads import UploadedFile
from .wire import Wire

Precision = Literal["fp32", "bf16", "fp16"]
MAX_SAMPLE_PROMPTS = 8
MAX_SAMPLE_TOKENS = 512  # per prompt: a SamplesGenerated event stays far below the log's 1 MiB


class LrSchedule(BaseModel):
    """Linear warmup to `peak`, then cosine decay to `min_lr` at the last step."""

    model_config = ConfigDict(extra="forbid")

    peak: float = Field(3e-3, gt=0)
    warmup_steps: int = Field(10, ge=0)
    min_lr: float = Field(3e-4, ge=0)

    def at(self, step: int, total_steps: int) -> float:
        if step < self.warmup_steps:
            return self.peak * (step + 1) / self.warmup_steps
        span = max(1, total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_lr + 0.5 * (self.peak - self.min_lr) * (1 + math.cos(math.pi * progress))


# what a parameter is, for weight decay: a matrix of a layer ("weights"), a layer's bias, a norm's
# scale or shift, or an embedding (the tied LM head's weight is its embedding's)
DecayGroup = Literal["weights", "bias", "norm", "embedding"]


# How a PNode keeps each parameter's optimizer state (`computeall.network.memory_model.STATE_BYTES`
# says what each costs): "fp32" moments and fp32 masters, updated over flat buffers; "int8" moments
# in 8-bit blocks and a bf16 weight's master as its low half, updated tensor by tensor (no flat copy);
# "int8-sr" the same moments and no master for a bf16 weight: the update rounds it stochastically
OptimizerState = Literal["fp32", "int8", "int8-sr"]


class OptimizerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: OptimizerState = Field(
        "fp32", description="Adam's state: fp32 moments and masters (16 bytes a bf16 parameter holds besides its "
        "weight and gradient, the update's flat gradient copy included), or int8: 8-bit blockwise moments and a bf16 "
        "weight's fp32 master kept as its low half (4 bytes), updated tensor by tensor, or int8-sr: the same moments and no "
        "master for a bf16 weight, which the update rounds stochastically (unbiased; 2 bytes)",
    )
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = Field(0.1, ge=0)
    no_decay: list[Literal["bias", "norm", "embedding"]] = Field(
        ["bias", "norm", "embedding"],
        description="parameter groups that get no weight decay (as nanoGPT and torchtitan); the rest decay",
    )


class LossScaleConfig(BaseModel):
    """Dynamic loss scaling, decided by the orchestrator for all PNodes of a session.

    `mode`: "auto" scales dynamically when any VNode computes in fp16 and keeps 1.0 otherwise
    (bf16 and fp32 have fp32's range); "dynamic" always; "off" keeps 1.0. In every mode a step
    whose gradients overflow anywhere is skipped on every PNode.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["auto", "dynamic", "off"] = "auto"
    initial: float = Field(2.0**16, gt=0)
    growth_factor: float = Field(2.0, ge=1)
    backoff_factor: float = Field(0.5, gt=0, lt=1)
    growth_interval: int = Field(2000, ge=1, description="clean steps in a row before the scale grows")
    min_scale: float = Field(1.0, gt=0)
    max_scale: float = Field(2.0**24, gt=0)


def _stage_count(value: object) -> object:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"give a number of stages (1 or more) or auto, not {value!r}")


# how many pipeline stages a replica is cut into: "auto" (those that shorten the allocator's estimated
# step) or a number (fewer when fewer PNodes are live)
Stages = Annotated[int | Literal["auto"], BeforeValidator(_stage_count)]


class PipelineConfig(BaseModel):
    """How the network is cut into stages, and how each PNode orders a step's work items (the PNode's
    `schedule.py`). Neither changes the bits: only where and when work runs, and what memory it holds."""

    model_config = ConfigDict(extra="forbid")

    stages: Stages = Field(
        "auto", description="stages per replica: auto takes those that shorten the estimated step (a PNode that "
        "would only add a bubble becomes a replica or a standby); N spreads the network over N PNodes",
    )

    schedule: Literal["1f1b", "gpipe"] = Field(
        "1f1b", description="1f1b: a backward as soon as one is ready, at most `in_flight` micro-batches held; "
        "gpipe: every forward, then every backward",
    )
    in_flight: int | None = Field(
        None, ge=1, description="1f1b: micro-batches a PNode holds at once (default: the allocator's, from the "
        "links' measured round trips, at least twice the pipeline's segments)"
    )


class DataConfig(BaseModel):
    """Where batches come from: a dataset by name, or files turned into one on the fly (`files` on the
    dataset service's machine, then `uploads`)."""

    model_config = ConfigDict(extra="forbid")

    dataset: DatasetName | None = Field(None, description="yours, or one its owner made public")
    files: list[str] = Field(default_factory=list, description="paths the dataset service reads, inside its data roots")
    uploads: list[UploadedFile] = Field(default_factory=list, description="files the client put in the uploads bucket")
    split: str = "train"
    validation_split: str = "val"
    start_step: int = Field(
        0, ge=0, description="step k trains on the batch of step start_step + k: go on with the data where another "
                             "session (same data, seed and batch size) stopped instead of repeating it",
    )

    @model_validator(mode="after")
    def _one_source(self) -> "DataConfig":
        if not self.dataset and not self.files and not self.uploads:
            raise ValueError("name a dataset or give data files")
        return self


class VerifyConfig(BaseModel):
    """Spot checks: another PNode recomputes a random share of (step, micro-batch, VNode) items and the
    digests are compared (docs/decisions.md, "Spot checks by exact recomputation")."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(0.0, ge=0, le=1, description="share of (step, micro-batch, VNode) items recomputed; 0 = off")
    backward_share: float = Field(0.5, ge=0, le=1, description="share of checked items whose backward is recomputed too")

    @property
    def on(self) -> bool:
        return self.rate > 0


class ReplayOf(BaseModel):
    """Re-execute another session's steps from its checkpoint, to check they reproduce its losses."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    from_step: int = Field(..., ge=0)
    to_step: int = Field(..., ge=1, description="exclusive")


class UploadedWeights(BaseModel):
    """Weights a client converted (from a Hugging Face directory) and put in the Object Store, one object per VNode."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(..., max_length=500, description="what they were made from, for people to read")
    bucket: str
    objects: list[CheckpointObject] = Field(..., min_length=1)
    tokenizer_digest: str = Field(..., description="digest of the tokenizer file the weights were trained with")


class InitFrom(BaseModel):
    """A new session's first weights: another session's kept checkpoint, or uploaded weights.

    Only the weights: the optimizer starts fresh, like any new session (`session resume` is how a
    session goes on with its own optimizer state).
    """

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    step: int | None = Field(None, ge=0, description="the checkpoint after this many steps (the CLI pins the newest)")
    uploaded: UploadedWeights | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "InitFrom":
        if (self.session_id is None) == (self.uploaded is None):
            raise ValueError("init_from names a session (session_id and step) or uploaded weights, not both or neither")
        if self.session_id is not None and self.step is None:
            raise ValueError(f"init_from session {self.session_id}: name the checkpoint's step")
        return self

    def describe(self) -> str:
        if self.uploaded:
            return self.uploaded.source
        return f"session {self.session_id} at step {self.step}"


class SessionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    network_yaml: str = Field(..., description="the network YAML text, inline")
    data: DataConfig
    steps: int = Field(..., ge=1)
    batch_size: int = Field(8, ge=1, description="sequences per step, over all micro-batches")
    micro_batches: int = Field(1, ge=1)
    seed: int = 0
    lr: LrSchedule = Field(default_factory=LrSchedule)
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    precision: Precision | None = Field(None, description="overrides the network's default precision")
    wire: Wire | None = Field(
        None, description="replaces the network's default wire format (VNodes that name their own keep it)"
    )
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    fuse_heads: bool = Field(
        True, description="rewrite per-head attention VNodes into one fused VNode per block before allocation"
    )
    loss_scale: LossScaleConfig = Field(default_factory=LossScaleConfig)
    grad_clip: float = Field(
        1.0, ge=0, allow_inf_nan=False,
        description="clip the global gradient norm (over every PNode) to this before the update; 0 = no clipping",
    )
    update_ratio_every: int = Field(
        10, ge=0, description="measure the update-to-weight ratio of every VNode group every this many steps; 0 = never"
    )
    checkpoint_every: int = Field(0, ge=0, description="0 = only on pause, stop and completion")
    keep_checkpoints: int = Field(3, ge=1, description="older checkpoints are pruned")
    validate_every: int = Field(0, ge=0)
    validation_batches: int = Field(4, ge=1, description="micro-batches of the validation split per validation")
    min_pnodes: int = Field(1, ge=1, description="wait for this many live PNodes before allocating")
    rebalance: Literal["on-join", "on-failure"] = Field(
        "on-join", description="use PNodes that join at the next checkpoint boundary, or only after a failure"
    )
    slow_after_s: float = Field(60.0, gt=0, description="report a PNode still working on a request after this long")
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    replay_of: ReplayOf | None = None
    replicas: Replicas = Field(
        1, description="data-parallel replicas of the pipeline: a power of two dividing micro_batches, or auto "
                       "(as many as the live PNodes hold)"
    )
    sync: ReplicaSync = Field(default_factory=ReplicaSync)
    init_from: InitFrom | None = Field(None, description="start from these weights instead of the seeded init")
    sample_every: int = Field(0, ge=0, description="record text samples every this many steps (and at the end); 0 = never")
    sample_prompts: list[Annotated[str, Field(max_length=1000)]] = Field(
        default_factory=lambda: [""], min_length=1, max_length=MAX_SAMPLE_PROMPTS,
        description="what the samples continue; \"\" starts a new document",
    )
    sampling: SamplingConfig = Field(default_factory=lambda: SamplingConfig(max_new_tokens=48, temperature=0.8, top_k=50))

    @model_validator(mode="after")
    def _micro_divides_batch(self) -> "SessionConfig":
        if self.batch_size % self.micro_batches:
            raise ValueError(
                f"batch_size {self.batch_size} is not a multiple of micro_batches {self.micro_batches}"
            )
        return self

    @model_validator(mode="after")
    def _replicas_share_micro_batches(self) -> "SessionConfig":
        if self.replicas != "auto" and (problem := replica_problem(self.micro_batches, self.replicas)):
            raise ValueError(problem)
        if self.verify.on and (self.replicas != 1 or self.sync.mode == "diloco"):
            # a check names the PNode that computed an item from one assignment; replicas split items over several
            raise ValueError("spot checks (verify.rate) do not cover data-parallel replicas yet: "
                             "use replicas: 1 with verify, or verify.rate: 0 with replicas")
        return self

    @model_validator(mode="after")
    def _diloco_keeps_fp32_state(self) -> "SessionConfig":
        if self.optimizer.state != "fp32" and self.sync.mode == "diloco":
            raise ValueError(f"optimizer.state {self.optimizer.state} keeps no fp32 master to anchor diloco's outer "
                             "steps: use optimizer.state fp32 with sync diloco, or sync gradients")
        return self

    @model_validator(mode="after")
    def _samples_stay_small(self) -> "SessionConfig":
        if self.sampling.max_new_tokens > MAX_SAMPLE_TOKENS:
            raise ValueError(f"sampling.max_new_tokens is {self.sampling.max_new_tokens}; samples are at most {MAX_SAMPLE_TOKENS} tokens")
        return self

    @property
    def micro_batch_size(self) -> int:
        return self.batch_size // self.micro_batches
