"""Markdown for pydantic models: a section per model with its docstring, a field table and one
example the model itself validates.

A field's description is its `Field(description=...)` or, failing that, the comment at the end of
its line in the class body. Examples come from a table of values by field name (`Model.field`
first), with defaults elsewhere, so a page cannot show a message the system would refuse.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import re
import tokenize
import types
import typing
from functools import cache

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo


def members(union) -> list[type[BaseModel]]:
    """The models of a (possibly Annotated, possibly nested) discriminated union, in declared order."""
    if typing.get_origin(union) is typing.Annotated:
        union = typing.get_args(union)[0]
    if isinstance(union, type) and issubclass(union, BaseModel):
        return [union]
    return [m for arg in typing.get_args(union) for m in members(arg)]



def _doc(model: type) -> str:
    return inspect.cleandoc(model.__dict__.get("__doc__") or "")


TOOL_COMMENT = re.compile(r"#\s*(type:|noqa|pragma)")  # for linters, not for readers


@cache
def _line_comments(model: type) -> dict[str, str]:
    """`field: type = ...  # why` in a class body -> {field: why}."""
    try:
        source = inspect.getsource(model)
    except (OSError, TypeError):
        return {}
    source = inspect.cleandoc("\n" + source) if source[:1].isspace() else source
    comments = {t.start[0]: t.string.lstrip("# ").strip()
                for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT and not TOOL_COMMENT.match(t.string)}
    body = ast.parse(source).body[0].body
    return {node.target.id: comments[node.lineno] for node in body
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.lineno in comments}


def description(model: type[BaseModel], name: str, field: FieldInfo) -> str:
    if field.description:
        return field.description
    for cls in model.__mro__:  # an inherited field keeps its comment
        if name in _line_comments(cls):
            return _line_comments(cls)[name]
    return ""


def anchor(model: type) -> str:
    return model.__name__.lower()


def link(model: type) -> str:
    return f"[`{model.__name__}`](#{anchor(model)})"


def _type(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "null"
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join(_type(a) for a in args)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (list, tuple, dict):
        inner = ", ".join(_type(a) for a in args)
        return f"{origin.__name__}[{inner}]" if inner else origin.__name__
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return link(annotation)
    if isinstance(annotation, typing.TypeVar):
        return "a command or an event"  # the envelope's payload
    return getattr(annotation, "__name__", str(annotation))


_CONSTRAINTS = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<", "min_length": "min length", "max_length": "max length",
                "pattern": "pattern"}


def _constraints(field: FieldInfo) -> str:
    found = []
    for item in field.metadata:
        for attr, shown in _CONSTRAINTS.items():
            value = getattr(item, attr, None)
            if value is not None:
                found.append(f"{shown} `{value}`" if attr == "pattern" else f"{shown} {value}")
    return ", ".join(found)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        factory = field.default_factory
        if not (factory in (list, dict) or (isinstance(factory, type) and issubclass(factory, BaseModel))):
            return f"`{factory.__name__}()`, new per message"  # an id, a timestamp
        value = factory()
        if isinstance(value, BaseModel):
            return f"`{type(value).__name__}()`"
    else:
        value = field.default
    return f"`{json.dumps(value, default=str)}`"




def _fits(value, annotation) -> bool:
    try:
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


def _fallback(annotation, examples: dict[str, object]):
    """A value of `annotation` for a required field the examples table does not name."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return args[0]
    if origin in (typing.Union, types.UnionType):
        return _fallback(next(a for a in args if a is not type(None)), examples)
    if origin in (list, tuple):
        if origin is tuple:
            return [_fallback(a, examples) for a in args]
        return [_fallback(args[0], examples)] if args else []
    if origin is dict:
        return {"key": _fallback(args[1], examples)} if args else {}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return example(annotation, examples)
    return {int: 0, float: 0.0, str: "text", bool: False}.get(annotation, None)


def _example_value(model: type[BaseModel], name: str, annotation, examples: dict[str, object]):
    for key in (f"{model.__name__}.{name}", name):
        if key in examples and _fits(examples[key], annotation):  # `lr` is a float here, a schedule there
            return examples[key]
    return _fallback(annotation, examples)


def example(model: type[BaseModel], examples: dict[str, object]) -> dict:
    """One message of `model`, as JSON: required fields from `examples`, defaults elsewhere, validated by the model."""
    values = {name: _example_value(model, name, field.annotation, examples) for name, field in model.model_fields.items()
              if field.is_required() or f"{model.__name__}.{name}" in examples}
    return model.model_validate(values).model_dump(mode="json")


def model_section(model: type[BaseModel], examples: dict[str, object], shown_example: dict | None = None) -> str:
    lines = [f"#### {model.__name__}", ""]
    if _doc(model):
        lines += [_doc(model), ""]
    if model.model_fields:
        lines += ["| field | type | default | description |", "|---|---|---|---|"]
        for name, field in model.model_fields.items():
            kind = _type(field.annotation)
            limits = _constraints(field)
            lines.append(f"| `{name}` | {kind}{', ' + limits if limits else ''} | {_default(field)} | "
                         f"{description(model, name, field)} |")
        lines.append("")
    lines += ["```json", json.dumps(shown_example or example(model, examples)), "```"]
    return "\n".join(lines)


def _referenced(model: type[BaseModel]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def walk(annotation) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            found.append(annotation)
        for arg in typing.get_args(annotation):
            walk(arg)

    for field in model.model_fields.values():
        walk(field.annotation)
    return found


class Page:
    """Renders each model once; a model met again (PNodeLost is a session and a PNode event) is linked."""

    def __init__(self, examples: dict[str, object]) -> None:
        self.examples = examples
        self.rendered: list[type[BaseModel]] = []

    def models(self, models: list[type[BaseModel]]) -> str:
        blocks = []
        for model in models:
            if model in self.rendered:
                blocks.append(f"#### {model.__name__}\n\nThe same message as {link(model)} above.")
                continue
            self.rendered.append(model)
            blocks.append(model_section(model, self.examples))
        return "\n\n".join(blocks)

    def types(self) -> str:
        """Every model referenced from a field and not given its own section yet, in discovery order."""
        queue, blocks = list(self.rendered), []
        while queue:
            for ref in _referenced(queue.pop(0)):
                if ref not in self.rendered:
                    self.rendered.append(ref)
                    queue.append(ref)
                    blocks.append(model_section(ref, self.examples))
        return "\n\n".join(blocks)
