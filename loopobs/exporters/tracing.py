"""``TracingObserver``: loop events → OpenTelemetry spans in the GenAI conventions' shape.

One span tree per run::

    invoke_agent {agent}   INTERNAL   the run
      turn                 INTERNAL   one model round trip and its tool phase
        chat {model}       CLIENT     one per model call attempt (fallbacks included)
        execute_tool {t}   INTERNAL   one per tool call attempt

``invoke_agent``, ``chat`` and ``execute_tool`` follow the GenAI semantic
conventions; ``turn`` is loopobs's own grouping span (no ``gen_ai.operation.name``,
only ``loopobs.*`` attributes), which ``turn_spans=False`` leaves out.

Compaction, fallback, model switch, loop and convergence detection, suspension
and sleep become span events. A failed model call also emits the
``gen_ai.client.operation.exception`` event, and with content capture in an
event mode each model call emits ``gen_ai.client.inference.operation.details``,
both as log records through the OpenTelemetry logs API, in the call's span
context. Spans are keyed by run, turn, attempt and tool
call id — never by "the current span" — and every parent is passed explicitly,
so one observer serves any number of concurrent runs and nothing depends on
context attach/detach across ``await``. Span start and end times are the
events' ``time_ns``, so a replayed event log gives identical spans.

Every span that starts ends, once: the end event ends it; a turn's end ends
whatever it left open, and a run's end ends everything of that run.

With ``propagate_context=True`` (the default) the ``chat`` span is made current
on the task that emits ``on_stream_start`` (the task iterating the model
stream) and the ``execute_tool`` span on the task that emits ``on_tool_pre``
(the tool's own task), so spans an HTTP instrumentation or the user's tool code
opens nest under them. The matching end event restores the previous context
only when it runs on the same task and the span is still the current one, so
events emitted from elsewhere never make OpenTelemetry log "Failed to detach
context".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from opentelemetry import _logs as otel_logs
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from loopobs.contract import trace_links
from loopobs.contract.errors import LoopError
from loopobs.contract.events import (
    BackpressureContext,
    BudgetExceededContext,
    BudgetUnpricedContext,
    CompactionContext,
    ContextProviderContext,
    ConvergenceDetectedContext,
    FallbackContext,
    HookName,
    LoopDetectedContext,
    McpCallInfo,
    ModelSwitchedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    SessionResetContext,
    SharedBudgetContext,
    SleepContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    SuspendedContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    ToolCallReceivedContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.contract.observer import LoopObserver
from loopobs.exporters import catalog as c
from loopobs.exporters import content
from loopobs.exporters.content import ContentMode
from loopobs.exporters.providers import flush_provider
from loopobs.exporters.redaction import Redactor, redact_value

__all__ = ["NON_ERROR_STATUSES", "TracingObserver"]

NON_ERROR_STATUSES = frozenset({"completed", "suspended", "sleeping"})
"""Run statuses that leave the run span's status unset (parking is not a failure)."""


def _mcp_attributes(mcp: McpCallInfo) -> dict[str, Any]:
    """The MCP semantic-convention attributes of a tool call's ``execute_tool`` span."""
    attrs: dict[str, Any] = {
        c.MCP_METHOD_NAME: mcp.method,
        c.NETWORK_TRANSPORT: mcp.transport,
        c.LOOPOBS_MCP_SERVER: mcp.server,
    }
    if mcp.protocol_version:
        attrs[c.MCP_PROTOCOL_VERSION] = mcp.protocol_version
    if mcp.session_id:
        attrs[c.MCP_SESSION_ID] = mcp.session_id
    if mcp.request_id:
        attrs[c.JSONRPC_REQUEST_ID] = mcp.request_id
    if mcp.status_code:
        attrs[c.RPC_RESPONSE_STATUS_CODE] = mcp.status_code
    if mcp.transport == "tcp":
        attrs[c.NETWORK_PROTOCOL_NAME] = "http"
    if mcp.server_address:
        attrs[c.SERVER_ADDRESS] = mcp.server_address
    if mcp.server_port is not None:
        attrs[c.SERVER_PORT] = mcp.server_port
    return attrs


_CONTENT_ONLY_HOOKS: frozenset[HookName] = frozenset(
    {"on_text_delta", "on_thinking_delta", "on_tool_call_received", "on_response"}
)
"""Hooks whose events the tracing observer reads only for captured content."""


def _owner() -> object:
    """The task (or, outside asyncio, the thread) an attach belongs to."""
    # _get_running_loop() is asyncio's public-but-underscored probe; it avoids the
    # RuntimeError current_task() raises outside a loop (costly on the hot path).
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return task if task is not None else threading.get_ident()


def _error_type(error: BaseException | None) -> str:
    return type(error).__name__ if error is not None else c.ERROR_TYPE_OTHER


def _fail(span: Span, error: LoopError | None, error_type: str | None = None) -> None:
    span.set_attribute(c.ERROR_TYPE, error_type or _error_type(error))
    span.set_status(Status(StatusCode.ERROR, str(error) if error is not None else None))


_OPENAI = "openai"


def _request_attributes(attrs: dict[str, Any], options: Mapping[str, Any], provider: str) -> None:
    """Add the ``gen_ai.request.*`` attributes of the options sent (well-typed ones only)."""
    known = c.REQUEST_OPTION_ATTRIBUTES
    if provider == _OPENAI:
        known = {**known, **c.OPENAI_REQUEST_OPTION_ATTRIBUTES}
    for option, value in options.items():
        spec = known.get(option)
        if spec is None or value is None or isinstance(value, bool):
            continue
        name, kind = spec
        if kind is list:
            if isinstance(value, str):
                attrs[name] = (value,)
            elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
                attrs[name] = tuple(value)
        elif kind is float and isinstance(value, int | float):
            attrs[name] = float(value)
        elif kind is int and isinstance(value, int):
            if name != c.GEN_AI_REQUEST_CHOICE_COUNT or value != 1:
                attrs[name] = value
        elif kind is str and isinstance(value, str):
            attrs[name] = value


@dataclass(slots=True, eq=False)
class _Open:
    """A started span, and the context token when it was made current."""

    span: Span
    turn: int
    token: object | None = None
    owner: object | None = None
    # content capture (chat spans only)
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    expected_calls: int = -1
    end_ns: int = 0
    finish_reason: str | None = None
    input_json: str = ""
    input_on_span: bool = False
    """The input content still to be set on the span (at its end, after the usage)."""
    input_messages: list[dict[str, Any]] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    """The call's GenAI attributes, repeated on its log-record events."""


@dataclass(slots=True, eq=False)
class _Run:
    root: Span
    recording: bool
    session: str
    turns: dict[int, Span] = field(default_factory=dict)
    chats: dict[tuple[int, int], _Open] = field(default_factory=dict)
    tools: dict[tuple[str, int], _Open] = field(default_factory=dict)
    open_turn: int | None = None
    provider: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    reported: set[str] = field(default_factory=set)
    cost_usd: float = 0.0
    unpriced: bool = False
    loop_detected: bool = False
    # content capture only
    instructions: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    last_query: str | None = None
    streaming: dict[int, _Open] = field(default_factory=dict)
    pending: _Open | None = None
    tool_args: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    tool_results: dict[str, int] = field(default_factory=dict)


class TracingObserver(LoopObserver):
    """Turns loop events into GenAI-convention spans; safe to share across concurrent runs.

    Args:
        tracer_provider: where spans go; ``None`` uses the global provider (a
            no-op until the application installs an SDK). The observer never
            installs a provider.
        capture_content: message content on spans and events (see
            :mod:`loopobs.exporters.content`); ``None`` reads
            ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``. Off by default.
        turn_spans: ``False`` puts model and tool spans directly under the run span.
        propagate_context: make ``chat`` / ``execute_tool`` spans current while
            they run, so nested instrumentation attaches to them.
        logger_provider: where the log-record events go (operation exceptions,
            and inference details when content capture asks for events);
            ``None`` uses the global provider (a no-op until one is installed).
        redact: applied to every captured text (message parts, tool arguments
            and results) before it is exported; see
            :func:`loopobs.exporters.redaction.redact_common_secrets`.
        latest_semconv: use the newest GenAI names (``cache_write``, the renamed
            exception event, no provider on ``invoke_agent``); ``None`` reads
            ``OTEL_SEMCONV_STABILITY_OPT_IN`` (``gen_ai_latest_experimental``).
        max_content_length: characters one captured content value may have
            (default :data:`~loopobs.exporters.content.DEFAULT_MAX_CONTENT_LENGTH`,
            32,768; ``None``: no bound of the observer's own).

    Sizes: a captured content value longer than ``max_content_length`` — or than
    ``OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT`` / ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``,
    or than the tracer provider's ``SpanLimits`` (learnt from the first value the
    SDK cut: read back through the span's public ``attributes``) — is cut, ending
    in ``…[truncated]``, and counted in :attr:`truncated_attributes`. On ``chat``
    spans the content attributes are set last, after the usage ones, so a
    backend or collector that keeps only the first attributes keeps the usage.

    When a run's span is not recording (sampled out, or no SDK), the observer
    still keeps the span structure (so children are consistently dropped) but
    skips all attribute and content work.
    """

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        *,
        capture_content: ContentMode | bool | str | None = None,
        turn_spans: bool = True,
        propagate_context: bool = True,
        logger_provider: otel_logs.LoggerProvider | None = None,
        redact: Redactor | None = None,
        latest_semconv: bool | None = None,
        max_content_length: int | None = content.DEFAULT_MAX_CONTENT_LENGTH,
    ) -> None:
        from loopobs._version import __version__

        if max_content_length is not None and max_content_length < 0:
            raise ValueError("max_content_length must be None or at least 0")
        limits = [
            n for n in (max_content_length, content.attribute_length_limit()) if n is not None
        ]
        self._content_limit = min(limits) if limits else None
        self._truncated = 0

        self._provider = tracer_provider
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._tracer = provider.get_tracer(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
        logs = logger_provider if logger_provider is not None else otel_logs.get_logger_provider()
        self._logger = logs.get_logger(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
        self._redact = redact
        self.latest_semconv = c.latest_experimental() if latest_semconv is None else latest_semconv
        """Whether the newest GenAI names are used (fixed at construction)."""
        self._cache_write_attr = (
            c.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS
            if self.latest_semconv
            else c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
        )
        self._content_mode = content.parse_content_mode(capture_content)
        self._capture = self._content_mode.enabled  # read per event; the enum check is not free
        if not self._capture:
            # These hooks only gather content: without capture, the loop need not build them
            # (a streamed response's chunks are most of its events).
            self.unheard_hooks = _CONTENT_ONLY_HOOKS
        self.turn_spans = turn_spans
        self.propagate_context = propagate_context
        self._runs: dict[UUID, _Run] = {}

    # -- introspection ---------------------------------------------------------------------
    @property
    def content_mode(self) -> ContentMode:
        """What message content this observer records (fixed at construction)."""
        return self._content_mode

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended (0 between runs: no per-run state leaks)."""
        return len(self._runs)

    @property
    def truncated_attributes(self) -> int:
        """Captured content values cut to the length bound (by the observer or the SDK)."""
        return self._truncated

    @property
    def content_length_limit(self) -> int | None:
        """The characters one content value may have now (None: unbounded)."""
        return self._content_limit

    def open_spans(self) -> int:
        """Spans started by this observer and not yet ended."""
        return sum(
            1 + len(r.turns) + len(r.chats) + len(r.tools) + (r.pending is not None)
            for r in list(self._runs.values())
        )

    # -- helpers ---------------------------------------------------------------------------
    def _content(self, value: Any) -> Any:
        """``value`` with the redaction hook applied to every string in it."""
        return value if self._redact is None else redact_value(value, self._redact)

    def _dumps(self, value: Any) -> str:
        """Captured content as the JSON string spans carry, redacted."""
        return content.dumps(self._content(value))

    def _capped(self, text: str) -> str:
        """``text`` within the content length bound (cut and counted when it is not)."""
        short = content.cut(text, self._content_limit)
        if short is None:
            return text
        self._truncated += 1
        return short

    def _learn_limit(self, span: Span, name: str, sent: str) -> None:
        """Count a content value the SDK cut (its ``SpanLimits``), and cut to that from now.

        An SDK span shows what it kept through its public ``attributes``; other
        spans (the API's non-recording ones) have none, and nothing is learnt.
        """
        kept = getattr(span, "attributes", None)
        value = kept.get(name) if isinstance(kept, Mapping) else None
        if isinstance(value, str) and len(value) < len(sent):
            self._truncated += 1
            self._content_limit = len(value)

    def _set_content(self, span: Span, name: str, text: str) -> None:
        value = self._capped(text)
        span.set_attribute(name, value)
        self._learn_limit(span, name, value)

    def _set_input(self, run: _Run, chat: _Open) -> None:
        """The call's input content, on its span just before it ends (after the usage)."""
        if not chat.input_on_span:
            return
        chat.input_on_span = False
        self._set_content(chat.span, c.GEN_AI_INPUT_MESSAGES, chat.input_json)
        if run.instructions:
            self._set_content(
                chat.span,
                c.GEN_AI_SYSTEM_INSTRUCTIONS,
                self._dumps(content.system_instructions(run.instructions)),
            )

    def _end_chat_span(self, run: _Run, chat: _Open, end_ns: int) -> None:
        """End a ``chat`` span, its input content set first; it ends even if that fails."""
        try:
            self._set_input(run, chat)
        finally:
            chat.span.end(end_time=end_ns)

    def _emit(
        self,
        span: Span,
        name: str,
        attributes: Mapping[str, Any],
        time_ns: int,
        severity: otel_logs.SeverityNumber | None = None,
    ) -> None:
        """A log-record event ``name`` in ``span``'s context."""
        self._logger.emit(
            timestamp=time_ns,
            context=trace.set_span_in_context(span),
            event_name=name,
            attributes=attributes,
            severity_number=severity,
        )

    def _parent(self, run: _Run, turn: int) -> Span:
        return run.turns.get(turn, run.root) if self.turn_spans else run.root

    def _event_target(self, run: _Run, turn: int | None = None) -> Span:
        if turn is None:
            turn = run.open_turn
        if turn is not None and turn in run.turns:
            return run.turns[turn]
        return run.root

    def _attach(self, item: _Open) -> None:
        if self.propagate_context:
            item.token = otel_context.attach(trace.set_span_in_context(item.span))
            item.owner = _owner()

    @staticmethod
    def _detach(item: _Open) -> None:
        token, item.token = item.token, None
        if token is None:
            return
        if item.owner == _owner() and trace.get_current_span() is item.span:
            otel_context.detach(token)  # type: ignore[arg-type]

    def _end_chat(self, run: _Run, chat: _Open, end_ns: int) -> None:
        try:
            if run.recording and self._capture:
                self._chat_content(run, chat, end_ns)
        finally:
            self._end_chat_span(run, chat, end_ns)

    def _chat_content(self, run: _Run, chat: _Open, end_ns: int) -> None:
        """A completed call's content: output messages, the details event, the history."""
        text = "".join(chat.text)
        run.history.append(content.assistant_message(text, chat.tool_calls))
        messages = self._content(
            [
                content.output_message(
                    text, chat.tool_calls, chat.finish_reason, "".join(chat.reasoning)
                )
            ]
        )
        output = content.dumps(messages)
        if self.content_mode.on_span:
            self._set_input(run, chat)
            self._set_content(chat.span, c.GEN_AI_OUTPUT_MESSAGES, output)
        if self.content_mode.on_event:
            attrs = {
                c.GEN_AI_INPUT_MESSAGES: self._capped(chat.input_json),
                c.GEN_AI_OUTPUT_MESSAGES: self._capped(output),
            }
            # The log record carries the structured content, as the conventions ask.
            record: dict[str, Any] = {
                c.GEN_AI_INPUT_MESSAGES: self._content(chat.input_messages),
                c.GEN_AI_OUTPUT_MESSAGES: messages,
            }
            if run.instructions:
                instructions = self._content(content.system_instructions(run.instructions))
                attrs[c.GEN_AI_SYSTEM_INSTRUCTIONS] = self._capped(content.dumps(instructions))
                record[c.GEN_AI_SYSTEM_INSTRUCTIONS] = instructions
            record, cut = content.cut_strings(record, self._content_limit)
            self._truncated += cut
            chat.span.add_event(c.EVENT_INFERENCE_DETAILS, attrs, timestamp=end_ns)
            self._emit(chat.span, c.EVENT_INFERENCE_DETAILS, {**chat.attrs, **record}, end_ns)

    def _flush_pending(self, run: _Run) -> None:
        pending, run.pending = run.pending, None
        if pending is not None:
            self._end_chat(run, pending, pending.end_ns)

    # -- runs ------------------------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """Start the ``invoke_agent`` span (under the ambient context, e.g. a request span).

        A resumed run links to the parked run's span, found through
        :func:`loopobs.contract.trace_links.resolve`. The run's trace and span
        id are published to :mod:`~loopobs.contract.trace_links` while it runs.
        """
        session = str(ctx.session_id)
        attrs: dict[str, Any] = {
            c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT,
            c.GEN_AI_AGENT_NAME: ctx.agent,
            c.GEN_AI_CONVERSATION_ID: session,
            c.LOOPOBS_RUN_ID: str(ctx.run_id),
        }
        if ctx.model:
            attrs[c.GEN_AI_REQUEST_MODEL] = ctx.model
        for name, value in ctx.attribution.items():
            attrs[c.LOOPOBS_ATTRIBUTION_PREFIX + name] = value
        if "user" in ctx.attribution:
            attrs[c.USER_ID] = ctx.attribution["user"]
        links: list[Link] = []
        if ctx.resumed_from is not None:
            attrs[c.LOOPOBS_RUN_RESUMED_FROM] = str(ctx.resumed_from)
            parked = trace_links.resolve(ctx.resumed_from)
            if parked is not None:
                links.append(
                    Link(
                        SpanContext(
                            int(parked[0], 16),
                            int(parked[1], 16),
                            is_remote=True,
                            trace_flags=TraceFlags(TraceFlags.SAMPLED),
                        )
                    )
                )
        root = self._tracer.start_span(
            f"{c.SPAN_INVOKE_AGENT} {ctx.agent}",
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            links=links,
            start_time=ctx.time_ns,
        )
        recording = root.is_recording()
        run = _Run(root=root, recording=recording, session=session)
        if recording and self._capture:
            run.instructions = ctx.instructions
        previous = self._runs.pop(ctx.run_id, None)
        self._runs[ctx.run_id] = run
        if previous is not None:  # a duplicate start: never leave the first tree open
            self._close_run(previous, ctx.time_ns)
        span_context = root.get_span_context()
        if recording and span_context.is_valid:
            trace_links.publish(
                ctx.run_id, f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"
            )

    def on_run_end(self, ctx: RunEndContext) -> None:
        """End the run span and anything of the run still open; set status, turns, usage.

        ``suspended`` and ``sleeping`` runs are not errors; any other run that did
        not succeed gets status ERROR and ``error.type``.
        """
        run = self._runs.pop(ctx.run_id, None)
        if run is None:
            return
        trace_links.withdraw(ctx.run_id)
        failed = not ctx.success and ctx.status not in NON_ERROR_STATUSES
        self._close_run(run, ctx.time_ns, ctx.error if failed else None, failed)
        root = run.root
        if run.recording:
            inp = ctx.input_tokens or run.input_tokens
            out = ctx.output_tokens or run.output_tokens
            attrs: dict[str, Any] = {
                c.LOOPOBS_RUN_STATUS: str(ctx.status),
                c.LOOPOBS_RUN_TOTAL_TURNS: ctx.total_turns,
                # What a Collector's tail sampling keeps runs by (grafana/collector/).
                c.LOOPOBS_RUN_LOOP_DETECTED: run.loop_detected,
                c.LOOPOBS_RUN_BUDGET_STOPPED: ctx.status is RunStatus.BUDGET_EXCEEDED,
                c.GEN_AI_USAGE_INPUT_TOKENS: inp,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: out,
            }
            # The agent span's usage lists no reasoning tokens; cache counts appear
            # whenever a call of the run reported them, 0 included.
            if run.cache_read or "cache_read" in run.reported:
                attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = run.cache_read
            if run.cache_write or "cache_write" in run.reported:
                attrs[self._cache_write_attr] = run.cache_write
            if run.provider and not self.latest_semconv:
                attrs[c.GEN_AI_PROVIDER_NAME] = run.provider
            cost = ctx.cost_usd if ctx.cost_usd is not None or run.unpriced else run.cost_usd
            if cost is not None:
                attrs[c.LOOPOBS_COST_USD] = cost
            root.set_attributes(attrs)
            if failed:
                _fail(root, ctx.error)
        root.end(end_time=ctx.time_ns)

    def _close_run(
        self, run: _Run, end_ns: int, error: LoopError | None = None, failed: bool = False
    ) -> None:
        """End every child span of ``run`` still open (tools, chats, turns), innermost first."""
        self._flush_pending(run)
        for item in list(run.tools.values()) + list(run.chats.values()):
            self._detach(item)
            if failed and run.recording:
                _fail(item.span, error)
            self._end_chat_span(run, item, end_ns)
        run.tools.clear()
        run.chats.clear()
        for span in list(run.turns.values()):
            if failed and run.recording:
                _fail(span, error)
            span.end(end_time=end_ns)
        run.turns.clear()
        run.streaming.clear()

    # -- turns -----------------------------------------------------------------------------
    def on_turn_start(self, ctx: TurnStartContext) -> None:
        """Start the ``turn`` span under the run span (unless ``turn_spans=False``)."""
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        self._flush_pending(run)
        run.open_turn = ctx.turn
        if run.recording and self._capture and ctx.query and ctx.query != run.last_query:
            run.last_query = ctx.query
            run.history.append(content.user_message(ctx.query))
        if not self.turn_spans:
            return
        span = self._tracer.start_span(
            c.SPAN_TURN,
            context=trace.set_span_in_context(run.root),
            kind=SpanKind.INTERNAL,
            attributes={c.LOOPOBS_TURN_INDEX: ctx.turn},
            start_time=ctx.time_ns,
        )
        old = run.turns.pop(ctx.turn, None)
        run.turns[ctx.turn] = span
        if old is not None:
            old.end(end_time=ctx.time_ns)

    def on_turn_end(self, ctx: TurnEndContext) -> None:
        """End the turn span (and any attempt of the turn left open); ERROR if the turn failed."""
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        self._flush_pending(run)
        for key in [k for k, v in run.chats.items() if v.turn == ctx.turn]:
            item = run.chats.pop(key)
            self._detach(item)
            self._end_chat_span(run, item, ctx.time_ns)
        for tool_key in [k for k, v in run.tools.items() if v.turn == ctx.turn]:
            item = run.tools.pop(tool_key)
            self._detach(item)
            item.span.end(end_time=ctx.time_ns)
        run.streaming.pop(ctx.turn, None)
        if run.open_turn == ctx.turn:
            run.open_turn = None
        span = run.turns.pop(ctx.turn, None)
        if span is None:
            return
        if run.recording:
            span.set_attributes(
                {
                    c.LOOPOBS_TURN_INPUT_TOKENS: ctx.input_tokens,
                    c.LOOPOBS_TURN_OUTPUT_TOKENS: ctx.output_tokens,
                }
            )
            if ctx.cost_usd is not None:
                span.set_attribute(c.LOOPOBS_COST_USD, ctx.cost_usd)
            if not ctx.success:
                _fail(span, ctx.error)
        span.end(end_time=ctx.time_ns)

    # -- model calls -----------------------------------------------------------------------
    def on_stream_start(self, ctx: StreamStartContext) -> None:
        """Start ``chat {model}`` (CLIENT) and, if propagating, make it current on this task."""
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        self._flush_pending(run)
        attrs: dict[str, Any] = {
            c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
            c.GEN_AI_REQUEST_MODEL: ctx.model,
            c.GEN_AI_CONVERSATION_ID: run.session,
            c.LOOPOBS_ATTEMPT: ctx.attempt,
        }
        if ctx.stream is not None:  # unknown until the call ends: the end sets it
            attrs[c.GEN_AI_REQUEST_STREAM] = ctx.stream
        if ctx.provider:
            attrs[c.GEN_AI_PROVIDER_NAME] = ctx.provider
            if not run.provider:
                run.provider = ctx.provider
        if ctx.server_address:
            attrs[c.SERVER_ADDRESS] = ctx.server_address
            if ctx.server_port is not None:
                attrs[c.SERVER_PORT] = ctx.server_port
        if ctx.request_options:
            _request_attributes(attrs, ctx.request_options, ctx.provider)
        span = self._tracer.start_span(
            f"{c.SPAN_CHAT} {ctx.model}",
            context=trace.set_span_in_context(self._parent(run, ctx.turn)),
            kind=SpanKind.CLIENT,
            attributes=attrs,
            start_time=ctx.time_ns,
        )
        item = _Open(span=span, turn=ctx.turn)
        if run.recording:
            item.attrs = {k: v for k, v in attrs.items() if k != c.LOOPOBS_ATTEMPT}
        if run.recording and self._capture:
            item.input_messages = list(run.history)
            item.input_json = self._dumps(item.input_messages)
            item.input_on_span = self.content_mode.on_span
            run.streaming[ctx.turn] = item
        old = run.chats.pop((ctx.turn, ctx.attempt), None)
        run.chats[(ctx.turn, ctx.attempt)] = item
        if old is not None:
            self._end_chat_span(run, old, ctx.time_ns)
        self._attach(item)

    def on_text_delta(self, ctx: TextDeltaContext) -> None:
        """With content capture on, collect the streamed text for ``gen_ai.output.messages``."""
        if not self._capture:
            return
        run = self._runs.get(ctx.run_id)
        if run is not None and (item := run.streaming.get(ctx.turn)) is not None:
            item.text.append(ctx.delta)

    def on_thinking_delta(self, ctx: ThinkingDeltaContext) -> None:
        """With content capture on, collect streamed reasoning (a ``reasoning`` part)."""
        if not self._capture:
            return
        run = self._runs.get(ctx.run_id)
        if run is not None and (item := run.streaming.get(ctx.turn)) is not None:
            item.reasoning.append(ctx.delta)

    def on_stream_success(self, ctx: StreamSuccessContext) -> None:
        """Set response and usage attributes and end the ``chat`` span.

        With content capture on, the span's end (at this event's time) waits for
        ``on_response`` and the tool calls, which complete its output message.
        """
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        item = run.chats.pop((ctx.turn, ctx.attempt), None)
        run.input_tokens += ctx.input_tokens
        run.output_tokens += ctx.output_tokens
        run.cache_read += ctx.cache_read_input_tokens
        run.cache_write += ctx.cache_write_input_tokens
        run.reported.update(ctx.usage_details)
        if ctx.cost_usd is None:
            run.unpriced = True
        else:
            run.cost_usd += ctx.cost_usd
        if item is None:
            return
        self._detach(item)
        span = item.span
        if run.recording:
            attrs: dict[str, Any] = {c.GEN_AI_RESPONSE_MODEL: ctx.response_model or ctx.model}
            if ctx.usage_reported:  # no usage reported: no token counts, not 0/0
                attrs[c.GEN_AI_USAGE_INPUT_TOKENS] = ctx.input_tokens
                attrs[c.GEN_AI_USAGE_OUTPUT_TOKENS] = ctx.output_tokens
            if ctx.stream is not None:
                attrs[c.GEN_AI_REQUEST_STREAM] = ctx.stream
            if ctx.response_id:
                attrs[c.GEN_AI_RESPONSE_ID] = ctx.response_id
            if ctx.finish_reason:
                attrs[c.GEN_AI_RESPONSE_FINISH_REASONS] = (ctx.finish_reason,)
            # Present whenever the provider reported them, 0 included; absent when unknown.
            reported = ctx.usage_details
            if ctx.cache_read_input_tokens or "cache_read" in reported:
                attrs[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = ctx.cache_read_input_tokens
            if ctx.cache_write_input_tokens or "cache_write" in reported:
                attrs[self._cache_write_attr] = ctx.cache_write_input_tokens
            if ctx.reasoning_output_tokens or "reasoning" in reported:
                attrs[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = ctx.reasoning_output_tokens
            if ctx.time_to_first_token_ms is not None:
                attrs[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = ctx.time_to_first_token_ms / 1000
            if ctx.provider == _OPENAI:
                if ctx.service_tier:
                    attrs[c.OPENAI_RESPONSE_SERVICE_TIER] = ctx.service_tier
                if ctx.system_fingerprint:
                    attrs[c.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] = ctx.system_fingerprint
            if ctx.cost_usd is not None:
                attrs[c.LOOPOBS_COST_USD] = ctx.cost_usd
            span.set_attributes(attrs)
            item.attrs.update(attrs)
            if self._capture:
                self._flush_pending(run)
                item.end_ns = ctx.time_ns
                item.finish_reason = ctx.finish_reason
                run.pending = item
                return
        span.end(end_time=ctx.time_ns)

    def on_stream_failure(self, ctx: StreamFailureContext) -> None:
        """End the ``chat`` span with status ERROR and ``error.type`` (the error's class name).

        The turn and run stay OK unless they end unsuccessfully themselves (a
        failure recovered by a fallback model does not fail them).
        """
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        item = run.chats.pop((ctx.turn, ctx.attempt), None)
        if item is None:
            return
        if run.streaming.get(ctx.turn) is item:
            del run.streaming[ctx.turn]
        self._detach(item)
        if run.recording:
            if ctx.stream is not None:
                item.span.set_attribute(c.GEN_AI_REQUEST_STREAM, ctx.stream)
                item.attrs[c.GEN_AI_REQUEST_STREAM] = ctx.stream
            _fail(item.span, ctx.error)
            self._emit(
                item.span,
                c.EVENT_INFERENCE_EXCEPTION if self.latest_semconv else c.EVENT_OPERATION_EXCEPTION,
                {
                    **item.attrs,
                    c.ERROR_TYPE: _error_type(ctx.error),
                    c.EXCEPTION_TYPE: _error_type(ctx.error),
                    c.EXCEPTION_MESSAGE: str(ctx.error),
                },
                ctx.time_ns,
                otel_logs.SeverityNumber.WARN,
            )
        self._end_chat_span(run, item, ctx.time_ns)

    def on_response(self, ctx: ResponseContext) -> None:
        """With content capture on, complete the pending output message with the final text."""
        run = self._runs.get(ctx.run_id)
        if run is None or (pending := run.pending) is None or pending.turn != ctx.turn:
            return
        if ctx.text:
            pending.text = [ctx.text]
        pending.expected_calls = ctx.tool_calls
        if ctx.tool_calls <= len(pending.tool_calls):
            self._flush_pending(run)

    # -- tools -----------------------------------------------------------------------------
    def on_tool_call_received(self, ctx: ToolCallReceivedContext) -> None:
        """With content capture on, keep the arguments (for the tool span and output message)."""
        if not self._capture:
            return
        run = self._runs.get(ctx.run_id)
        if run is None or not run.recording:
            return
        run.tool_args[ctx.tool_call_id] = ctx.input
        pending = run.pending
        if pending is not None and pending.turn == ctx.turn:
            pending.tool_calls.append(content.tool_call_part(ctx.tool_call_id, ctx.tool, ctx.input))
            if len(pending.tool_calls) >= pending.expected_calls >= 0:
                self._flush_pending(run)

    def on_tool_pre(self, ctx: ToolPreContext) -> None:
        """Start ``execute_tool {tool}`` and, if propagating, make it current on the tool's task."""
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        if run.pending is not None:
            self._flush_pending(run)
        attrs: dict[str, Any] = {
            c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
            c.GEN_AI_TOOL_NAME: ctx.tool,
            c.GEN_AI_TOOL_CALL_ID: ctx.tool_call_id,
            c.GEN_AI_TOOL_TYPE: ctx.tool_type or c.TOOL_TYPE_FUNCTION,
            c.LOOPOBS_ATTEMPT: ctx.attempt,
        }
        if ctx.tool_description:
            attrs[c.GEN_AI_TOOL_DESCRIPTION] = ctx.tool_description
        arguments = None
        if (
            run.recording
            and self._capture
            and (args := run.tool_args.get(ctx.tool_call_id)) is not None
        ):
            arguments = attrs[c.GEN_AI_TOOL_CALL_ARGUMENTS] = self._capped(self._dumps(args))
        span = self._tracer.start_span(
            f"{c.SPAN_EXECUTE_TOOL} {ctx.tool}",
            context=trace.set_span_in_context(self._parent(run, ctx.turn)),
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            start_time=ctx.time_ns,
        )
        if arguments is not None:
            self._learn_limit(span, c.GEN_AI_TOOL_CALL_ARGUMENTS, arguments)
        item = _Open(span=span, turn=ctx.turn)
        key = (ctx.tool_call_id, ctx.attempt)
        old = run.tools.pop(key, None)
        run.tools[key] = item
        if old is not None:
            old.span.end(end_time=ctx.time_ns)
        self._attach(item)

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Set the result hash and outcome and end the tool span; ERROR when ``is_error``."""
        run = self._runs.get(ctx.run_id)
        if run is None:
            return
        item = run.tools.pop((ctx.tool_call_id, ctx.attempt), None)
        if item is None:
            return
        self._detach(item)
        span = item.span
        if run.recording:
            attrs: dict[str, Any] = {c.LOOPOBS_TOOL_OUTCOME: ctx.outcome}
            if ctx.result_hash is not None:
                attrs[c.LOOPOBS_TOOL_RESULT_HASH] = f"{ctx.result_hash:016x}"
            result = None
            if self._capture and ctx.result is not None:
                if not ctx.is_error:
                    result = attrs[c.GEN_AI_TOOL_CALL_RESULT] = self._capped(
                        ctx.result if self._redact is None else self._redact(ctx.result)
                    )
                index = run.tool_results.get(ctx.tool_call_id)
                message = content.tool_message(ctx.tool_call_id, ctx.result)
                if index is None:
                    run.tool_results[ctx.tool_call_id] = len(run.history)
                    run.history.append(message)
                else:
                    run.history[index] = message
            if ctx.mcp is not None:
                attrs.update(_mcp_attributes(ctx.mcp))
            span.set_attributes(attrs)
            if result is not None:
                self._learn_limit(span, c.GEN_AI_TOOL_CALL_RESULT, result)
            if ctx.is_error:
                _fail(span, ctx.error, None if ctx.error is not None else c.ERROR_TYPE_TOOL)
                if ctx.mcp is not None and ctx.mcp.error_type:
                    span.set_attribute(c.ERROR_TYPE, ctx.mcp.error_type)
        span.end(end_time=ctx.time_ns)

    # -- context providers and sessions -----------------------------------------------------
    def on_context_provider(self, ctx: ContextProviderContext) -> None:
        """A ``context_provider {name}`` span under the turn, spanning the provider's run."""
        run = self._runs.get(ctx.run_id)
        if run is None or not run.recording:
            return
        attrs: dict[str, Any] = {
            c.LOOPOBS_CONTEXT_PROVIDER_NAME: ctx.provider,
            c.LOOPOBS_CONTEXT_PROVIDER_OUTCOME: ctx.outcome,
            c.LOOPOBS_CONTEXT_PROVIDER_CHARS: ctx.chars,
        }
        if self._capture and ctx.text is not None and self.content_mode.on_span:
            attrs[c.LOOPOBS_CONTEXT_PROVIDER_TEXT] = self._capped(ctx.text)
        start = ctx.time_ns - int(ctx.duration_ms * 1e6)
        span = self._tracer.start_span(
            f"{c.SPAN_CONTEXT_PROVIDER} {ctx.provider}",
            context=trace.set_span_in_context(self._parent(run, ctx.turn)),
            kind=SpanKind.INTERNAL,
            attributes=attrs,
            start_time=start,
        )
        if ctx.error is not None:
            _fail(span, ctx.error, ctx.outcome)
        span.end(end_time=ctx.time_ns)

    def on_backpressure(self, ctx: BackpressureContext) -> None:
        """A zero-length ``session_queue {queue}`` span (its own trace: no run owns it)."""
        span = self._tracer.start_span(
            f"{c.SPAN_SESSION_QUEUE} {ctx.queue}",
            kind=SpanKind.INTERNAL,
            context=otel_context.Context(),
            start_time=ctx.time_ns,
            attributes={
                c.LOOPOBS_SESSION_ID: str(ctx.run_id),
                c.LOOPOBS_QUEUE_NAME: ctx.queue,
                c.LOOPOBS_QUEUE_OUTCOME: ctx.outcome,
                c.LOOPOBS_QUEUE_POLICY: ctx.policy,
                c.LOOPOBS_QUEUE_CAPACITY: ctx.capacity,
            },
        )
        span.end(end_time=ctx.time_ns)

    def on_session_reset(self, ctx: SessionResetContext) -> None:
        """A zero-length ``session_reset`` span (its own trace)."""
        span = self._tracer.start_span(
            c.SPAN_SESSION_RESET,
            kind=SpanKind.INTERNAL,
            context=otel_context.Context(),
            start_time=ctx.time_ns,
            attributes={
                c.LOOPOBS_SESSION_ID: str(ctx.run_id),
                c.LOOPOBS_SESSION_EPOCH: ctx.epoch,
                c.LOOPOBS_SESSION_DISCARDED: ctx.discarded,
            },
        )
        span.end(end_time=ctx.time_ns)

    # -- span events -----------------------------------------------------------------------
    def _event(
        self,
        run_id: UUID,
        name: str,
        attrs: Mapping[str, Any],
        time_ns: int,
        turn: int | None = None,
    ) -> None:
        run = self._runs.get(run_id)
        if run is None or not run.recording:
            return
        self._event_target(run, turn).add_event(name, attrs, timestamp=time_ns)

    def on_compaction(self, ctx: CompactionContext) -> None:
        """Add a ``loopobs.compaction`` event (to the open turn, else the run span)."""
        self._event(
            ctx.run_id,
            c.EVENT_COMPACTION,
            {
                c.LOOPOBS_COMPACTION_TOKENS_BEFORE: ctx.tokens_before,
                c.LOOPOBS_COMPACTION_TOKENS_AFTER: ctx.tokens_after,
                c.LOOPOBS_COMPACTION_TOKENS_SAVED: ctx.tokens_saved,
                c.LOOPOBS_COMPACTION_MESSAGES_REMOVED: ctx.messages_removed,
                c.LOOPOBS_COMPACTION_REASON: ctx.reason,
            },
            ctx.time_ns,
        )

    def on_fallback(self, ctx: FallbackContext) -> None:
        """Add a ``loopobs.fallback`` event to the turn's span."""
        self._event(
            ctx.run_id,
            c.EVENT_FALLBACK,
            {
                c.LOOPOBS_MODEL_FROM: ctx.from_model,
                c.LOOPOBS_MODEL_TO: ctx.to_model,
                c.LOOPOBS_TURN_INDEX: ctx.turn,
            },
            ctx.time_ns,
            ctx.turn,
        )

    def on_model_switched(self, ctx: ModelSwitchedContext) -> None:
        """Add a ``loopobs.model_switched`` event (to the open turn, else the run span)."""
        self._event(
            ctx.run_id,
            c.EVENT_MODEL_SWITCHED,
            {
                c.LOOPOBS_MODEL_FROM: ctx.from_model,
                c.LOOPOBS_MODEL_TO: ctx.to_model,
            },
            ctx.time_ns,
        )

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        """Add a ``loopobs.loop_detected`` event (to the open turn, else the run span)."""
        attrs: dict[str, Any] = {
            # The pattern quotes tool arguments: content, so only with capture on.
            c.LOOPOBS_DETECTION_PATTERN: self._capped(ctx.pattern)
            if self._capture
            else ctx.summary(),
            c.LOOPOBS_DETECTION_REPETITIONS: ctx.repetitions,
            c.LOOPOBS_DETECTION_ACTION: ctx.action,
        }
        if ctx.tool is not None:
            attrs[c.GEN_AI_TOOL_NAME] = ctx.tool
        self._note_detection(ctx.run_id)
        self._event(ctx.run_id, c.EVENT_LOOP_DETECTED, attrs, ctx.time_ns)

    def _note_detection(self, run_id: UUID) -> None:
        run = self._runs.get(run_id)
        if run is not None:
            run.loop_detected = True

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        """Add a ``loopobs.convergence_detected`` event (to the open turn, else the run span)."""
        self._note_detection(ctx.run_id)
        self._event(
            ctx.run_id,
            c.EVENT_CONVERGENCE_DETECTED,
            {
                c.LOOPOBS_DETECTION_ACTION: ctx.action,
                c.LOOPOBS_DETECTION_SIMILARITY: ctx.similarity,
                c.LOOPOBS_DETECTION_CONSECUTIVE: ctx.consecutive,
            },
            ctx.time_ns,
        )

    def on_suspended(self, ctx: SuspendedContext) -> None:
        """Add a ``loopobs.suspended`` event to the turn's span (the reason is not content)."""
        self._event(
            ctx.run_id,
            c.EVENT_SUSPENDED,
            {
                c.GEN_AI_TOOL_NAME: ctx.tool,
                c.GEN_AI_TOOL_CALL_ID: ctx.tool_call_id,
                c.LOOPOBS_PARK_REASON: ctx.reason,
                c.LOOPOBS_PARK_KIND: ctx.kind,
            },
            ctx.time_ns,
            ctx.turn,
        )

    def on_sleep(self, ctx: SleepContext) -> None:
        """Add a ``loopobs.sleep`` event to the turn's span, with ``wake_at`` in ISO 8601."""
        self._event(
            ctx.run_id,
            c.EVENT_SLEEP,
            {
                c.GEN_AI_TOOL_NAME: ctx.tool,
                c.GEN_AI_TOOL_CALL_ID: ctx.tool_call_id,
                c.LOOPOBS_PARK_WAKE_AT: ctx.wake_at.isoformat(),
            },
            ctx.time_ns,
            ctx.turn,
        )

    def on_budget_exceeded(self, ctx: BudgetExceededContext) -> None:
        """Add a ``loopobs.budget_exceeded`` event (to the open turn, else the run span)."""
        self._event(
            ctx.run_id,
            c.EVENT_BUDGET_EXCEEDED,
            {
                c.LOOPOBS_BUDGET_LIMIT: ctx.limit,
                c.LOOPOBS_BUDGET_VALUE: ctx.value,
                c.LOOPOBS_BUDGET_ALLOWED: ctx.budget,
                c.LOOPOBS_BUDGET_SCOPE: ctx.scope,
                c.LOOPOBS_BUDGET_ACTION: ctx.action,
            },
            ctx.time_ns,
        )

    def on_budget_unpriced(self, ctx: BudgetUnpricedContext) -> None:
        """Add a ``loopobs.budget_unpriced`` event (to the open turn, else the run span): a
        USD limit that cannot apply to a model with no price."""
        attrs: dict[str, Any] = {
            c.GEN_AI_REQUEST_MODEL: ctx.model,
            c.LOOPOBS_BUDGET_SCOPE: ctx.scope,
            c.LOOPOBS_BUDGET_ALLOWED: ctx.budget,
        }
        if ctx.provider:
            attrs[c.GEN_AI_PROVIDER_NAME] = ctx.provider
        self._event(ctx.run_id, c.EVENT_BUDGET_UNPRICED, attrs, ctx.time_ns)

    def on_shared_budget(self, ctx: SharedBudgetContext) -> None:
        """Add a ``loopobs.shared_budget`` event (to the open turn, else the run span) for a
        ledger step that did not end ``ok``: a refused reservation (with the refusing
        scope) or a store error. Steps that went through are metrics only: two per model
        call would crowd every trace."""
        if ctx.outcome == "ok":
            return
        attrs: dict[str, Any] = {
            c.LOOPOBS_SHARED_BUDGET_OPERATION: ctx.operation,
            c.LOOPOBS_SHARED_BUDGET_OUTCOME: ctx.outcome,
            c.LOOPOBS_SHARED_BUDGET_STORE: self._capped(ctx.store),
            c.LOOPOBS_SHARED_BUDGET_DURATION_MS: ctx.duration_ms,
            c.LOOPOBS_SHARED_BUDGET_RESERVED_USD: ctx.reserved_usd,
        }
        if ctx.scope_key:
            attrs[c.LOOPOBS_SHARED_BUDGET_SCOPE_KEY] = self._capped(ctx.scope_key)
        self._event(ctx.run_id, c.EVENT_SHARED_BUDGET, attrs, ctx.time_ns)

    # -- lifecycle -------------------------------------------------------------------------
    def reset(self) -> None:
        """End every open span (as if the runs ended now) and forget all runs."""
        import time

        now = time.time_ns()
        for run_id in list(self._runs):
            run = self._runs.pop(run_id, None)
            if run is not None:
                trace_links.withdraw(run_id)
                self._close_run(run, now)
                run.root.end(end_time=now)

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Flush the tracer provider this observer was given; False if it could not in time."""
        return flush_provider(self._provider, timeout_s)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """End every open span and flush; the provider itself belongs to the caller."""
        self.reset()
        self.force_flush(timeout_s)
