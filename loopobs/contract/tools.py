"""Tools: the ``@tool`` decorator, and what a tool returns (``Output``, ``Suspend``, ``Sleep``).

A tool is a sync or async function. Its JSON Schema comes from the type hints
(plain types and pydantic models), its description from the docstring.
Arguments are validated before the call; a tool may return a plain value (an
output), an :class:`Output` with a display hint, or ask to park the run:

- :class:`Suspend` waits for a person (or, with :meth:`Suspend.on_signal`, an
  external system) to supply an input that satisfies ``input_schema``;
- :class:`Sleep` waits until an instant (never a duration: an instant replays
  identically, a duration needs a second clock read).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as _dt
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, overload

from loopobs.contract.errors import InvalidToolInput
from loopobs.contract.events import DisplayHint, McpCallInfo, ToolAnnotations
from loopobs.contract.model import ToolDefinition

if TYPE_CHECKING:
    # At run time pydantic is imported where a tool is built or a non-text result is
    # rendered: `import loopobs` does not need it.
    from pydantic import BaseModel, TypeAdapter

__all__ = [
    "Output",
    "Sleep",
    "Suspend",
    "Tool",
    "ToolCallScope",
    "ToolReturn",
    "current_tool_call",
    "render_result",
    "tool",
]


@dataclass(slots=True)
class ToolCallScope:
    """The tool call attempt running on this task; a tool may record details on it.

    The tool phase opens one per attempt (each attempt runs in its own task) and
    reads it back for ``on_tool_post``: an MCP tool records the request's
    protocol details in :attr:`mcp`.
    """

    tool: str
    tool_call_id: str
    mcp: McpCallInfo | None = None


_CALL: contextvars.ContextVar[ToolCallScope | None] = contextvars.ContextVar(
    "loopobs_tool_call", default=None
)


def current_tool_call() -> ToolCallScope | None:
    """The tool call attempt this code runs in (None outside a tool call)."""
    return _CALL.get()


def enter_tool_call(scope: ToolCallScope) -> None:
    """Make ``scope`` the current call of this task (the tool phase's own use)."""
    _CALL.set(scope)


@dataclass(frozen=True, slots=True)
class Output:
    """A tool's normal result, with an optional rendering hint for front ends."""

    value: Any
    display_hint: DisplayHint | None = None


@dataclass(frozen=True, slots=True)
class Suspend:
    """Park the run until someone supplies an input matching ``input_schema`` (a JSON Schema).

    ``reason`` is what the approval inbox shows. ``kind`` is ``human`` unless
    built with :meth:`on_signal`.
    """

    reason: str
    input_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    kind: Literal["human", "signal"] = "human"

    def on_signal(self) -> Suspend:
        """The same suspension, waiting on an external system rather than a person."""
        return replace(self, kind="signal")


@dataclass(frozen=True, slots=True)
class Sleep:
    """Park the run until ``wake_at``, an aware datetime. Build it with :meth:`until`."""

    wake_at: _dt.datetime

    def __post_init__(self) -> None:
        if self.wake_at.tzinfo is None:
            raise ValueError("Sleep needs an aware datetime (with a timezone), not a naive one")

    @classmethod
    def until(cls, instant: _dt.datetime) -> Sleep:
        """Park until ``instant`` (aware; stored in UTC)."""
        if instant.tzinfo is None:
            raise ValueError("Sleep.until needs an aware datetime (with a timezone)")
        return cls(instant.astimezone(_dt.timezone.utc))


ToolReturn = Output | Suspend | Sleep


def render_result(value: Any) -> str:
    """The text the model receives for a tool's output value."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    from pydantic import BaseModel
    from pydantic_core import PydanticSerializationError

    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(_any_adapter().dump_python(value, mode="json"), ensure_ascii=False)
    except (TypeError, ValueError, PydanticSerializationError):
        return str(value)


@functools.cache
def _any_adapter() -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(Any)


class Tool:
    """A function the model can call, with its schema and argument validation.

    Build one with :func:`tool`. Calling :meth:`invoke` validates the arguments
    (raising :class:`~loopobs.contract.errors.InvalidToolInput`), runs the function
    (sync ones in a worker thread, so they never block the event loop) and
    returns an :class:`Output`, :class:`Suspend` or :class:`Sleep`.

    ``annotations`` (from ``read_only``, ``idempotent``, ``side_effecting``, ``waits``)
    travel on the tool's ``on_tool_call_received`` events, where the detectors read
    them; ``None`` when nothing was declared.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None = None,
        read_only: bool | None = None,
        idempotent: bool | None = None,
        side_effecting: bool | None = None,
        waits: bool | None = None,
    ) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        self.description = description if description is not None else inspect.getdoc(fn) or ""
        self.timeout = timeout
        self.annotations = _annotations(read_only, idempotent, side_effecting, waits)
        self._is_async = inspect.iscoroutinefunction(fn)
        self._model = _arguments_model(fn, self.name)
        self.parameters: Mapping[str, Any] = _clean_schema(self._model.model_json_schema())
        self.definition = ToolDefinition(
            name=self.name, description=self.description, parameters=self.parameters
        )

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """Check ``arguments`` against the schema; return the keyword arguments for the call.

        Raises:
            InvalidToolInput: naming every field that is wrong.
        """
        from pydantic import ValidationError

        try:
            model = self._model.model_validate(dict(arguments))
        except ValidationError as exc:
            errors = [
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors()
            ]
            raise InvalidToolInput(tool=self.name, errors=errors) from None
        return {name: getattr(model, name) for name in type(model).model_fields}

    async def invoke(
        self,
        arguments: Mapping[str, Any],
        *,
        run_sync: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
    ) -> ToolReturn:
        """Validate ``arguments`` and run the tool.

        A sync function runs through ``run_sync`` (the loop passes its own worker
        threads); without one, on a thread of asyncio's default executor.
        """
        kwargs = self.validate(arguments)
        if self._is_async:
            value = await self.fn(**kwargs)
        else:
            call = functools.partial(self.fn, **kwargs)
            value = await (run_sync(call) if run_sync is not None else asyncio.to_thread(call))
        if isinstance(value, (Output, Suspend, Sleep)):
            return value
        return Output(value)


def _annotations(
    read_only: bool | None, idempotent: bool | None, side_effecting: bool | None, waits: bool | None
) -> ToolAnnotations | None:
    if read_only is None and idempotent is None and side_effecting is None and waits is None:
        return None
    if read_only and side_effecting:
        raise ValueError("a tool cannot be both read_only and side_effecting")
    if side_effecting is None and read_only is not None:
        side_effecting = not read_only
    if idempotent is None and read_only:
        idempotent = True
    return ToolAnnotations(
        read_only=read_only, idempotent=idempotent, side_effecting=side_effecting, waits=waits
    )


def _arguments_model(fn: Callable[..., Any], name: str) -> type[BaseModel]:
    import pydantic

    signature = inspect.signature(fn)
    hints = _type_hints(fn)
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, default)
    model: type[BaseModel] = pydantic.create_model(
        f"{name}_arguments",
        __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
        **fields,
    )
    return model


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    import typing

    try:
        return typing.get_type_hints(fn)
    except (NameError, TypeError):  # unresolved forward references: fall back to Any
        return {}


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    schema = dict(schema)
    schema.pop("title", None)
    props = schema.get("properties")
    if isinstance(props, dict):
        schema["properties"] = {
            k: {kk: vv for kk, vv in v.items() if kk != "title"} if isinstance(v, dict) else v
            for k, v in props.items()
        }
    schema.setdefault("additionalProperties", False)
    return schema


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    read_only: bool | None = None,
    idempotent: bool | None = None,
    side_effecting: bool | None = None,
    waits: bool | None = None,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    read_only: bool | None = None,
    idempotent: bool | None = None,
    side_effecting: bool | None = None,
    waits: bool | None = None,
) -> Tool | Callable[[Callable[..., Awaitable[Any] | Any]], Tool]:
    """Turn a function into a :class:`Tool`: ``@tool`` or ``@tool(name=..., read_only=True)``.

    ``timeout`` (seconds) overrides the loop's ``tool_timeout`` for this tool.
    ``read_only``, ``idempotent``, ``side_effecting`` and ``waits`` declare what the
    tool does (:class:`~loopobs.contract.events.ToolAnnotations`); ``read_only=True``
    implies idempotent and not side-effecting. The repetition detector uses them:
    a successful side-effecting call with new arguments is progress, and a waiting
    tool paces polling.
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "timeout": timeout,
        "read_only": read_only,
        "idempotent": idempotent,
        "side_effecting": side_effecting,
        "waits": waits,
    }
    if fn is not None:
        return Tool(fn, **options)

    def wrap(f: Callable[..., Any]) -> Tool:
        return Tool(f, **options)

    return wrap
