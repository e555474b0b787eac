"""Writes docs/protocol.md from the protocol's pydantic models and its subject builders.

    python tools/protocol_doc.py            # rewrite docs/protocol.md
    python tools/protocol_doc.py --check    # exit 1 when the committed page is stale

The prose lives in tools/protocol_doc_template.md; every `{{name}}` line there is replaced by
one generated block from `blocks` below. Each model becomes a section (tools/model_doc.py) with
its docstring, a field table and one example validated by the model itself, its required values
taken from EXAMPLES. Order is the order of the unions and lists here: the same code always
writes the same bytes.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from generated_file import write_or_check
from model_doc import Page, link, members, model_section

from computeall.protocol import (
    dataset_api, limits, membership_api, monitor_api, pnode_api, session_reads, telemetry, throughput, uploads, wire,
)
from computeall.protocol.commands import Command, PauseSession
from computeall.protocol.envelope import Envelope
from computeall.protocol.events import DatasetEvent, PNodeEvent, SessionEvent
from computeall.protocol.responder import Api
from computeall.protocol.subjects import LOG_STREAM, TEL_STREAM, Subjects

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = Path(__file__).with_name("protocol_doc_template.md")
OUTPUT = REPO / "docs" / "protocol.md"
REGENERATE = "python tools/protocol_doc.py"


# -- subjects -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubjectRow:
    builder: str | Callable[..., str]  # a Subjects method, or a function taking (subjects, ...)
    kind: str
    what: str
    messages: tuple[type[BaseModel], ...] = ()
    args: tuple[str, ...] = ()  # leading arguments given as is; the rest become <placeholders>


# The request/reply APIs, each one table (`responder.Api`) that its server binds its handlers to
APIS: tuple[Api, ...] = (dataset_api.API, session_reads.API, monitor_api.API, membership_api.API)


SUBJECTS = [
    SubjectRow("session_cmd", "command", "session commands; header `Nats-Msg-Id` = command id (duplicates dropped)",
               tuple(members(Command))),
    SubjectRow("session_evt", "event", "what happened to a session", tuple(members(SessionEvent))),
    SubjectRow("pnode_evt", "event", "PNodes joining, leaving, lost, quarantined", tuple(members(PNodeEvent))),
    SubjectRow("dataset_evt", "event", "a dataset being made; `DatasetCreated` comes last", tuple(members(DatasetEvent))),
    SubjectRow("tel", "telemetry", "`<kind>` is `memory`, `request` or `step`", tuple(members(telemetry.Telemetry))),
    SubjectRow("heartbeat", "heartbeat", "PNode liveness and capacity, every second", (telemetry.Heartbeat,)),
    SubjectRow("orchestrator_heartbeat", "heartbeat", "orchestrator liveness, every second (empty body)"),
    SubjectRow("pnode_ctl", "request/reply", "orchestrator → PNode requests; every reply is a `PNodeReply`",
               (*members(pnode_api.PNodeRequest), pnode_api.PNodeReply)),
    SubjectRow("pnode_tensor", "data", "tensor frames from PNode `<src>` to PNode `<dst>`: activations, gradients, "
               "replica sums, spot checks' material; only `<src>` may publish here", (wire.TensorHeader,)),
    SubjectRow("pnode_probe", "data", "a PNode's own loop through the bus: zero bytes it publishes and reads back "
               "to time its link (`Throughput`, in `PNodeJoined` and heartbeats)", (throughput.Throughput,)),
    SubjectRow(dataset_api.progress_subject, "event", "progress of a user's `create`, for progress bars (to that user only)",
               (dataset_api.DatasetProgress,)),
]

# Wildcards a consumer subscribes with, and stream configuration: documented, not published to.
FILTERS = {
    "session_evt_all": "all events of one session (read a session with an ordered consumer on this)",
    "session_created_all": "every session's creation (how an orchestrator finds sessions)",
    "pnode_evt_of_type": "one event type of every PNode (e.g. `PNodeQuarantined`: how every orchestrator leaves one out)",
    "heartbeat_all": "every PNode's heartbeat",
    "pnode_tensor_all": "every sender's tensors to one PNode (what a PNode subscribes to)",
    "tel_all": "one kind of telemetry from every PNode (`step`: each PNode's part of each step)",
    "orchestrator_heartbeat_all": "every orchestrator's heartbeat",
    "log_subjects": f"the subjects of stream `{LOG_STREAM}`",
    "tel_subjects": f"the subjects of stream `{TEL_STREAM}`",
}


def _placeholder(name: str) -> str:
    return f"__{name.strip('_')}__"  # a valid subject token, shown as <name>


def _shown(subject: str) -> str:
    return re.sub(r"__([a-z]+)__", r"<\1>", subject)


def _build(subjects: Subjects, builder: str | Callable[..., str], args: tuple[str, ...]) -> str | list[str]:
    function = getattr(subjects, builder) if isinstance(builder, str) else builder
    params = list(inspect.signature(function).parameters)
    fixed = ([] if isinstance(builder, str) else [subjects]) + list(args)
    return function(*fixed, *(_placeholder(p) for p in params[len(fixed):]))


def _matches(subject: str, pattern: str) -> bool:
    """NATS wildcard matching, a <placeholder> standing for any one token."""
    tokens, wanted = subject.split("."), pattern.split(".")
    for i, want in enumerate(wanted):
        if want == ">":
            return len(tokens) > i
        if i >= len(tokens) or (want not in ("*", tokens[i]) and not tokens[i].startswith("__")):
            return False
    return len(tokens) == len(wanted)


def _stream(subjects: Subjects, subject: str) -> str:
    for stream, patterns in ((LOG_STREAM, subjects.log_subjects()), (TEL_STREAM, subjects.tel_subjects())):
        if any(_matches(subject, p) for p in patterns):
            return f"`{stream}`"
    return "none"


def undocumented_subject_builders() -> list[str]:
    """Public Subjects methods neither in SUBJECTS nor in FILTERS: a new subject needs a row."""
    documented = {r.builder for r in SUBJECTS if isinstance(r.builder, str)} | set(FILTERS)
    public = [n for n, v in vars(Subjects).items() if callable(v) and not n.startswith("_")]
    return [n for n in public if n not in documented]


def subjects_block() -> str:
    missing = undocumented_subject_builders()
    if missing:
        raise SystemExit(f"Subjects.{', Subjects.'.join(missing)} not documented: add a row to SUBJECTS or FILTERS in {__file__}")
    subjects = Subjects("ca")
    lines = ["| subject | kind | stream | messages | what |", "|---|---|---|---|---|"]
    for row in SUBJECTS:
        subject = _build(subjects, row.builder, row.args)
        messages = ", ".join(link(m) for m in row.messages) or "—"
        lines.append(f"| `{_shown(subject)}` | {row.kind} | {_stream(subjects, subject)} | {messages} | {row.what} |")
    lines += ["", "Request/reply APIs, not recorded (`Api` tables in `libs/protocol`, `responder.py`). In a subject, `*` "
              "is who asks: only that user (on `ds.pnode`, that PNode) may publish there; the others know the asker by "
              "its reply inbox (`_INBOX.<role>.<name>.`). Every failure is the reply model with `ok` false and an "
              "`error`:", "", "| subject | request | reply | answered by | what |", "|---|---|---|---|---|"]
    for api in APIS:
        for endpoint in api.endpoints:
            for subject in api.listen(subjects, endpoint.verb):
                lines.append(f"| `{subject}` | {link(endpoint.request)} | {link(api.reply)} | {api.service} | {endpoint.what} |")
    lines += ["", "Subscription filters and stream subjects (`Subjects` in `libs/protocol/subjects.py`):", "",
              "| builder | subjects | what |", "|---|---|---|"]
    for name, what in FILTERS.items():
        built = _build(subjects, name, ())
        shown = ", ".join(f"`{_shown(s)}`" for s in (built if isinstance(built, list) else [built]))
        lines.append(f"| `{name}` | {shown} | {what} |")
    return "\n".join(lines)


# -- models ---------------------------------------------------------------------------------

# Example values by field name ("Model.field" first): what the page shows for required fields.
EXAMPLES: dict[str, object] = {
    "session_id": "a1b2c3d4e5f6", "pnode": "pnode-0", "host": "host-a", "os_pid": 4242, "device": "cpu",
    "memory_bytes": 8 << 30, "ts": 1796212800.0, "step": 41, "loss": 4.812, "tokens": 2048, "step_time_s": 0.92,
    "lr": 0.0029, "owner": "alice", "orchestrator": "host-4242-9f3a1c", "resume_from_step": 40,
    "reason": "pnode-1 was lost", "CommandRejected.reason": "cannot resume a session that is stopped",
    "CheckpointDiscarded.reason": "object a1b2c3d4e5f6/00000040/embed.safetensors in ca-checkpoints-a1b2c3d4e5f6 is "
                                  "corrupted (digest mismatch with the log)", "as_of": 412,
    "SessionFailed.reason": "waited 120s for 3 PNodes, 2 are live; start more with `computeall pnode --nats URL`",
    "StepSkipped.reason": "gradients overflowed on pnode-1", "command_id": "3f1c0a8e9b2d4c6f8a1b2c3d4e5f6a7b",
    "command_type": "ResumeSession", "bucket": "ca-checkpoints-a1b2c3d4e5f6", "UploadedWeights.bucket": "ca-uploads", "seconds": 0.4, "perplexity": 141.2,
    "final_loss": 3.91, "steps": 200, "old": 65536.0, "new": 32768.0, "LossScaleChanged.reason": "overflow",
    "waited_s": 61.5, "silent_s": 5.2, "to_step": 40, "from_step": 43, "vnode": "embed", "op": "embedding",
    "params": 1048576, "precision": "fp32", "src": "b1.res2", "dst": "b2.norm1", "bytes_per_step": 4194304,
    "pnodes": ["pnode-0", "pnode-1"], "bytes_across_per_step": 8388608,
    "Allocated.estimated_step_s": 0.81, "moves": {"b2.attn": "pnode-0"},
    "object": "a1b2c3d4e5f6/00000040/embed.safetensors", "digest": "9c1e4f0d2b7a6e8f1c3d5b7a9e0f2d4c",
    "bytes": 12583000, "name": "tinyshakespeare", "UserCreate.name": "alice", "files": ["/data/input.txt"],
    "DataConfig.files": ["/data/input.txt"], "CreateDataset.files": ["/data/input.txt"], "BatchSource.split": "train",
    "vocab_size": 4096, "requested_vocab_size": 4096, "tokenizer_digest": "5d41402abc4b2a76b9719d911017c592",
    "documents": 7223, "text_bytes": 1115394, "dtype": "uint16", "split": "val", "method": "random-doc",
    "shards": 1, "shard_digests": ["0cc175b9c0f1b6a831c399e269772661"], "dataset": "tinyshakespeare",
    "request": "RunStep", "state": "done", "rss_bytes": 512 << 20, "api_key": "ca.alice.Q2JrZl9zZWNyZXRfMzJfYnl0ZXNfaGVyZV9iYXNlNjQ",
    "network_yaml": "name: tiny-gpt\nvocab_size: 4096\ncontext: 256\n...", "assignment": {"embed": "pnode-0"},
    "network": {"name": "tiny-gpt", "vnodes": ["..."]}, "seed": 1, "micro_batch_size": 8, "context": 256,
    "micro_batches": 1, "batch": 8, "key": "a1b2c3d4e5f6/train/41/0/b1.res2/act", "shape": [8, 256, 128],
    "chunk": 0, "chunks": 1, "offset": 0, "total_bytes": 1048576, "TensorHeader.dtype": "float32",
    "stage": "tokenize", "done": 524288, "total": 1115394, "ok": True,
    "flops_per_s": 9.2e10, "bandwidth_bytes_per_s": 1.2e7, "rtt_s": 0.041, "measured_at": 1796212790.0,
    "step_s": 0.93, "StepTiming.compute_s": 0.41, "StepTiming.send_s": 0.12, "StepTiming.wait_s": 0.38,
    "StepTiming.sent_bytes": {"pnode-1": 4194512},
    "nkey": "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4", "key_id": "7c9e6679f4c74f1b",
    "user": "alice", "revoked": ["7c9e6679f4c74f1b"], "after_seq": 120, "wait_s": 20.0, "seq": 121,
    "subject": "ca.evt.session.a1b2c3d4e5f6.StepCompleted", "sessions": ["a1b2c3d4e5f6"], "last_seq": 121,
    "data": '{"type": "StepCompleted", "...": "..."}',
    "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "size": 1115394,
    "UploadedFile.name": "input.txt", "path": "/home/alice/input.txt", "part_bytes": 8 << 20,
    "parts": ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"], "UploadManifest.size": 1115394,
    "InitFrom.session_id": "f6e5d4c3b2a1", "InitFrom.step": 200, "source": "session f6e5d4c3b2a1 at step 200",
    "prompt": "ROMEO:", "text": " what light through yonder window breaks?", "Sample.tokens": 11,
    "prompts": [[0, 4107, 25]], "texts": ["ROMEO:"], "DecodeTokens.tokens": [[4107, 25]],
}


def envelope_section() -> str:
    """The envelope's fields, with a whole `PauseSession` command as it is published."""
    pause = Envelope[Command](id="3f1c0a8e9b2d4c6f8a1b2c3d4e5f6a7b", ts=1796212800.0, actor="alice",
                              session_id="a1b2c3d4e5f6", payload=PauseSession())
    return model_section(Envelope, EXAMPLES, pause.model_dump(mode="json"))


def heartbeat_timing() -> str:
    return (f"A PNode sends a `Heartbeat` every {telemetry.HEARTBEAT_INTERVAL_S:g} s (`HEARTBEAT_INTERVAL_S`); one silent "
            f"for {telemetry.HEARTBEAT_TIMEOUT_S:g} s (`HEARTBEAT_TIMEOUT_S`, the orchestrator's and the monitor's "
            "`--heartbeat-timeout` default) is lost.\n\n")


def limits_block() -> str:
    """Every limit of `computeall.protocol.limits`, as a table."""
    rows = [f"| `{name}` | {value:,} | {value.what} |" for name, value in limits.documented().items()]
    return "\n".join(["| limit | value | what it bounds |", "|---|---|---|", *rows]) + "\n"


def api_models(page: Page, api: Api, more: list[type[BaseModel]] | None = None) -> str:
    """An API's requests in its table's order, then its reply model and the other models it uses."""
    return page.models([*(e.request for e in api.endpoints), api.reply, *(more or [])])


def blocks(page: Page) -> dict[str, Callable[[], str]]:
    """The `{{name}}` blocks of the template, in the order they are written."""
    return {
        "subjects": subjects_block,
        "limits": limits_block,
        "envelope": envelope_section,
        "commands": lambda: page.models(members(Command)),
        "session_events": lambda: page.models(members(SessionEvent)),
        "pnode_events": lambda: page.models(members(PNodeEvent)),
        "dataset_events": lambda: page.models(members(DatasetEvent)),
        "telemetry": lambda: heartbeat_timing() + page.models([telemetry.Heartbeat, *members(telemetry.Telemetry)]),
        "pnode_requests": lambda: page.models([*members(pnode_api.PNodeRequest), pnode_api.PNodeReply]),
        "tensor_header": lambda: page.models([wire.TensorHeader]),
        "dataset_api": lambda: api_models(page, dataset_api.API, [dataset_api.DatasetProgress, uploads.UploadManifest]),
        "monitor_api": lambda: api_models(page, monitor_api.API),
        "session_reads": lambda: api_models(page, session_reads.API),
        "membership_api": lambda: api_models(page, membership_api.API),
        "types": page.types,
    }


def render(template: str | None = None) -> str:
    template = TEMPLATE.read_text() if template is None else template
    generated = blocks(Page(EXAMPLES))
    placeholders = re.findall(r"^\{\{(\w+)\}\}$", template, flags=re.M)
    if sorted(placeholders) != sorted(generated):
        raise SystemExit(f"{TEMPLATE.name} must have each of {{{{{'}}, {{'.join(generated)}}}}} once on its own line; "
                         f"it has {placeholders}")
    # filled in the blocks' order, so that a model's first appearance is the same on every run
    filled = {name: make() for name, make in generated.items()}
    header = f"<!-- generated by `{REGENERATE}` from libs/protocol and {TEMPLATE.relative_to(REPO)}: edit those -->\n"
    return header + re.sub(r"^\{\{(\w+)\}\}$", lambda m: filled[m.group(1)], template, flags=re.M)


def main(argv: list[str] | None = None) -> int:
    return write_or_check(__doc__.splitlines()[0], OUTPUT, render, REGENERATE, argv)


if __name__ == "__main__":
    sys.exit(main())
