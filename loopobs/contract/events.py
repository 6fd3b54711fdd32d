"""The event contract: one frozen context class per observer hook.

Every context is a frozen, slotted, keyword-only dataclass carrying ``run_id``
(the UUID of the ``run()`` call it belongs to) and ``time_ns`` (wall clock,
``time.time_ns()``, when the event happened). Observers shared by many
concurrent runs key their state on ``run_id``; a recorded event log replays into
identical telemetry because every timestamp travels in the event.

Each hook ``on_<name>`` has its context class ``<Name>Context``; the same thing
carries the same field name in every context (``tool_call_id``, ``turn``,
``attempt``), and closed sets of values are typed (:class:`RunStatus`,
:data:`LoopAction`, :data:`ConvergenceAction`, :data:`ToolOutcomeKind`).
:data:`CONTEXT_TYPES` maps each hook name to its context class, and
:data:`HOOKS` lists the hooks in contract order.

Token counts follow OpenTelemetry's GenAI conventions: input tokens include
cached ones (read and written), output tokens include reasoning ones.
"""

from __future__ import annotations

import datetime as _dt
import enum
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args
from uuid import UUID

from loopobs.contract.errors import LoopError
from loopobs.contract.isotime import parse_isoformat

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler
    from pydantic_core import CoreSchema

__all__ = [
    "CONTEXT_TYPES",
    "HOOKS",
    "BackpressureContext",
    "BudgetExceededContext",
    "BudgetLimit",
    "BudgetUnpricedContext",
    "CompactionContext",
    "ContextProviderContext",
    "ConvergenceAction",
    "ConvergenceDetectedContext",
    "DisplayHint",
    "DisplayKind",
    "EventContext",
    "FallbackContext",
    "HookName",
    "LoopAction",
    "LoopDetectedContext",
    "McpCallInfo",
    "ModelSwitchedContext",
    "ResponseContext",
    "RunEndContext",
    "RunStartContext",
    "RunStatus",
    "SESSION_HOOKS",
    "SessionResetContext",
    "SharedBudgetContext",
    "SharedBudgetOperation",
    "SharedBudgetOutcome",
    "SleepContext",
    "StreamFailureContext",
    "StreamStartContext",
    "StreamSuccessContext",
    "SuspendedContext",
    "TextDeltaContext",
    "ThinkingDeltaContext",
    "ToolAnnotations",
    "ToolCallReceivedContext",
    "ToolOutcomeKind",
    "ToolPostContext",
    "ToolPreContext",
    "TurnEndContext",
    "TurnStartContext",
    "Usage",
    "UsageDetail",
]

# Pydantic (used by the JSONL replay) reads this from stdlib dataclasses: a
# recorded line with a field the contract does not have is malformed.
# Infinite or NaN floats are written as the JSON extensions ``Infinity``/``NaN`` (which
# Python's json reads back) rather than ``null``, which would not replay into a float field.
_STRICT_FIELDS: Mapping[str, Any] = {"extra": "forbid", "ser_json_inf_nan": "constants"}


class _IsoDatetime:
    """pydantic marker: a datetime travels as ``datetime.isoformat()`` text, exactly.

    pydantic's own encoding rounds the UTC offset to whole minutes (zones such as local
    mean time have offsets in seconds), so a replayed ``wake_at`` would be another instant.
    """

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: type[Any], handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from pydantic_core import core_schema

        def validate(value: Any) -> _dt.datetime:
            if isinstance(value, _dt.datetime):
                return value
            if isinstance(value, str):
                return parse_isoformat(value)
            raise ValueError("expected a datetime or ISO 8601 text")

        return core_schema.no_info_plain_validator_function(
            validate,
            serialization=core_schema.plain_serializer_function_ser_schema(
                _dt.datetime.isoformat, when_used="json"
            ),
        )


class RunStatus(str, enum.Enum):
    """How a run ended."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SUSPENDED = "suspended"
    SLEEPING = "sleeping"
    MAX_TURNS = "max_turns"
    LOOP_DETECTED = "loop_detected"
    CONVERGED = "converged"
    INTERRUPTED = "interrupted"
    BUDGET_EXCEEDED = "budget_exceeded"

    def __str__(self) -> str:
        return self.value


LoopAction = Literal["warn", "stop"]
"""What a repetition detector asks of the loop: a note to the model, or the end of the run."""

ConvergenceAction = Literal["stop", "warn", "compact", "ask_user", "switch_phase"]
"""What the loop should do about converged answers."""


HookName = Literal[
    "on_run_start",
    "on_run_end",
    "on_turn_start",
    "on_turn_end",
    "on_stream_start",
    "on_stream_success",
    "on_stream_failure",
    "on_response",
    "on_text_delta",
    "on_thinking_delta",
    "on_tool_call_received",
    "on_tool_pre",
    "on_tool_post",
    "on_compaction",
    "on_fallback",
    "on_model_switched",
    "on_loop_detected",
    "on_convergence_detected",
    "on_suspended",
    "on_sleep",
    "on_context_provider",
    "on_backpressure",
    "on_session_reset",
    "on_budget_exceeded",
    "on_budget_unpriced",
    "on_shared_budget",
]


UsageDetail = Literal["cache_read", "cache_write", "reasoning"]
"""A detail count of :class:`Usage` a provider may or may not report."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token usage of one model call, or summed over a turn or run.

    ``input_tokens`` includes ``cache_read_input_tokens`` and
    ``cache_write_input_tokens``; ``output_tokens`` includes
    ``reasoning_output_tokens`` (OpenTelemetry GenAI counting).
    """

    __pydantic_config__: ClassVar[Mapping[str, Any]] = _STRICT_FIELDS

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_output_tokens: int = 0
    details: tuple[UsageDetail, ...] = field(default=(), compare=False)
    """Which of the three detail counts the provider reported (a reported 0 is a 0,
    an unreported count is unknown). Not part of equality: it says how the counts
    were reported, not what they are."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_input_tokens=self.cache_read_input_tokens + other.cache_read_input_tokens,
            cache_write_input_tokens=self.cache_write_input_tokens + other.cache_write_input_tokens,
            reasoning_output_tokens=self.reasoning_output_tokens + other.reasoning_output_tokens,
            details=tuple(sorted(set(self.details) | set(other.details))),
        )


DisplayKind = Literal["text", "diff", "json", "code", "suppress", "markdown"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DisplayHint:
    """How a front end may render a tool's output. Advisory: the loop never reads it.

    ``language`` is set only for ``code``. Build
    one with the constructors: ``DisplayHint.code("python")``, ``DisplayHint.diff()``.
    """

    __pydantic_config__: ClassVar[Mapping[str, Any]] = _STRICT_FIELDS

    type: DisplayKind = "text"
    language: str | None = None

    def __post_init__(self) -> None:
        if (self.type == "code") != (self.language is not None):
            raise ValueError("DisplayHint: 'language' is required for code and only for code")

    @classmethod
    def text(cls) -> DisplayHint:
        """Plain text (the default rendering)."""
        return cls(type="text")

    @classmethod
    def diff(cls) -> DisplayHint:
        """A unified diff."""
        return cls(type="diff")

    @classmethod
    def json(cls) -> DisplayHint:
        """A JSON document."""
        return cls(type="json")

    @classmethod
    def code(cls, language: str) -> DisplayHint:
        """Source code in ``language``."""
        return cls(type="code", language=language)

    @classmethod
    def suppress(cls) -> DisplayHint:
        """Hide the preview; the model still receives the full output."""
        return cls(type="suppress")

    @classmethod
    def markdown(cls) -> DisplayHint:
        """Markdown text."""
        return cls(type="markdown")


@dataclass(frozen=True, slots=True, kw_only=True)
class EventContext:
    """Fields every context carries."""

    __pydantic_config__: ClassVar[Mapping[str, Any]] = _STRICT_FIELDS
    hook: ClassVar[HookName]

    run_id: UUID
    """The ``run()`` call this event belongs to."""
    time_ns: int
    """Wall-clock time of the event, ``time.time_ns()``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStartContext(EventContext):
    """A run begins."""

    hook: ClassVar[HookName] = "on_run_start"
    session_id: UUID
    agent: str = "agent"
    model: str = ""
    resumed_from: UUID | None = None
    """For a resumed run, the ``run_id`` of the run that parked."""
    instructions: str = ""
    """The system prompt, if any. Content: exporters leave it out of telemetry unless
    content capture is on."""
    attribution: Mapping[str, str] = field(default_factory=dict)
    """Who the run is for (addition), e.g. ``{"tenant": "acme", "user": "u-17"}``
    (``Conversation(attribution=...)``); a shared budget counts the run's calls against each.
    Values are unbounded ids: exporters put them on spans and the event log, and on
    metric labels only when allow-listed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEndContext(EventContext):
    """A run ends: how (``status``), and the run's turn and token totals, and its cost.

    ``success`` is true for a run that completed or parked (suspended, sleeping).
    ``cost_usd`` (addition) is the run's model calls priced in USD; ``None`` when the
    cost is unknown (some call's model has no price, or nobody priced the calls).
    """

    hook: ClassVar[HookName] = "on_run_end"
    success: bool
    error: LoopError | None = None
    total_turns: int = 0
    duration_ms: float = 0.0
    status: RunStatus = RunStatus.COMPLETED
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnStartContext(EventContext):
    """A turn (one model round trip and the tool phase it asks for) begins."""

    hook: ClassVar[HookName] = "on_turn_start"
    turn: int
    query: str = ""
    """The latest user message of the conversation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnEndContext(EventContext):
    """A turn ends; tokens and ``cost_usd`` (addition) are those of its successful model call.

    ``cost_usd`` is ``None`` when the call's price is unknown; ``0.0`` for a turn
    with no model call (re-running parked tools).
    """

    hook: ClassVar[HookName] = "on_turn_end"
    turn: int
    success: bool
    error: LoopError | None = None
    duration_ms: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamStartContext(EventContext):
    """A model call attempt begins (one per attempt, fallbacks included)."""

    hook: ClassVar[HookName] = "on_stream_start"
    turn: int
    model: str
    provider: str = ""
    attempt: int = 0
    request_options: Mapping[str, Any] = field(default_factory=dict)
    """The options sent with the request (``AgentLoop(request_options=...)``)."""
    server_address: str | None = None
    """The host the client calls, when it has one (``LlmClient.server_address``)."""
    server_port: int | None = None
    stream: bool | None = None
    """Whether the request asks for a streamed response (``gen_ai.request.stream``);
    ``None`` when the emitter learns it only when the call ends (then the end says)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSuccessContext(EventContext):
    """A model call attempt succeeded: its timing, finish and token counts.

    ``time_to_first_token_ms`` is None when the stream delivered no event before
    its end; the cache and reasoning counts are included in the input and output
    counts. ``cost_usd`` (addition) is the call priced in USD from its usage;
    ``None`` when the model has no known price — never 0 for unknown.
    ``usage_reported`` is False when the model reported no usage at all (a stream
    without ``stream_options.include_usage``): the token counts are then 0 and mean
    unknown, and the cost is unknown.
    """

    hook: ClassVar[HookName] = "on_stream_success"
    turn: int
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    provider: str = ""
    attempt: int = 0
    duration_ms: float = 0.0
    time_to_first_token_ms: float | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    response_model: str | None = None
    cache_read_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_output_tokens: int = 0
    usage_details: tuple[UsageDetail, ...] = ()
    """Which detail counts the provider reported (see :attr:`Usage.details`)."""
    server_address: str | None = None
    server_port: int | None = None
    service_tier: str | None = None
    """The service tier that served the call, when the provider says (OpenAI)."""
    system_fingerprint: str | None = None
    """The backend configuration's fingerprint, when the provider says (OpenAI)."""
    cost_usd: float | None = None
    usage_reported: bool = True
    stream: bool | None = None
    """Whether the response came streamed, when the emitter learnt it during the call;
    ``None``: as ``on_stream_start`` said."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamFailureContext(EventContext):
    """A model call attempt failed with ``error``."""

    hook: ClassVar[HookName] = "on_stream_failure"
    turn: int
    model: str
    error: LoopError
    provider: str = ""
    attempt: int = 0
    duration_ms: float = 0.0
    server_address: str | None = None
    server_port: int | None = None
    stream: bool | None = None
    """Whether the response was streamed, when the emitter learnt it during the call;
    ``None``: as ``on_stream_start`` said."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseContext(EventContext):
    """The turn's successful model call is complete.

    ``text`` is the assistant's visible text; ``tool_calls`` is how many tool calls
    the response asks for (0 for a final answer).
    """

    hook: ClassVar[HookName] = "on_response"
    turn: int
    text: str = ""
    usage: Usage | None = None
    tool_calls: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TextDeltaContext(EventContext):
    """One streamed chunk of visible text, verbatim."""

    hook: ClassVar[HookName] = "on_text_delta"
    turn: int
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ThinkingDeltaContext(EventContext):
    """One streamed chunk of reasoning; ``""`` means the provider redacted it."""

    hook: ClassVar[HookName] = "on_thinking_delta"
    turn: int
    delta: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolAnnotations:
    """What a tool is known to do; ``None`` means unknown.

    - ``read_only``: the tool changes nothing (a read, a search, a status query).
    - ``idempotent``: calling it again with the same arguments has no further effect.
    - ``side_effecting``: the tool changes something (a write, a commit, a message sent).
    - ``waits``: the tool waits (a sleep, a long poll): time spent in it paces polling.

    :meth:`from_mcp` reads MCP's tool annotations (``readOnlyHint``,
    ``destructiveHint``, ``idempotentHint``).
    """

    __pydantic_config__: ClassVar[Mapping[str, Any]] = _STRICT_FIELDS

    read_only: bool | None = None
    idempotent: bool | None = None
    side_effecting: bool | None = None
    waits: bool | None = None

    @classmethod
    def from_mcp(cls, hints: Mapping[str, Any]) -> ToolAnnotations:
        """The annotations of an MCP tool, from its ``annotations`` object.

        ``readOnlyHint`` sets ``read_only`` (and, when true, ``side_effecting=False``);
        ``readOnlyHint: false`` means the tool may change its environment.
        """
        read_only = hints.get("readOnlyHint")
        idempotent = hints.get("idempotentHint")
        ro = read_only if isinstance(read_only, bool) else None
        return cls(
            read_only=ro,
            idempotent=idempotent if isinstance(idempotent, bool) else None,
            side_effecting=None if ro is None else not ro,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallReceivedContext(EventContext):
    """The model asked for a tool call; fires once per call, before any attempt."""

    hook: ClassVar[HookName] = "on_tool_call_received"
    turn: int
    tool: str
    tool_call_id: str
    input: Mapping[str, Any]
    annotations: ToolAnnotations | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPreContext(EventContext):
    """A tool call attempt begins; ``attempt`` counts re-runs of a parked call from 0."""

    hook: ClassVar[HookName] = "on_tool_pre"
    turn: int
    tool: str
    tool_call_id: str
    attempt: int = 0
    tool_description: str = ""
    tool_type: str = "function"
    """``function``: a tool the loop runs client-side."""


ToolOutcomeKind = Literal["output", "error", "suspend", "sleep"]


@dataclass(frozen=True, slots=True, kw_only=True)
class McpCallInfo:
    """What an MCP tool call did on the wire; set on :class:`ToolPostContext` for MCP tools.

    The fields are the MCP semantic-convention attributes of the ``execute_tool``
    span: ``method`` (``mcp.method.name``), ``protocol_version``, ``session_id``
    (HTTP servers only), ``request_id`` (``jsonrpc.request.id``), ``status_code``
    (``rpc.response.status_code``, a JSON-RPC error code, when the server answered
    with an error), ``transport`` (``network.transport``: ``pipe`` for stdio,
    ``tcp`` for HTTP), ``server_address``/``server_port`` (HTTP), and
    ``duration_ms``, the client-side time of the request (the
    ``mcp.client.operation.duration`` metric). ``error_type`` names what failed
    (a JSON-RPC code, ``tool_error`` for an ``isError`` result, ``timeout``,
    ``connection_closed``, ``server_down``).
    """

    __pydantic_config__: ClassVar[Mapping[str, Any]] = _STRICT_FIELDS

    server: str
    method: str = "tools/call"
    transport: str = "pipe"
    protocol_version: str | None = None
    session_id: str | None = None
    request_id: str | None = None
    status_code: str | None = None
    error_type: str | None = None
    server_address: str | None = None
    server_port: int | None = None
    duration_ms: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolPostContext(EventContext):
    """A tool call attempt ended.

    ``result_hash`` is a stable 64-bit hash of the result text (None for empty
    output). ``error`` is the :class:`~loopobs.contract.errors.ToolError` when
    ``is_error``; ``result`` is the text fed back to the model: content, which
    exporters leave out of telemetry unless content capture is on.
    """

    hook: ClassVar[HookName] = "on_tool_post"
    tool_call_id: str
    turn: int
    tool: str
    result_hash: int | None = None
    is_error: bool = False
    duration_ms: float = 0.0
    display_hint: DisplayHint | None = None
    attempt: int = 0
    outcome: ToolOutcomeKind = "output"
    error: LoopError | None = None
    result: str | None = None
    mcp: McpCallInfo | None = None
    """Set when the tool is an MCP server's: the request's protocol details."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CompactionContext(EventContext):
    """The conversation was compacted, because of the window ``threshold`` or a ``detector``."""

    hook: ClassVar[HookName] = "on_compaction"
    tokens_before: int
    tokens_after: int
    tokens_saved: int
    messages_removed: int = 0
    reason: str = "threshold"


@dataclass(frozen=True, slots=True, kw_only=True)
class FallbackContext(EventContext):
    """A retryable failure moved the turn to the next model."""

    hook: ClassVar[HookName] = "on_fallback"
    from_model: str
    to_model: str
    turn: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSwitchedContext(EventContext):
    """The model of this call differs from the previous call's."""

    hook: ClassVar[HookName] = "on_model_switched"
    from_model: str
    to_model: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopDetectedContext(EventContext):
    """A repetition detector escalated: ``action`` says whether the loop warns or stops.

    Why it fired (all defaulted, so other emitters need not fill them): ``signal``
    names the rule (``repeat``, ``cycle``, ``same_result``, ``poll_budget``);
    ``reason`` says it in a sentence; ``call_ids`` are the tool call ids that make up
    the evidence (the latest few); ``normalised`` lists the normalisations that made
    the calls equal (``path``, ``volatile``, ``result:time`` …); ``arguments_hash``
    and ``result_hash`` are the normalised hashes of the triggering call,
    ``raw_arguments_hash`` and ``raw_result_hash`` the exact ones.
    """

    hook: ClassVar[HookName] = "on_loop_detected"
    pattern: str  # content: the repeating calls with their arguments
    repetitions: int
    tool: str | None = None
    action: LoopAction = "warn"
    signal: str = ""
    reason: str = ""
    call_ids: tuple[str, ...] = ()
    normalised: tuple[str, ...] = ()
    arguments_hash: int | None = None
    raw_arguments_hash: int | None = None
    result_hash: int | None = None
    raw_result_hash: int | None = None

    def summary(self) -> str:
        """What repeated, without the arguments: the tool and the arguments' hash.

        ``pattern`` quotes the calls' arguments, which are content; telemetry and error
        messages use this instead (``read_file(args#3f2a9c1d)``, or ``search(…)``).
        """
        tool = self.tool or "tool calls"
        if self.arguments_hash is None:
            return f"{tool}(…)"
        return f"{tool}(args#{self.arguments_hash & 0xFFFFFFFF:08x})"


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvergenceDetectedContext(EventContext):
    """Final answers converged: ``consecutive`` answers at least ``similarity`` alike.

    ``action`` is what the loop does about it (see :data:`ConvergenceAction`). Why it
    fired: ``signal`` (``same_answer``, or ``alternating`` when the latest answer
    matched an earlier one than the previous), ``reason`` in a sentence, and
    ``compared_with``: how many answers back the matching one was (1 = the previous).
    """

    hook: ClassVar[HookName] = "on_convergence_detected"
    action: ConvergenceAction
    similarity: float = 0.0
    consecutive: int = 0
    signal: str = ""
    reason: str = ""
    compared_with: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SuspendedContext(EventContext):
    """A tool parked the run on a gate; ``kind`` is ``human`` or ``signal``."""

    hook: ClassVar[HookName] = "on_suspended"
    turn: int
    tool: str
    tool_call_id: str
    reason: str
    input_schema: Mapping[str, Any]
    kind: Literal["human", "signal"] = "human"


@dataclass(frozen=True, slots=True, kw_only=True)
class SleepContext(EventContext):
    """A tool parked the run until ``wake_at`` (an aware datetime)."""

    hook: ClassVar[HookName] = "on_sleep"
    turn: int
    tool: str
    tool_call_id: str
    wake_at: Annotated[_dt.datetime, _IsoDatetime]


ContextProviderOutcome = Literal["ok", "empty", "timeout", "error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ContextProviderContext(EventContext):
    """A context provider finished before a model call (inside the turn, before the stream).

    ``outcome``: ``ok`` (its text is injected), ``empty`` (nothing to inject),
    ``timeout`` or ``error`` (skipped; ``error`` says why). ``text`` is the
    injected text: content, left out of telemetry unless content capture is on.
    """

    hook: ClassVar[HookName] = "on_context_provider"
    turn: int
    provider: str
    outcome: ContextProviderOutcome = "ok"
    duration_ms: float = 0.0
    chars: int = 0
    error: LoopError | None = None
    text: str | None = None


BackpressureOutcome = Literal["saturated", "dropped", "rejected"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BackpressureContext(EventContext):
    """A session's bounded queue pushed back (outside any run).

    ``run_id`` is the session's id: the event belongs to the session, not to a
    run. ``saturated`` fires once when the queue becomes full (again after it
    drained); ``dropped`` when ``drop_oldest`` discarded the oldest item;
    ``rejected`` when ``reject`` refused a new one (``block`` waits instead).
    """

    hook: ClassVar[HookName] = "on_backpressure"
    queue: str
    outcome: BackpressureOutcome
    capacity: int
    policy: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionResetContext(EventContext):
    """A session was reset: ``epoch`` is the new one; work of older epochs is discarded.

    ``run_id`` is the session's id; ``discarded`` counts queued items dropped.
    """

    hook: ClassVar[HookName] = "on_session_reset"
    epoch: int
    discarded: int = 0


SESSION_HOOKS: frozenset[str] = frozenset({"on_backpressure", "on_session_reset"})
"""Hooks of a session rather than a run: their ``run_id`` is the session's id."""
BudgetLimit = Literal[
    "usd",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "tool_calls",
    "model_calls",
    "wall_time_s",
]
"""The limits a budget can set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetExceededContext(EventContext):
    """a budget limit was crossed (``action="stop"``) or neared (``"warn"``).

    ``limit`` names the limit, ``value`` is what was used (for a check before a
    model call: used plus the call's estimate), ``budget`` is the limit's
    setting, ``scope`` is ``run``, ``session`` or ``shared`` (a budget shared across
    processes, whose key — ``"tenant:acme"`` — is ``scope_key``). A ``stop`` ends the
    run with status ``budget_exceeded``; a ``warn`` (the budget's ``warn_at`` share
    was reached) changes nothing.
    """

    hook: ClassVar[HookName] = "on_budget_exceeded"
    limit: BudgetLimit
    value: float
    budget: float
    scope: Literal["run", "session", "shared"] = "run"
    action: Literal["stop", "warn"] = "stop"
    scope_key: str = ""
    """For a shared budget, the scope that had no room (``session:<id>``, ``tenant:acme``);
    an id, so exporters keep it off metric labels."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetUnpricedContext(EventContext):
    """A USD limit met a model call with no known price: the limit cannot apply to it.

    Fires once per run (per scope that limits dollars: ``run``, ``session`` or
    ``shared``), at the first unpriced call. The call is made and counted in every
    other limit (tokens, calls, wall time); its dollars are unknown, so the USD limit
    neither counts nor stops it. Give the loop ``prices=...`` for the model.
    """

    hook: ClassVar[HookName] = "on_budget_unpriced"
    model: str
    provider: str = ""
    scope: Literal["run", "session", "shared"] = "run"
    budget: float = 0.0
    """The USD limit that cannot apply."""


SharedBudgetOperation = Literal["reserve", "commit", "release"]
"""A step of a shared budget's ledger: hold a call's worst case, settle it, give it back."""
SharedBudgetOutcome = Literal["ok", "refused", "error", "unguarded"]
"""How a ledger step ended: ``ok``; ``refused`` (a scope had no room: the call is not
made); ``error`` (the store failed or passed its deadline; a reserve under
``fail_closed`` refuses the call); ``unguarded`` (a reserve failed under ``fail_open``:
the call goes through unguarded). Store errors are ``error`` and ``unguarded``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SharedBudgetContext(EventContext):
    """One step of a run's shared budget on its ledger (only with ``shared_budget=``).

    ``store`` names the ledger (``memory``, ``redis://host:port/db``); ``duration_ms``
    is how long the store took; ``reserved_usd`` is the worst case the reservation
    held (a commit's and a release's too); ``committed_usd`` is what a commit added
    (None for the other steps), so ``reserved_usd - committed_usd`` is how far the
    worst case was from the real cost. ``expired`` counts reservations the ledger
    found expired since the previous step seen in this process (a worker killed
    mid-call, or a call longer than the TTL). ``scope_key`` is the refusing scope of a
    ``refused`` reserve (an id: kept off metric labels).
    """

    hook: ClassVar[HookName] = "on_shared_budget"
    operation: SharedBudgetOperation
    outcome: SharedBudgetOutcome = "ok"
    store: str = ""
    duration_ms: float = 0.0
    reserved_usd: float = 0.0
    committed_usd: float | None = None
    expired: int = 0
    scope_key: str = ""


CONTEXT_TYPES: Mapping[str, type[EventContext]] = {
    value.hook: value
    for value in list(globals().values())
    if isinstance(value, type) and issubclass(value, EventContext) and value is not EventContext
}
"""Hook name → context class, for every hook of the contract: the context classes of this
module, in the order they are defined."""

HOOKS: tuple[HookName, ...] = get_args(HookName)
"""Every hook name, in contract order."""

if tuple(CONTEXT_TYPES) != HOOKS:  # a new hook is its name in HookName and its context class
    raise TypeError(f"HookName and the context classes disagree: {HOOKS} != {tuple(CONTEXT_TYPES)}")


RENAMED_CONTEXTS: Mapping[str, str] = {
    "StreamContext": "StreamSuccessContext",
    "CompactedContext": "CompactionContext",
}
"""Context classes renamed since 0.1, old name → new name (see ``CHANGELOG.md``).

The old names still resolve, with a ``DeprecationWarning``."""


def __getattr__(name: str) -> Any:
    # The old names keep working for a release, with a warning, so code written
    # against 0.1 gets a pointer to the new name rather than an ImportError.
    new = RENAMED_CONTEXTS.get(name)
    if new is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"loopobs: {name} was renamed {new}", DeprecationWarning, stacklevel=2)
    return globals()[new]
