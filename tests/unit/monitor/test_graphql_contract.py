"""The dashboard's GraphQL contract, checked in seconds: every document in web/src is valid against
services/monitor/schema.graphql (and within the monitor's own depth and cost limits), every schema
field has something that resolves it, and web/src/api/types.ts is what graphql-codegen writes now."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import BaseModel
from graphql import FragmentDefinitionNode, OperationDefinitionNode, parse, specified_rules, validate
from graphql.language import FragmentSpreadNode, Visitor, visit

from computeall.monitor import server
from computeall.monitor.limits import validation_rules

ROOT = Path(__file__).resolve().parents[3]
WEB = ROOT / "web"
GENERATED = WEB / "src" / "api" / "types.ts"
MONITOR = ROOT / "services" / "monitor"
MARKED = re.compile(r"/\* GraphQL \*/\s*`([^`]*)`")  # how a document is written in web/src (queries.ts says why)
DOCUMENT_START = re.compile(r"[`'\"]\s*((query|mutation|subscription)\s+\w+\s*[({]|fragment\s+\w+\s+on\s)")


def sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted((WEB / "src").rglob("*")) if p.suffix in (".ts", ".vue") and p != GENERATED}


def definitions() -> tuple[dict[str, str], dict[str, str]]:
    """Every operation and fragment written in web/src, by name, as text (interpolations left out: a
    document names the fragments it spreads, which are read from where they are written)."""
    operations, fragments = {}, {}
    for path, text in sources().items():
        for literal in MARKED.findall(text):
            for node in parse(re.sub(r"\$\{[^}]*\}", " ", literal)).definitions:
                table = fragments if isinstance(node, FragmentDefinitionNode) else operations
                name = node.name.value
                assert name not in table, f"{name} is written twice in web/src (again in {path.relative_to(ROOT)})"
                table[name] = node.loc.source.body[node.loc.start:node.loc.end]
    return operations, fragments


def spread(text: str) -> set[str]:
    names: set[str] = set()

    class Spreads(Visitor):
        def enter_fragment_spread(self, node: FragmentSpreadNode, *_):
            names.add(node.name.value)

    visit(parse(text), Spreads())
    return names


def with_fragments(text: str, fragments: dict[str, str]) -> str:
    """`text` and every fragment it reaches."""
    seen: set[str] = set()
    todo = spread(text)
    while todo:
        name = todo.pop()
        assert name in fragments, f"fragment {name} is spread but written nowhere in web/src"
        if name not in seen:
            seen.add(name)
            todo |= spread(fragments[name]) - seen
    return "\n".join([text, *(fragments[n] for n in sorted(seen))])


OPERATIONS, FRAGMENTS = definitions()


def test_the_dashboard_writes_every_document_where_the_checks_read_it():
    unmarked = [f"{p.relative_to(ROOT)}: {m.group(0)[:60]}" for p, text in sources().items()
                for m in DOCUMENT_START.finditer(text) if not text[:m.start()].rstrip().endswith("/* GraphQL */")]
    assert not unmarked, f"GraphQL documents without the /* GraphQL */ mark (the checks cannot see them): {unmarked}"
    assert {"Sessions", "Session", "PNodes", "PauseSession", "ResumeSession"} <= set(OPERATIONS)


# a value for each required variable, so the cost rule can read every argument; optional ones take the schema's defaults
EXAMPLE_VALUES = {"ID": "s1", "String": "x", "Int": 1, "Float": 0.0, "Boolean": True}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_every_document_is_valid_against_the_schema_and_within_the_limits(name):
    document = parse(with_fragments(OPERATIONS[name], FRAGMENTS))
    (operation,) = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    variables = {v.variable.name.value: EXAMPLE_VALUES[v.type.type.name.value]
                 for v in operation.variable_definitions or () if v.type.kind == "non_null_type"}
    errors = validate(server.schema(), document, [*specified_rules, *validation_rules(None, document, {"variables": variables})])
    assert not errors, f"{name}: " + "; ".join(e.message for e in errors)


def test_every_fragment_is_used():
    used = set().union(*(spread(text) for text in [*OPERATIONS.values(), *FRAGMENTS.values()]))
    assert set(FRAGMENTS) <= used, f"fragments nothing spreads: {sorted(set(FRAGMENTS) - used)}"


def _produced_keys() -> set[str]:
    """What the monitor's resolvers hand on as rows: every string and identifier in its modules (dict keys, SQL
    columns and aliases, its models' fields), and the fields of the protocol's models it passes on."""
    keys = {name for module in list(sys.modules.values()) if module and module.__name__.startswith("computeall.protocol")
            for kind in vars(module).values() if isinstance(kind, type) and issubclass(kind, BaseModel)
            for name in kind.model_fields}
    for path in MONITOR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                keys |= set(re.findall(r"[a-z_][a-z0-9_]*", node.value))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                keys.add(node.target.id)
    return keys


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower().replace("v_nodes", "vnodes")


def test_every_schema_field_has_a_resolver():
    """A root field has a resolver of its own; any other field has one, or is a key the monitor's rows carry
    (ariadne's default resolver reads it by its snake_case name, and reads None for a key nothing writes)."""
    schema = server.schema()
    roots = {schema.query_type, schema.mutation_type, schema.subscription_type}
    missing = []
    for root in roots:
        for name, field in root.fields.items():
            resolver = field.subscribe if root is schema.subscription_type else field.resolve
            if resolver is None or resolver.__module__.startswith("ariadne"):
                missing.append(f"{root.name}.{name}")
    keys = _produced_keys()
    for type_name, kind in schema.type_map.items():
        if type_name.startswith("__") or kind in roots or not hasattr(kind, "fields") or not hasattr(kind, "interfaces"):
            continue
        for name, field in kind.fields.items():
            own = field.resolve is not None and not field.resolve.__module__.startswith("ariadne")
            if not own and _snake(name) not in keys and name not in keys:
                missing.append(f"{type_name}.{name}")
    assert not missing, f"schema fields nothing resolves: {missing}"


def test_the_typescript_types_are_what_graphql_codegen_writes_now():
    if shutil.which("npx") is None or not (WEB / "node_modules" / ".bin" / "graphql-codegen").exists():
        pytest.fail("graphql-codegen is not installed: run `make web` (npm ci in web/)")
    result = subprocess.run(["npx", "graphql-codegen", "--config", "codegen.yml", "--check"], cwd=WEB,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (
        "web/src/api/types.ts differs from what graphql-codegen writes from the schema and the documents: "
        f"run `npm run codegen` in web/ and commit it\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
    )
