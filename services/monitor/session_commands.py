"""The session commands the monitor serves, as the session aggregate declares them
(`computeall.protocol.session_commands`): nothing here names a command.

- a mutation per verb, `<verb>Session(id, ...)`, with the command's fields as its arguments;
- the enum `SessionCommand` of the verbs, and `Session.commands`: those the session's status allows now,
  which the dashboard enables its buttons by;
- for the dashboard, the verbs and each mutation's document (`web/src/api/protocol.ts`).
`python -m computeall.monitor.codegen` writes the GraphQL and TypeScript parts.
"""

from __future__ import annotations

import json

from computeall.protocol.session_commands import CommandSpec, allowed_verbs, session_verbs
from computeall.protocol.session_status import SessionStatus

from .step_metrics import StepColumn, scalar_column


def mutation_name(verb: str) -> str:
    return f"{verb}Session"


def arguments(spec: CommandSpec) -> list[StepColumn]:
    """The command's fields as GraphQL arguments (scalars: a command on a session carries no more)."""
    out = []
    for name in spec.fields:
        column = scalar_column(name, spec.model.model_fields[name].annotation)
        if column is None:
            raise TypeError(f"{spec.model.__name__}.{name} is not an int, float or bool: it has no GraphQL argument form")
        out.append(column)
    return out


def allowed(status: str) -> list[str]:
    """The verbs a session in `status` (the monitor's copy of the fold's) takes now."""
    return allowed_verbs(SessionStatus(status))


def _description(text: str | None) -> str:
    return json.dumps(" ".join((text or "").split()))  # a GraphQL string is a JSON string


def _mutation(spec: CommandSpec) -> str:
    args = ["id: ID!"]
    for column in arguments(spec):
        field = spec.model.model_fields[column.name]
        default = "" if field.default is None else f" = {json.dumps(field.default)}"
        args.append(f"{_description(field.description)} {column.graphql_name}: {column.graphql_type}{default}")
    doc = _description(f"Publish {spec.model.__name__} as the calling user. {spec.summary}")
    return f"  {doc}\n  {mutation_name(spec.verb)}({', '.join(args)}): CommandAccepted!"


def schema_section() -> str:
    verbs = session_verbs()
    values = "\n".join(f"  {verb}" for verb in verbs)
    mutations = "\n".join(_mutation(spec) for spec in verbs.values())
    return f'''"A command on a session that exists: the session aggregate's verbs (computeall.protocol.session_commands)."
enum SessionCommand {{
{values}
}}

extend type Session {{
  "The commands its status allows now, as the session aggregate decides (a button for each that is not is disabled)."
  commands: [SessionCommand!]!
}}

extend type Mutation {{
{mutations}
}}'''


def _document(spec: CommandSpec) -> str:
    columns = arguments(spec)
    variables = "".join(f", ${c.graphql_name}: {c.graphql_type}" for c in columns)
    passed = "".join(f", {c.graphql_name}: ${c.graphql_name}" for c in columns)
    name = mutation_name(spec.verb)
    return f"mutation {name[0].upper()}{name[1:]}($id: ID!{variables}) {{ {name}(id: $id{passed}) {{ sessionId commandId }} }}"


def typescript() -> str:
    verbs = session_verbs()
    documents = "\n".join(f"  {verb}: /* GraphQL */ `{_document(spec)}`," for verb, spec in verbs.items())
    return f"""
/** The commands on a session that exists (the session aggregate's verbs); `Session.commands` says which it takes now. */
export const SESSION_COMMANDS = [{", ".join(json.dumps(v) for v in verbs)}] as const;
export type SessionCommand = (typeof SESSION_COMMANDS)[number];
/** Each command's mutation: `id`, and the command's own fields as optional variables. */
export const SESSION_COMMAND_MUTATIONS: Record<SessionCommand, string> = {{
{documents}
}};
"""
