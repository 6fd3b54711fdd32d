"""Checkpoints of parked runs: what a suspended or sleeping run needs to resume.

The classes are pydantic models (a checkpoint serialises to JSON and back), so
this module loads pydantic; ``loopobs`` and :mod:`loopobs.loop.run` export them
lazily, and the loop imports this module only when a run parks or resumes.
"""

from __future__ import annotations

import datetime as _dt
import sys
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from loopobs.contract.model import Message, ToolCallPart, ToolResultMessage

__all__ = ["Checkpoint", "ParkedCall"]


class ParkedCall(BaseModel):
    """A tool call that parked the run, as recorded in a checkpoint."""

    # defer_build: the validator is built at first use, not when this module is imported.
    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    name: str
    arguments: dict[str, Any]
    attempt: int = 0


class Checkpoint(BaseModel):
    """Everything needed to resume a parked run, in another process if need be.

    Serialise with ``checkpoint.model_dump_json()`` and read back with
    ``Checkpoint.model_validate_json(text)``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    version: Literal[1] = 1
    run_id: uuid.UUID
    session_id: uuid.UUID
    turn: int
    """The session's next turn number."""
    model: str
    messages: list[Message]
    kind: Literal["suspend", "sleep"]
    parked: ParkedCall
    """The call that parked the run: it receives the resume input, or runs again after waking."""
    rerun: list[ParkedCall] = Field(default_factory=list)
    """Other calls of the same wave that parked too: they run again on resume."""
    results: list[ToolResultMessage | None]
    """Tool results of the parked wave, in the model's order (None where a call is parked)."""
    reason: str = ""
    input_schema: dict[str, Any] | None = None
    suspension_kind: Literal["human", "signal"] = "human"
    wake_at: _dt.datetime | None = None
    trace_context: dict[str, str] | None = None
    """W3C trace context (``traceparent``) of the parked run's span, for the resumed run's link."""

    @staticmethod
    def part(call: ParkedCall) -> ToolCallPart:
        """The model's tool call this record stands for."""
        return ToolCallPart(id=call.id, name=call.name, arguments=call.arguments)


def _bind_where_annotated() -> None:
    # These modules name the classes in (string) annotations but import them only for
    # type checkers, so that importing them does not load pydantic; binding the names
    # there once the classes exist lets typing.get_type_hints resolve those annotations.
    names = {
        "loopobs.loop.run": (Checkpoint, ParkedCall),
        "loopobs.loop.loop": (Checkpoint,),
        "loopobs.loop.parking": (Checkpoint, ParkedCall),
        "loopobs.loop.driver": (Checkpoint,),
    }
    for module_name, classes in names.items():
        module = sys.modules.get(module_name)
        if module is not None:
            for cls in classes:
                vars(module).setdefault(cls.__name__, cls)


_bind_where_annotated()
