"""Refuse a network YAML too large, too deep or too wide before it becomes Python objects.

PyYAML's composer recurses once per nesting level (5,000 levels raise RecursionError) and an
alias is a reference that later code walks as many times as it is used (a "billion laughs"
document is small). The parser underneath is a flat event stream, so walking its events costs
time linear in the text and memory linear in the depth: that is where size is measured.
"""

from __future__ import annotations

import yaml

from computeall.protocol.limits import NETWORK_YAML_BYTES, NETWORK_YAML_DEPTH, NETWORK_YAML_NODES

# libyaml's parser when PyYAML was built with it (the wheels are), else the pure-Python one
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def shape_problem(text: str, source: str) -> str | None:
    """Why `text` is over a limit, or None when it is within all of them (it may still be invalid YAML)."""
    size = len(text.encode())
    if size > NETWORK_YAML_BYTES:
        return f"{source} is {size:,} bytes; a network YAML may have at most {NETWORK_YAML_BYTES:,}: use `repeat` for repeated blocks"
    nodes = 0
    anchored: dict[str, int] = {}  # anchor -> how many values an alias to it stands for
    open_collections: list[tuple[str | None, int]] = []  # (anchor, `nodes` when it opened)
    try:
        for event in yaml.parse(text, Loader=SAFE_LOADER):
            if isinstance(event, yaml.AliasEvent):
                nodes += anchored.get(event.anchor, 1)  # an unknown anchor: loading reports it
            elif isinstance(event, yaml.ScalarEvent):
                nodes += 1
                if event.anchor:
                    anchored[event.anchor] = 1
            elif isinstance(event, yaml.CollectionStartEvent):
                nodes += 1
                open_collections.append((event.anchor, nodes))
                if len(open_collections) > NETWORK_YAML_DEPTH:
                    line = event.start_mark.line + 1
                    return (f"{source} nests deeper than {NETWORK_YAML_DEPTH} levels (at line {line}); "
                            "a network is a mapping with a list of VNodes")
            elif isinstance(event, yaml.CollectionEndEvent):
                anchor, opened = open_collections.pop()
                if anchor:
                    anchored[anchor] = nodes - opened + 1
            if nodes > NETWORK_YAML_NODES:
                return (f"{source} holds more than {NETWORK_YAML_NODES:,} values (aliases counted as what they "
                        "stand for); write fewer VNodes or use `repeat`")
    except yaml.YAMLError:
        return None  # not YAML at all: loading says where
    return None
