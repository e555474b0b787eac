"""Document size, query depth and cost limits: abusive queries are rejected before any read.

Size: a document over `GRAPHQL_DOCUMENT_BYTES` is refused before it is parsed (parsing and
validating megabytes of GraphQL costs seconds and hundreds of MiB, on the event loop every
user shares). Depth and cost are checked at validation. Cost: list fields cost their size argument, multiplied by the sizes of the lists they are
nested in, so `sessions(limit: 100) { steps(maxPoints: 1000) }` costs 100,000 and is refused
while a dashboard's `session(id) { steps(maxPoints: 1000) }` (1,000) passes.
"""

from __future__ import annotations

from graphql import GraphQLError, parse
from graphql.language import DocumentNode, FieldNode, FragmentSpreadNode, InlineFragmentNode, OperationDefinitionNode, SelectionSetNode
from graphql.validation import ValidationRule

from ariadne.validation import cost_validator

from computeall.protocol.limits import GRAPHQL_DOCUMENT_BYTES

MAX_DEPTH = 8
MAX_COST = 50_000

COST_MAP = {
    "Query": {
        "sessions": {"complexity": 1, "multipliers": ["limit"]},
        "pnodes": {"complexity": 10},
        "topology": {"complexity": 50},
    },
    "Session": {
        "steps": {"complexity": 1, "multipliers": ["max_points"]},  # Python argument names
        "events": {"complexity": 1, "multipliers": ["limit"]},
        "validations": {"complexity": 100},
        "samples": {"complexity": 8, "multipliers": ["limit"]},  # up to 8 prompts a step
        "checkpoints": {"complexity": 10},
        "overview": {"complexity": 100},  # parses the session's network (cached)
        "markers": {"complexity": 20},
    },
    "PNode": {
        "memory": {"complexity": 500},
        "requests": {"complexity": 1, "multipliers": ["limit"]},
        "roles": {"complexity": 10},  # reads the caller's current allocations
    },
}


def parse_within_limit(context: object, data: dict) -> DocumentNode:
    """ariadne's `query_parser`, for HTTP and websocket alike: measure, then parse."""
    query = data.get("query")
    size = len(query.encode()) if isinstance(query, str) else 0
    if size > GRAPHQL_DOCUMENT_BYTES:
        raise GraphQLError(f"the document is {size:,} bytes; the limit is {GRAPHQL_DOCUMENT_BYTES:,}")
    return parse(query)


class DepthLimit(ValidationRule):
    def enter_operation_definition(self, node: OperationDefinitionNode, *_args: object) -> None:
        depth = self._depth(node.selection_set, set())
        if depth > MAX_DEPTH:
            self.report_error(GraphQLError(f"query depth {depth} exceeds the limit of {MAX_DEPTH}", node))

    def _depth(self, selection_set: SelectionSetNode | None, seen: set[str]) -> int:
        if selection_set is None:
            return 0
        deepest = 0
        for sel in selection_set.selections:
            if isinstance(sel, FieldNode):
                deepest = max(deepest, 1 + self._depth(sel.selection_set, seen) if sel.selection_set else 1)
            elif isinstance(sel, InlineFragmentNode):
                deepest = max(deepest, self._depth(sel.selection_set, seen))
            elif isinstance(sel, FragmentSpreadNode) and sel.name.value not in seen:
                fragment = self.context.get_fragment(sel.name.value)
                if fragment:  # `seen` guards against fragment cycles, reported by another rule
                    deepest = max(deepest, self._depth(fragment.selection_set, seen | {sel.name.value}))
        return deepest


def validation_rules(context: object, document: object, data: dict) -> list:
    # the cost rule reads argument values, so it is built per request with that request's variables
    return [DepthLimit, cost_validator(MAX_COST, variables=data.get("variables"), cost_map=COST_MAP)]
