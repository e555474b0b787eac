"""Session commands as the aggregate declares them: one decorated method per command model.

`@handles(PauseSession, effects=(PauseRequested, SessionPaused), allowed={RUNNING})` on
`SessionState.pause` is all the system is told about `PauseSession`:
- the states that allow it, checked here before the method runs (a refusal says the state);
- the events that show it took effect (what `computeall session pause` waits for);
- its verb, the method's name: the CLI's verb, the GraphQL mutation `pauseSession`, the
  dashboard's button;
- its arguments: the command's fields, which the method takes by name, and of `CONTEXT` what the
  method names (who sent it, the owner's running slots).
The orchestrator's decision (`decide`), the CLI's verbs, the monitor's mutations and the commands a
session allows now (`allowed_verbs`, which the dashboard reads) are all derived from `COMMANDS`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import wraps
from typing import Any, Callable

from pydantic import BaseModel

from .session_status import SessionStatus

# what a command method may take besides its command's fields: the user who sent it (a create's
# owner) and that user's running slots (`session_state.RunningSlots`: a command that makes a session
# run queues it when none is free)
CONTEXT = ("owner", "slots")


class Rejected(Exception):
    """A command not allowed in the session's state; the message is the reason the user sees."""


@dataclass(frozen=True)
class CommandSpec:
    model: type[BaseModel]  # the command (`protocol.commands`)
    method: Callable[..., list]  # the aggregate's method, unguarded: `decide` goes through the guard
    effects: tuple[type[BaseModel], ...]  # the events that show it took effect (one asked to run may queue)
    allowed: frozenset[SessionStatus]
    hint: str = ""  # appended to the refusal
    # the very command's effect is recorded already (a redelivery): it records nothing, in any state
    repeat: Callable[..., bool] | None = None
    # the reason of a refusal, when "cannot <verb> a session that is <status>" is not it
    refusal: Callable[[Any], str] | None = None

    @property
    def verb(self) -> str:
        return self.method.__name__

    @property
    def summary(self) -> str:
        """The command's docstring on one line: what the CLI's help and the GraphQL mutation say of it."""
        return " ".join((self.model.__doc__ or "").split())

    @property
    def creates(self) -> bool:
        """A command only a new session allows makes the session: it names none that exists."""
        return self.allowed == {SessionStatus.NEW}

    @property
    def fields(self) -> tuple[str, ...]:
        """The command's own fields, which the method takes by name."""
        return tuple(name for name in self.model.model_fields if name != "type")

    def guard(self, state: Any, arguments: dict[str, Any]) -> bool:
        """Whether the method is to run: False for a repeat; `Rejected` where the state does not allow it."""
        if self.repeat is not None and self.repeat(state, **arguments):
            return False
        if state.status not in self.allowed:
            raise Rejected(self.refusal(state) if self.refusal else f"cannot {self.verb} a session that is {state.status}{self.hint}")
        return True

    def decide(self, state: Any, command: BaseModel, sender: str, slots: Any) -> list:
        """The events `command`, sent by `sender` whose running slots are `slots`, records on `state`."""
        context = {"owner": sender, "slots": slots}
        parameters = inspect.signature(self.method).parameters
        arguments = {name: getattr(command, name) for name in self.fields}
        return getattr(state, self.verb)(**arguments, **{k: v for k, v in context.items() if k in parameters})


COMMANDS: dict[type[BaseModel], CommandSpec] = {}


def handles(model: type[BaseModel], *, effects: tuple[type[BaseModel], ...], allowed: set[SessionStatus], hint: str = "",
            repeat: Callable[..., bool] | None = None, refusal: Callable[[Any], str] | None = None):
    """Declare the decorated aggregate method as the one that decides `model` (see the module docstring)."""

    def register(method: Callable[..., list]) -> Callable[..., list]:
        spec = CommandSpec(model, method, effects, frozenset(allowed), hint, repeat, refusal)
        signature = inspect.signature(method)
        taken = set(signature.parameters) - {"self"}
        if not set(spec.fields) <= taken or not taken - set(spec.fields) <= set(CONTEXT):
            raise TypeError(f"{method.__qualname__} takes {sorted(taken)}: it must take {model.__name__}'s fields "
                            f"{list(spec.fields)} by name, and of {list(CONTEXT)} only what it uses")
        if model in COMMANDS:
            raise TypeError(f"{model.__name__} is handled twice: by {COMMANDS[model].method.__qualname__} and {method.__qualname__}")
        COMMANDS[model] = spec

        @wraps(method)
        def guarded(self, *args, **kwargs) -> list:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
            return method(self, *args, **kwargs) if spec.guard(self, arguments) else []

        return guarded

    return register


def decide(state: Any, command: BaseModel, sender: str, slots: Any) -> list:
    """The events a user's command records on the session `state` (`Rejected` when it may not)."""
    return COMMANDS[type(command)].decide(state, command, sender, slots)


def session_verbs() -> dict[str, CommandSpec]:
    """The commands on a session that exists, by verb, in declaration order."""
    return {spec.verb: spec for spec in COMMANDS.values() if not spec.creates}


def allowed_verbs(status: SessionStatus) -> list[str]:
    """The verbs a session in `status` takes (a repeat of one it took is no new command)."""
    return [verb for verb, spec in session_verbs().items() if status in spec.allowed]
