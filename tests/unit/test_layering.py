"""The house's import rules hold, the graph in docs/architecture.md is current, the CLI starts light."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from .tools import load_tool

graph = load_tool("import_graph")


@pytest.fixture(scope="module")
def found():
    return graph.imports()


def test_no_import_breaks_the_layering(found):
    problems = graph.violations(found)
    assert not problems, "imports that break the layering rules (docs/architecture.md, Layering):\n" + "\n".join(problems)


def test_the_graph_in_the_architecture_page_is_current(found):
    page = graph.ARCHITECTURE.read_text()
    assert graph.with_graph(page, graph.mermaid(found)) == page, (
        f"the import graph in docs/architecture.md is stale: run `{graph.REGENERATE}` and commit it")


def test_relative_lazy_and_package_imports_are_all_seen(found):
    seen = {(i.importer, i.imported): i.lazy for i in found}
    assert seen[("computeall.protocol.commands", "computeall.protocol.config")] is False  # from .config import
    assert seen[("computeall.cli.commands.replay", "computeall.cli.client")] is False  # from ..client import
    assert seen[("computeall.cli.commands.pnode", "computeall.pnode.__main__")] is True  # inside a function


def test_an_import_inside_a_function_is_found_and_marked_lazy():
    tree = ast.parse("import json\ndef f():\n    import torch\nclass C:\n    def g(self):\n        from x import y\n")
    assert [(type(n).__name__, lazy) for n, lazy in graph._imports_in(tree)] == [
        ("Import", False), ("Import", True), ("ImportFrom", True)]


def _imp(importer: str, imported: str, lazy: bool = False):
    return graph.Import(Path("x.py"), 1, importer, imported, lazy)


@pytest.mark.parametrize("importer, imported, complaint", [
    ("computeall.network.graph", "computeall.orchestrator.allocator", "a service"),
    ("computeall.orchestrator.driver", "computeall.pnode.node", "services talk over NATS"),
    ("computeall.protocol.events", "computeall.network.spec", "depends on nothing of ours"),
    ("computeall.network.spec", "computeall.tensorcore.ops", "may use protocol only"),
    ("computeall.monitor.service", "torch", "imports torch"),
    ("computeall.cli.commands.run", "torch.nn", "imports torch"),
])
def test_each_rule_catches_its_violation(importer, imported, complaint):
    for lazy in (False, True):  # an import inside a function breaks the rule just the same
        problems = graph.violations([_imp(importer, imported, lazy)])
        assert len(problems) == 1 and complaint in problems[0] and "x.py:1" in problems[0]


@pytest.mark.parametrize("importer, imported", [
    ("computeall.network.graph", "computeall.protocol.subjects"),
    ("computeall.tensorcore.ops", "computeall.kernels.attention"),
    ("computeall.pnode.node", "torch"),
    ("computeall.orchestrator.driver", "computeall.orchestrator.allocator"),
    ("computeall.protocol.eventlog", "nats.js"),
])
def test_allowed_imports_pass(importer, imported):
    assert graph.violations([_imp(importer, imported)]) == []


def test_lazy_only_edges_are_dashed():
    drawn = graph.mermaid([_imp("computeall.cli.a", "computeall.monitor.b", lazy=True),
                           _imp("computeall.cli.a", "computeall.protocol.c"),
                           _imp("computeall.cli.a", "computeall.protocol.d", lazy=True)])
    assert "cli -.-> monitor" in drawn and "cli --> protocol" in drawn


HEAVY = ("torch", "duckdb")


@pytest.mark.parametrize("argv", [["--help"], ["replay", "--help"], ["session", "--help"], ["pnode", "--help"]])
def test_cli_help_imports_neither_torch_nor_duckdb(argv):
    probe = (
        "import json, sys\n"
        "from computeall.cli.main import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [], f"`computeall {' '.join(argv)}` imported them"


def test_replay_rebuild_still_loads_its_parser():
    from computeall.cli.main import build_parser

    args = build_parser().parse_args(["replay", "rebuild", "--data-dir", "somewhere", "--json"])
    assert (args.verb, args.data_dir, args.json) == ("rebuild", "somewhere", True)
    assert args.func.__module__ == "computeall.cli.commands.replay_rebuild"
