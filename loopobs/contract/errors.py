"""The loopobs exception tree.

Every error the loop, its tools and its model clients raise or report is a
:class:`LoopError`, so callers can catch one type, and observers receive the
same objects in ``StreamFailureContext.error``, ``TurnEndContext.error`` and
``RunEndContext.error``::

    LoopError
    ├── ModelError                  a model call failed (``retryable`` says if another try may help)
    │   ├── RateLimited             HTTP 429 / overloaded; retryable, optional ``retry_after`` (s)
    │   ├── StreamError             a broken or malformed stream
    │   └── FallbackExhausted       every model of the fallback chain failed
    ├── ToolError                   a tool call could not produce an output (``tool`` names it)
    │   ├── ToolNotFound            the model asked for a tool that is not registered
    │   ├── InvalidToolInput        the arguments failed the tool's schema
    │   ├── ToolExecutionError      the tool raised
    │   ├── ToolTimeout             the tool ran past its timeout
    │   ├── ToolWorkersExhausted    every thread for sync tools is still busy (tools hanging)
    │   └── McpError                an MCP server could not answer the call (``kind`` says why)
    ├── ContextExceeded             the conversation cannot be brought under the context window
    ├── MaxTurnsExceeded            the run used its turn budget
    ├── LoopDetected                a detector stopped a runaway loop or converged answers
    ├── BudgetExceeded              a budget limit (USD, tokens, calls, wall time) was crossed
    ├── StoreUnavailable            a shared store (Redis …) failed or passed its deadline
    │   └── BudgetUnavailable       a shared budget could not be checked (``fail_closed``)
    ├── Cancelled                   the run was cancelled
    ├── SessionBusy                 a second run was started on a session that is running
    ├── ToolNameClash               two tools have one name (also a ``ValueError``)
    ├── ProviderFailed              a context provider raised or timed out (it is skipped)
    ├── SessionClosed               an ``AgentSession`` is closed, or discarded the message
    ├── QueueFull                   a session queue with the ``reject`` policy is full
    ├── Interrupted                 ``AgentSession.interrupt()`` ended the run
    └── ResumeError                 a parked run cannot be resumed as asked
        ├── InvalidResumeInput      the input fails the parked tool's JSON Schema
        ├── CheckpointAlreadyResumed  the checkpoint was resumed before (here or elsewhere)
        └── NotYetAwake             a sleeping run was resumed before its ``wake_at``

Errors are values as well as exceptions: :meth:`LoopError.to_dict` and
:meth:`LoopError.from_dict` give the stable encoding the JSONL event log uses,
and two errors of the same class with the same fields compare equal, so a
replayed context equals the recorded one.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from loopobs.contract.isotime import parse_isoformat

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

__all__ = [
    "BudgetExceeded",
    "BudgetUnavailable",
    "Cancelled",
    "CheckpointAlreadyResumed",
    "ContextExceeded",
    "FallbackExhausted",
    "InvalidResumeInput",
    "InvalidToolInput",
    "LoopDetected",
    "Interrupted",
    "LoopError",
    "MaxTurnsExceeded",
    "McpError",
    "ModelError",
    "NotYetAwake",
    "ProviderFailed",
    "QueueFull",
    "RateLimited",
    "ResumeError",
    "SessionBusy",
    "SessionClosed",
    "StoreUnavailable",
    "StreamError",
    "ToolError",
    "ToolExecutionError",
    "ToolNameClash",
    "ToolNotFound",
    "ToolTimeout",
    "ToolWorkersExhausted",
]
_REGISTRY: dict[str, type[LoopError]] = {}


def shorten(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, saying how long it was.

    Redact before shortening, never after: a cut can split a secret.
    """
    if len(text) <= limit:
        return text
    suffix = f"… ({len(text)} chars)"
    return text[: max(0, limit - len(suffix))] + suffix


class LoopError(Exception):
    """Root of the loopobs exception tree.

    Subclasses list their structured fields in ``_fields``; each is a keyword
    argument of ``__init__`` and an attribute. ``message`` is always present.
    """

    _fields: ClassVar[tuple[str, ...]] = ()
    retryable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[_type_name(cls)] = cls

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        fields = "".join(f", {f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({self.message!r}{fields})"

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, LoopError)
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.message))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.to_dict(),))

    def to_dict(self) -> dict[str, Any]:
        """The stable JSON-ready encoding: ``{"type": ClassName, "message": ..., **fields}``.

        Tuples become lists and datetimes ISO 8601 strings. ``type`` is the bare class name
        for loopobs's own errors and ``module.QualName`` for subclasses defined elsewhere, so
        a user's class never shadows a built-in one of the same name.
        """
        out: dict[str, Any] = {"type": _type_name(type(self)), "message": self.message}
        for name in self._fields:
            out[name] = _jsonable(getattr(self, name))
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> LoopError:
        """Rebuild an error from :meth:`to_dict` output.

        Raises:
            ValueError: the ``type`` is not a known LoopError class, or a field is wrong.
        """
        try:
            cls = _REGISTRY[str(data["type"])]
        except KeyError as exc:
            raise ValueError(f"unknown error type {data.get('type')!r}") from exc
        kwargs = {k: v for k, v in data.items() if k != "type"}
        unknown = set(kwargs) - {"message", *cls._fields}
        if unknown:
            raise ValueError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
        _check_types(cls, kwargs)
        try:
            return cls._decode(kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"cannot rebuild {cls.__name__}: {exc}") from exc

    @classmethod
    def _decode(cls, kwargs: dict[str, Any]) -> LoopError:
        return cls(**kwargs)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from pydantic_core import core_schema

        def validate(value: Any) -> LoopError:
            if isinstance(value, LoopError):
                return value
            if isinstance(value, Mapping):
                return LoopError.from_dict(value)
            raise ValueError("expected a LoopError or its dict encoding")

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda e: e.to_dict(), when_used="always"
            ),
        )


_REGISTRY["LoopError"] = LoopError


def _type_name(cls: type[LoopError]) -> str:
    if cls.__module__ == "loopobs" or cls.__module__.startswith("loopobs."):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def _rebuild(data: Mapping[str, Any]) -> LoopError:
    return LoopError.from_dict(data)


_CHECKERS: dict[type[LoopError], Any] = {}


def _check_types(cls: type[LoopError], kwargs: Mapping[str, Any]) -> None:
    """Refuse ill-typed field values (from a corrupt log) instead of building a broken error.

    Checks, strictly, against the annotations of ``cls.__init__``; the values themselves are
    passed on unchanged so a rebuilt error encodes exactly as the original did.
    """
    checker = _CHECKERS.get(cls)
    if checker is None:
        checker = _CHECKERS[cls] = _build_checker(cls)
    from pydantic import ValidationError

    try:
        checker.validate_python(dict(kwargs))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(error)'}: {e['msg']}" for e in exc.errors()
        )
        raise ValueError(f"cannot rebuild {cls.__name__}: {problems}") from None


def _build_checker(cls: type[LoopError]) -> Any:
    import inspect
    import typing

    import typing_extensions  # pydantic needs its TypedDict on Python < 3.12
    from pydantic import ConfigDict, TypeAdapter

    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # unresolvable annotations on a user subclass: check nothing
        hints = {}
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        tp = hints.get(p.name, Any)
        fields[p.name] = tp if p.default is p.empty else typing_extensions.NotRequired[tp]
    make_typed_dict: Any = typing_extensions.TypedDict
    shape = make_typed_dict(f"{cls.__name__}Fields", fields)
    shape.__pydantic_config__ = ConfigDict(strict=True, extra="forbid")
    return TypeAdapter(shape)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, LoopError):
        return value.to_dict()
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    return value


class ModelError(LoopError):
    """A model call failed. ``retryable`` tells the loop whether a fallback may help."""

    _fields: ClassVar[tuple[str, ...]] = ("retryable", "status_code", "provider")

    def __init__(
        self,
        message: str = "model call failed",
        *,
        retryable: bool = False,
        status_code: int | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status_code = status_code
        self.provider = provider


class RateLimited(ModelError):
    """The provider refused the call for rate or capacity; always retryable."""

    _fields: ClassVar[tuple[str, ...]] = (*ModelError._fields, "retry_after")

    def __init__(
        self,
        message: str = "rate limited",
        *,
        retry_after: float | None = None,
        retryable: bool = True,
        status_code: int | None = 429,
        provider: str | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable, status_code=status_code, provider=provider)
        self.retry_after = retry_after


class StreamError(ModelError):
    """The response stream broke off or carried something that is not the protocol."""

    def __init__(
        self,
        message: str = "stream error",
        *,
        retryable: bool = True,
        status_code: int | None = None,
        provider: str | None = None,
    ) -> None:
        super().__init__(message, retryable=retryable, status_code=status_code, provider=provider)


class FallbackExhausted(ModelError):
    """Every model in the fallback chain failed.

    ``models`` lists them in the order tried and ``failures`` holds each
    attempt's error, in the same order (both travel in :meth:`to_dict`). A loop
    with a single model raises that model's own error instead.
    """

    _fields: ClassVar[tuple[str, ...]] = (*ModelError._fields, "models", "failures")

    def __init__(
        self,
        message: str = "",
        *,
        models: Sequence[str] = (),
        failures: Sequence[LoopError] = (),
        retryable: bool = False,
        status_code: int | None = None,
        provider: str | None = None,
    ) -> None:
        models = tuple(models)
        failures = tuple(failures)
        detail = "; ".join(
            f"{m}: {type(e).__name__}" for m, e in zip(models, failures, strict=False)
        )
        super().__init__(
            message or f"all models failed: {detail or ', '.join(models)}",
            retryable=retryable,
            status_code=status_code,
            provider=provider,
        )
        self.models = models
        self.failures = failures

    @classmethod
    def _decode(cls, kwargs: dict[str, Any]) -> LoopError:
        failures = [
            e if isinstance(e, LoopError) else LoopError.from_dict(e)
            for e in kwargs.pop("failures", ())
        ]
        return cls(failures=failures, **kwargs)


class ToolError(LoopError):
    """A tool call did not produce an output. The model receives the message as an error result."""

    _fields: ClassVar[tuple[str, ...]] = ("tool",)

    def __init__(self, message: str = "", *, tool: str = "") -> None:
        super().__init__(message or f"tool {tool!r} failed")
        self.tool = tool


class ToolNotFound(ToolError):
    """The model called a tool that is not registered; ``available`` lists the ones that are."""

    _fields: ClassVar[tuple[str, ...]] = ("tool", "available")

    def __init__(self, message: str = "", *, tool: str = "", available: Sequence[str] = ()) -> None:
        available = tuple(available)
        super().__init__(
            message
            or f"unknown tool {tool!r}; available tools: {', '.join(available) or '(none)'}",
            tool=tool,
        )
        self.available = available


class InvalidToolInput(ToolError):
    """The arguments the model gave do not match the tool's schema; ``errors`` says how."""

    _fields: ClassVar[tuple[str, ...]] = ("tool", "errors")

    def __init__(self, message: str = "", *, tool: str = "", errors: Sequence[str] = ()) -> None:
        errors = tuple(errors)
        super().__init__(
            message or f"invalid arguments for tool {tool!r}: {'; '.join(errors)}", tool=tool
        )
        self.errors = errors


class ToolExecutionError(ToolError):
    """The tool raised; ``error_type`` is the class name of what it raised."""

    _fields: ClassVar[tuple[str, ...]] = ("tool", "error_type")

    def __init__(self, message: str = "", *, tool: str = "", error_type: str = "") -> None:
        super().__init__(message, tool=tool)
        self.error_type = error_type


class ToolTimeout(ToolError):
    """The tool ran past ``timeout_s`` seconds and was cancelled."""

    _fields: ClassVar[tuple[str, ...]] = ("tool", "timeout_s")

    def __init__(self, message: str = "", *, tool: str = "", timeout_s: float = 0.0) -> None:
        super().__init__(message or f"tool {tool!r} timed out after {timeout_s:g}s", tool=tool)
        self.timeout_s = timeout_s


class ToolWorkersExhausted(ToolError):
    """A sync tool could not start: all ``workers`` threads still run earlier calls.

    Calls that timed out keep their thread until the function returns (a thread
    cannot be stopped), so this says the tools hang, not that this call did.
    """

    _fields: ClassVar[tuple[str, ...]] = ("tool", "workers")

    def __init__(self, message: str = "", *, tool: str = "", workers: int = 0) -> None:
        super().__init__(
            message
            or f"tool {tool!r} did not run: all {workers} worker threads for sync tools "
            "are still busy with earlier calls",
            tool=tool,
        )
        self.workers = workers


class McpError(ToolError):
    """An MCP server could not answer a tool call; ``kind`` says why.

    ``kind``: ``server_down`` (it could not be started or reached; ``server`` is
    marked down), ``connection_closed`` (it went away mid-call, a crash),
    ``protocol`` (a JSON-RPC error, ``code`` set), ``timeout``, ``tool_error``
    (the tool's own ``isError`` result).
    """

    _fields: ClassVar[tuple[str, ...]] = ("tool", "server", "kind", "code")

    def __init__(
        self,
        message: str = "",
        *,
        tool: str = "",
        server: str = "",
        kind: str = "protocol",
        code: int | None = None,
    ) -> None:
        super().__init__(
            message or f"MCP server {server!r} failed the call of {tool!r} ({kind})", tool=tool
        )
        self.server = server
        self.kind = kind
        self.code = code


class ToolNameClash(LoopError, ValueError):
    """Two tools (the loop's own, or MCP servers') have the same name.

    Give the server a ``prefix`` (its tools are then named ``<prefix>_<tool>``).
    """

    _fields: ClassVar[tuple[str, ...]] = ("tool",)

    def __init__(self, message: str = "", *, tool: str = "") -> None:
        super().__init__(
            message
            or f"two tools are named {tool!r}; give an MCP server a "
            "prefix (McpStdio(..., prefix='fs') names its tools fs_<tool>)"
        )
        self.tool = tool


class ProviderFailed(LoopError):
    """A context provider raised or ran past its timeout; the turn goes on without it."""

    _fields: ClassVar[tuple[str, ...]] = ("context_provider", "error_type")

    def __init__(
        self, message: str = "", *, context_provider: str = "", error_type: str = ""
    ) -> None:
        super().__init__(message or f"context provider {context_provider!r} failed ({error_type})")
        self.context_provider = context_provider
        self.error_type = error_type


class SessionClosed(LoopError):
    """The session is closed (or the call waited on was discarded by a reset or close)."""


class QueueFull(LoopError):
    """A session queue with the ``reject`` policy is full; the item was not queued."""

    _fields: ClassVar[tuple[str, ...]] = ("queue", "capacity")

    def __init__(self, message: str = "", *, queue: str = "", capacity: int = 0) -> None:
        super().__init__(message or f"the session's {queue} queue is full ({capacity} items)")
        self.queue = queue
        self.capacity = capacity


class Interrupted(LoopError):
    """The session's current turn was interrupted (``AgentSession.interrupt()``)."""

    def __init__(self, message: str = "interrupted") -> None:
        super().__init__(message)


class ContextExceeded(LoopError):
    """The estimated context (``used`` tokens) cannot be brought under ``limit``."""

    _fields: ClassVar[tuple[str, ...]] = ("used", "limit")

    def __init__(self, message: str = "", *, used: int = 0, limit: int = 0) -> None:
        super().__init__(message or f"context of {used} tokens exceeds the window of {limit}")
        self.used = used
        self.limit = limit


class MaxTurnsExceeded(LoopError):
    """The run reached ``max_turns`` turns without an answer."""

    _fields: ClassVar[tuple[str, ...]] = ("max_turns",)

    def __init__(self, message: str = "", *, max_turns: int = 0) -> None:
        super().__init__(message or f"no answer within {max_turns} turns")
        self.max_turns = max_turns


class LoopDetected(LoopError):
    """A detector stopped the run; ``pattern`` names what repeated."""

    _fields: ClassVar[tuple[str, ...]] = ("pattern",)

    def __init__(self, message: str = "", *, pattern: str = "") -> None:
        super().__init__(message or f"loop detected: {pattern}")
        self.pattern = pattern


class BudgetExceeded(LoopError):
    """A budget stopped the run: ``limit`` (``usd``, ``total_tokens``, …) reached ``value``,
    over its setting ``budget``, in ``scope`` (``run`` or ``session``).

    When raised before a model call, ``value`` includes that call's estimate: the
    call was not made.
    """

    _fields: ClassVar[tuple[str, ...]] = ("limit", "value", "budget", "scope")

    def __init__(
        self,
        message: str = "",
        *,
        limit: str = "",
        value: float = 0.0,
        budget: float = 0.0,
        scope: str = "run",
    ) -> None:
        super().__init__(message or f"{scope} budget exceeded: {limit} {value:g} > {budget:g}")
        self.limit = limit
        self.value = value
        self.budget = budget
        self.scope = scope


class StoreUnavailable(LoopError):
    """A shared store (Redis, a database) did not answer in time or failed: ``store`` names it.

    Raised by the fleet parts (shared budgets, session stores, checkpoint claims);
    ``reason`` says what failed, never a password.
    """

    _fields: ClassVar[tuple[str, ...]] = ("store", "reason")

    def __init__(self, message: str = "", *, store: str = "", reason: str = "") -> None:
        super().__init__(message or f"store {store} unavailable: {reason}")
        self.store = store
        self.reason = reason


class BudgetUnavailable(StoreUnavailable):
    """A shared budget could not be checked (its store is down or slow) and the policy is
    ``fail_closed``: the model call was refused rather than made unguarded."""


class Cancelled(LoopError):
    """The run (or the model call or tool reporting it) was cancelled."""

    def __init__(self, message: str = "cancelled") -> None:
        super().__init__(message)


class SessionBusy(LoopError):
    """A run was started on a session that already has a run in progress."""

    _fields: ClassVar[tuple[str, ...]] = ("session_id",)

    def __init__(self, message: str = "", *, session_id: str = "") -> None:
        super().__init__(
            message
            or f"session {session_id} already has a run in progress; "
            "use a new session or wait for that run to finish"
        )
        self.session_id = session_id


class ResumeError(LoopError):
    """A parked run cannot be resumed as asked."""


class InvalidResumeInput(ResumeError):
    """The resume input does not satisfy the parked tool's JSON Schema; ``errors`` lists why.

    Each entry names a place in the input (a JSON path) and the schema rule it
    breaks, never the rejected value: the input may be huge, or private. The
    message and ``errors`` are bounded (:data:`MAX_ERRORS` entries of at most
    :data:`MAX_ERROR_CHARS` characters), whatever is passed in.
    """

    _fields: ClassVar[tuple[str, ...]] = ("errors",)

    MAX_ERRORS: ClassVar[int] = 20
    MAX_ERROR_CHARS: ClassVar[int] = 200
    _MAX_MESSAGE_CHARS: ClassVar[int] = 1000

    def __init__(self, message: str = "", *, errors: Sequence[str] = ()) -> None:
        kept = tuple(shorten(str(e), self.MAX_ERROR_CHARS) for e in errors[: self.MAX_ERRORS])
        if len(errors) > self.MAX_ERRORS:
            kept = (*kept[:-1], f"… and {len(errors) - self.MAX_ERRORS + 1} more")
        text = message or f"resume input is invalid: {'; '.join(kept)}"
        super().__init__(shorten(text, self._MAX_MESSAGE_CHARS))
        self.errors = kept

    @classmethod
    def from_schema_errors(cls, errors: Iterable[Any]) -> InvalidResumeInput | None:
        """The error for a JSON Schema validator's ``iter_errors`` output, or None if it is empty.

        See :func:`schema_error_reasons`.
        """
        reasons = schema_error_reasons(errors)
        return cls(errors=reasons) if reasons else None


def schema_error_reasons(errors: Iterable[Any]) -> list[str]:
    """``path: fails 'keyword'`` for each of a JSON Schema validator's errors, sorted, bounded.

    Reads only where each error is (``absolute_path``) and which keyword failed
    (``validator``, with the schema's expected type or missing property names),
    so no value of the input reaches the text; stops after
    ``InvalidResumeInput.MAX_ERRORS`` errors, so a huge input costs no more than that.
    """
    limit = InvalidResumeInput.MAX_ERRORS
    reasons: list[str] = []
    for error in errors:
        reasons.append(f"{_json_path(error.absolute_path)}: fails {_keyword(error)}")
        if len(reasons) > limit:
            return [*sorted(reasons[: limit - 1]), "… and more"]
    return sorted(reasons)


def _json_path(parts: Iterable[Any]) -> str:
    """``a/0/b`` for a path into the input; long keys (input data too) are cut short."""
    out = [shorten(str(p), 40) for p in parts]
    return shorten("/".join(out), 120) if out else "(input)"


def _keyword(error: Any) -> str:
    keyword = str(getattr(error, "validator", "") or "the schema")
    if keyword == "required":
        # The schema's own property names, not the input's: say which are missing.
        required = getattr(error, "validator_value", ())
        instance = getattr(error, "instance", None)
        if isinstance(required, list) and isinstance(instance, dict):
            missing = [str(r) for r in required if r not in instance][:5]
            if missing:
                return shorten(f"'required' (missing {', '.join(missing)})", 120)
    if keyword == "additionalProperties":
        allowed = getattr(error, "schema", {}).get("properties", {})
        instance = getattr(error, "instance", None)
        if isinstance(instance, dict):
            extra = [shorten(str(k), 40) for k in instance if k not in allowed][:5]
            if extra:
                return shorten(f"'additionalProperties' (unexpected {', '.join(extra)})", 160)
    if keyword == "type":
        expected = getattr(error, "validator_value", None)
        if isinstance(expected, (str, list)):
            return shorten(f"'type' (expected {expected})", 120)
    return f"'{shorten(keyword, 40)}'"


class CheckpointAlreadyResumed(ResumeError):
    """The checkpoint of run ``run_id`` was already resumed (here, or where a claim hook says).

    A checkpoint resumes at most once, so a parked call's side effects happen once.
    """

    _fields: ClassVar[tuple[str, ...]] = ("run_id",)

    def __init__(self, message: str = "", *, run_id: str = "") -> None:
        super().__init__(
            message
            or f"the checkpoint of run {run_id} was already resumed; a checkpoint resumes once"
        )
        self.run_id = run_id


class NotYetAwake(ResumeError):
    """A sleeping run was resumed before ``wake_at`` (an aware UTC datetime)."""

    _fields: ClassVar[tuple[str, ...]] = ("wake_at",)

    def __init__(self, message: str = "", *, wake_at: _dt.datetime | str) -> None:
        if isinstance(wake_at, str):
            wake_at = parse_isoformat(wake_at)
        super().__init__(message or f"the run sleeps until {wake_at.isoformat()}")
        self.wake_at = wake_at
