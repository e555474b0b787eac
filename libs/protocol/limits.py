"""What the system accepts, at most: every size limit a user can run into, in one place.

Each limit is checked before the work it bounds starts (a byte count before parsing, a nesting
depth before building objects, a VNode count before expanding `repeat`), so input over a limit
costs milliseconds and gets a reason, never a stall. docs/protocol.md lists them all
(`python tools/protocol_doc.py`).
"""

from __future__ import annotations


class Limit(int):
    """An int that also says what it bounds and what happens beyond it (the sentence the docs show)."""

    what: str

    def __new__(cls, value: int, what: str) -> "Limit":
        limit = super().__new__(cls, value)
        limit.what = what
        return limit


COMMAND_BYTES = Limit(
    512 << 10,
    "bytes of one command's JSON on `ca.cmd.>`; a longer one is rejected (`CommandRejected`) unread. "
    "`CA_LOG` itself refuses any message over 1 MiB at publish time",
)
NETWORK_YAML_BYTES = Limit(256 << 10, "bytes of a network YAML (`SessionConfig.network_yaml`)")
NETWORK_YAML_DEPTH = Limit(32, "nesting depth of a network YAML (mappings and lists inside each other)")
NETWORK_YAML_NODES = Limit(
    200_000, "values in a network YAML, counting each alias as the values it stands for (checked before loading)"
)
NETWORK_VNODES = Limit(4096, "VNodes of a network after `repeat` is expanded (counted before expanding)")
UPLOAD_FILE_BYTES = Limit(
    4 << 30, "bytes of one file a dataset is made from, uploaded (`UploadedFile.size`) or read by the dataset "
    "service: it holds a file whole while it cuts it into documents. The client checks it before it reads the file",
)
TOKENIZER_FILE_BYTES = Limit(64 << 20, "bytes of a tokenizer.json given to `dataset create --tokenizer-file`")
SECRET_INPUT_BYTES = Limit(
    1 << 20, "bytes of a token read from a file, stdin or the environment (`pnode --join-file`, `up --leaf-file`)"
)
DATA_FILES_PER_REQUEST = Limit(1000, "files named in one `ca.ds.locate` request (clients send more in several)")
TENSORS_PENDING_PER_SENDER = Limit(
    16, "tensors one PNode may have unfinished at another at once (some of their chunks still to come); "
    "a newer one makes its oldest be dropped, never another sender's",
)
GRAPHQL_DOCUMENT_BYTES = Limit(
    64 << 10, "bytes of one GraphQL document (query, mutation or subscription); a longer one is refused unparsed"
)
GRAPHQL_REQUEST_BYTES = Limit(
    256 << 10, "bytes of one GraphQL HTTP request body (document and variables); a longer one gets HTTP 413 unread"
)


def documented() -> dict[str, Limit]:
    """Every limit by its name, in the order above."""
    return {name: value for name, value in globals().items() if isinstance(value, Limit)}
