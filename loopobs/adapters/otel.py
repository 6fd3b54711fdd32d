"""Any GenAI-instrumented app: an OpenTelemetry ``SpanProcessor`` that reads agent spans.

Add :class:`GenAISpanProcessor` to the ``TracerProvider`` your app (or its
instrumentation) already uses, and loopobs observers see the app's agent runs::

    provider.add_span_processor(GenAISpanProcessor([PrometheusObserver(), JsonlRecorder(path)]))

It reads spans in two conventions:

- OpenTelemetry GenAI (``gen_ai.operation.name``: ``invoke_agent``, ``chat`` /
  ``text_completion`` / ``generate_content``, ``execute_tool``), as written by
  OpenLLMetry, the contrib instrumentations, Logfire, pydantic-ai, the OpenAI
  Agents SDK exporters…;
- OpenInference (``openinference.span.kind``: ``AGENT``, ``LLM``, ``TOOL``; ``llm.*``,
  ``tool.*``), as written by every OpenInference instrumentation.

What becomes what: an agent span is a run (nested agent spans are runs of their
own); model and tool spans belong to the run of their nearest agent ancestor, or,
when they have none (``group_by="trace"``, the default), to one run per trace,
which ends when the trace's local root span ends. A model span is one model call
(a turn begins with it; usage from ``gen_ai.usage.*`` or ``llm.token_count.*``);
a tool span is one tool call attempt (arguments and result from
``gen_ai.tool.call.*`` or ``tool.id`` / ``tool.parameters`` / ``input.value`` /
``output.value``).
Spans reach a processor when they end, children before parents, so each model or
tool span is reported, with its own start and end times, when it ends; the run
starts with its agent span (or the trace's first GenAI span).

Limits, by construction: the processor cannot stop a run (span processors only
watch; detector verdicts are still reported to every observer, and metrics,
Prometheus and the dashboards work), and it sees no streamed deltas (spans carry
no chunks). Repetition detection needs the tool spans to carry arguments or
results (content capture on in the instrumentation): without them every call of a
tool looks the same. Spans of loopobs's own tracing observer are ignored, so it
may share the provider; the processor's events are emitted in an empty OTel
context, so spans loopobs writes never nest under the app's.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from loopobs.adapters._extras import missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.trace import StatusCode
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("otel", "opentelemetry-sdk", "otel-adapter", exc) from exc

from loopobs.adapters._run import AdapterRun, RunTracker, ToolCall, shielded
from loopobs.contract.errors import Cancelled, LoopError, ModelError, ToolExecutionError
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg
from loopobs.exporters import catalog as c

__all__ = ["GenAISpanProcessor"]

_SESSION_NAMESPACE = uuid.UUID("0b5f8a52-3f0e-4d7c-8f7e-2a4f6c1d9e11")

# OpenInference attribute names (openinference-semantic-conventions), read only.
OI_SPAN_KIND = "openinference.span.kind"
OI_MODEL = "llm.model_name"
OI_PROVIDER = "llm.provider"
OI_SYSTEM = "llm.system"
OI_PROMPT_TOKENS = "llm.token_count.prompt"
OI_COMPLETION_TOKENS = "llm.token_count.completion"
OI_CACHE_READ = "llm.token_count.prompt_details.cache_read"
OI_CACHE_WRITE = "llm.token_count.prompt_details.cache_write"
OI_REASONING = "llm.token_count.completion_details.reasoning"
OI_FINISH_REASON = "llm.finish_reason"
OI_OUTPUT_MESSAGES = "llm.output_messages"
OI_TOOL_NAME = "tool.name"
OI_TOOL_PARAMETERS = "tool.parameters"
OI_TOOL_ID = "tool.id"
OI_TOOL_CALL_ID = "tool_call.id"
OI_INPUT = "input.value"
OI_OUTPUT = "output.value"
OI_AGENT_NAME = "agent.name"
OI_SESSION = "session.id"
OI_FIRST_TOKEN_EVENT = "First Token Stream Event"

_LEGACY_INPUT_TOKENS = "gen_ai.usage.prompt_tokens"
_LEGACY_OUTPUT_TOKENS = "gen_ai.usage.completion_tokens"
_LEGACY_SYSTEM = "gen_ai.system"
_CHUNK_EVENT = "gen_ai.content.completion.chunk"

_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_MAX_SPANS = 65536
"""Open spans the processor follows; beyond it the oldest are forgotten (their runs end)."""

Kind = Literal["agent", "model", "tool", "other"]


def _kind(attrs: Mapping[str, Any]) -> Kind:
    op = attrs.get(c.GEN_AI_OPERATION_NAME)
    if op == c.OP_INVOKE_AGENT:
        return "agent"
    if op in _MODEL_OPERATIONS:
        return "model"
    if op == c.OP_EXECUTE_TOOL:
        return "tool"
    oi = attrs.get(OI_SPAN_KIND)
    if oi == "AGENT":
        return "agent"
    if oi == "LLM":
        return "model"
    if oi == "TOOL":
        return "tool"
    return "other"


def _int(attrs: Mapping[str, Any], *names: str) -> int:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
    return 0


def _str(attrs: Mapping[str, Any], *names: str) -> str:
    for name in names:
        value = attrs.get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _tool_output(text: str) -> tuple[str, str | None, bool]:
    """(result, call id, failed) of a tool span's output.

    A serialized message (LangChain's ``ToolMessage``, as OpenInference records it)
    gives its content, its ``tool_call_id`` and its status; anything else is the
    result as it is.
    """
    if not text.startswith("{"):
        return text, None, False
    try:
        value = json.loads(text)
    except ValueError:
        return text, None, False
    data = value.get("data") if isinstance(value, dict) else None
    if not isinstance(data, dict) or "content" not in data:
        return text, None, False
    content = data["content"]
    call_id = data.get("tool_call_id")
    return (content if isinstance(content, str) else json.dumps(content),
            call_id if isinstance(call_id, str) else None, data.get("status") == "error")


def _usage(attrs: Mapping[str, Any]) -> Usage | None:
    names = (c.GEN_AI_USAGE_INPUT_TOKENS, c.GEN_AI_USAGE_OUTPUT_TOKENS, _LEGACY_INPUT_TOKENS,
             _LEGACY_OUTPUT_TOKENS, OI_PROMPT_TOKENS, OI_COMPLETION_TOKENS)
    if not any(n in attrs for n in names):
        return None
    return Usage(
        input_tokens=_int(attrs, c.GEN_AI_USAGE_INPUT_TOKENS, _LEGACY_INPUT_TOKENS,
                          OI_PROMPT_TOKENS),
        output_tokens=_int(attrs, c.GEN_AI_USAGE_OUTPUT_TOKENS, _LEGACY_OUTPUT_TOKENS,
                           OI_COMPLETION_TOKENS),
        cache_read_input_tokens=_int(attrs, c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
                                     OI_CACHE_READ),
        cache_write_input_tokens=_int(attrs, c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
                                      OI_CACHE_WRITE),
        reasoning_output_tokens=_int(attrs, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
                                     OI_REASONING),
    )


def _output(attrs: Mapping[str, Any]) -> tuple[str, list[ToolCall]]:
    """The response text and the tool calls it asks for, from either convention."""
    text: list[str] = []
    calls: list[ToolCall] = []
    raw = attrs.get(c.GEN_AI_OUTPUT_MESSAGES)
    if isinstance(raw, str):
        try:
            messages = json.loads(raw)
        except ValueError:
            messages = []
        for message in messages if isinstance(messages, list) else []:
            for part in message.get("parts", []) if isinstance(message, dict) else []:
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "text":
                    text.append(str(part.get("content") or ""))
                elif part.get("type") == "tool_call":
                    args = part.get("arguments")
                    calls.append(ToolCall(
                        str(part.get("id") or ""), str(part.get("name") or ""),
                        args if isinstance(args, dict)
                        else _json_object(args) if isinstance(args, str) else {}))
        return "".join(text), calls
    prefix = f"{OI_OUTPUT_MESSAGES}.0.message."
    content = attrs.get(prefix + "content")
    if isinstance(content, str):
        text.append(content)
    index = 0
    while True:
        call = f"{prefix}tool_calls.{index}.tool_call."
        name = attrs.get(call + "function.name")
        if name is None:
            break
        args = attrs.get(call + "function.arguments")
        calls.append(ToolCall(str(attrs.get(call + "id") or ""), str(name),
                              _json_object(args) if isinstance(args, str) else {}))
        index += 1
    return "".join(text), calls


def _error(span: ReadableSpan) -> str | None:
    """The error type of a failed span, or None when it did not fail."""
    if span.status.status_code is not StatusCode.ERROR:
        return None
    error_type = (span.attributes or {}).get(c.ERROR_TYPE)
    if isinstance(error_type, str) and error_type:
        return error_type
    for event in span.events:
        if event.name == "exception":
            found = (event.attributes or {}).get("exception.type")
            if isinstance(found, str):
                return found.rsplit(".", 1)[-1]
    return "Error"


def _first_chunk_ms(span: ReadableSpan) -> float | None:
    attrs = span.attributes or {}
    seconds = attrs.get(c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK)
    if isinstance(seconds, (int, float)):
        return float(seconds) * 1000.0
    start = span.start_time or 0
    for event in span.events:
        if event.name in (OI_FIRST_TOKEN_EVENT, _CHUNK_EVENT):
            return max(0.0, (event.timestamp - start) / 1e6)
    return None


@dataclass(slots=True, eq=False)
class _Node:
    """A started span the processor follows until it ends."""

    kind: Kind
    agent: int | None  # span id of the nearest agent span (itself for an agent span)
    root: int  # span id of the trace's local root
    start_ns: int


class GenAISpanProcessor(SpanProcessor):
    """Feeds loopobs observers from GenAI or OpenInference spans; never changes a span.

    Args:
        observers: observers to attach (metrics, Prometheus, JSONL, console…).
        detectors: as for every adapter (default: repetition and convergence);
            their verdicts are reported, but a span processor cannot stop a run.
        group_by: ``"trace"`` (default) groups model and tool spans without an
            agent ancestor into one run per trace; ``"agent"`` reports only what
            is under an agent span.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: share a :class:`~loopobs.adapters.RunTracker` (then ``observers``,
            ``detectors`` and ``prices`` are ignored).

    Thread-safe; its hooks never raise into the instrumented app. ``shutdown()``
    ends any run still open (status ``cancelled``), so no run stays counted active,
    and flushes the observers (shut them down yourself: they may be shared).
    """

    def __init__(self, observers: Iterable[LoopObserver] = (), *,
                 detectors: Iterable[LoopObserver] | None = None,
                 group_by: Literal["trace", "agent"] = "trace",
                 prices: PricesArg = None, tracker: RunTracker | None = None) -> None:
        if group_by not in ("trace", "agent"):
            raise ValueError("group_by must be 'trace' or 'agent'")
        self.tracker = tracker if tracker is not None else RunTracker(
            observers, detectors=detectors, prices=prices)
        self.group_by = group_by
        self._lock = threading.RLock()
        self._nodes: OrderedDict[int, _Node] = OrderedDict()
        self._runs: dict[int, AdapterRun] = {}  # agent or local-root span id → run

    @property
    def observers(self) -> ObserverSet:
        """The observers fed by this processor; attach and detach at any time."""
        return self.tracker.observers

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended."""
        return len(self._runs)

    # -- SpanProcessor ---------------------------------------------------------------------
    @shielded
    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Follow the span; an agent span starts its run."""
        if span.instrumentation_scope is not None and \
                span.instrumentation_scope.name == c.SCOPE_NAME:
            return
        sid = span.get_span_context().span_id
        attrs = span.attributes or {}
        kind = _kind(attrs)
        start = span.start_time or 0
        with self._lock:
            parent = self._nodes.get(span.parent.span_id) if span.parent is not None else None
            node = _Node(kind, parent.agent if parent else None,
                         parent.root if parent else sid, start)
            if kind == "agent":
                node.agent = sid
            self._nodes[sid] = node
            if len(self._nodes) > _MAX_SPANS:
                old_id, _ = self._nodes.popitem(last=False)
                self._end_run(old_id, None, None)
            if kind == "agent":
                self._start_run(sid, span, attrs, start, agent=True)

    @shielded
    def on_end(self, span: ReadableSpan) -> None:
        """Report a model or tool span; an agent span or a trace's local root ends its run."""
        span_context = span.get_span_context()
        if span_context is None:  # a ReadableSpan may lack one
            return
        sid = span_context.span_id
        with self._lock:
            node = self._nodes.pop(sid, None)
            if node is None:
                return
            attrs = span.attributes or {}
            kind = _kind(attrs) if node.kind == "other" else node.kind
            token = otel_context.attach(otel_context.Context())
            try:
                if kind in ("model", "tool"):
                    run = self._run_for(node, sid, span)
                    if run is not None:
                        if kind == "model":
                            self._model(run, sid, span, attrs)
                        else:
                            self._tool(run, sid, span, attrs)
                if kind == "agent" or node.root == sid:
                    self._end_run(sid, _error(span), span.end_time)
            finally:
                otel_context.detach(token)

    @shielded
    def shutdown(self) -> None:
        """End every run still open (status ``cancelled``) and flush the observers.

        The observers are not shut down: they may serve other sources too.
        """
        with self._lock:
            for key in list(self._runs):
                self._runs.pop(key).end(status="cancelled")
            self._nodes.clear()
        self.tracker.observers.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the observers; False if one of them failed to."""
        try:
            self.tracker.observers.force_flush(timeout_millis / 1000.0)
        except Exception:
            return False
        return True

    # -- runs ------------------------------------------------------------------------------
    def _start_run(self, key: int, span: ReadableSpan, attrs: Mapping[str, Any], start: int,
                   *, agent: bool) -> AdapterRun:
        session = _str(attrs, c.GEN_AI_CONVERSATION_ID, OI_SESSION)
        name = _str(attrs, c.GEN_AI_AGENT_NAME, OI_AGENT_NAME)
        if not name and agent:
            name = span.name.removeprefix(c.SPAN_INVOKE_AGENT).strip() or span.name
        run = self.tracker.start_run(
            agent=name or None, model=_str(attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL),
            session_id=uuid.uuid5(_SESSION_NAMESPACE, session) if session else None,
            time_ns=start)
        self._runs[key] = run
        return run

    def _run_for(self, node: _Node, sid: int, span: ReadableSpan) -> AdapterRun | None:
        if node.agent is not None:
            return self._runs.get(node.agent)
        if self.group_by == "agent":
            return None
        run = self._runs.get(node.root)
        if run is None:
            root = self._nodes.get(node.root)
            start = root.start_ns if root is not None else node.start_ns
            run = self._start_run(node.root, span, {}, start, agent=False)
        return run

    def _end_run(self, key: int, error_type: str | None, end_ns: int | None) -> None:
        run = self._runs.pop(key, None)
        if run is None:
            return
        error: LoopError | None = None
        if error_type in ("CancelledError", "KeyboardInterrupt"):
            error = Cancelled("the agent span ended cancelled")
        elif error_type:
            error = LoopError(f"the agent span ended with an error: {error_type}")
        run.end(error=error, time_ns=end_ns)

    # -- model and tool spans --------------------------------------------------------------
    def _model(self, run: AdapterRun, sid: int, span: ReadableSpan,
               attrs: Mapping[str, Any]) -> None:
        model = _str(attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL, c.GEN_AI_RESPONSE_MODEL)
        provider = _str(attrs, c.GEN_AI_PROVIDER_NAME, _LEGACY_SYSTEM, OI_PROVIDER, OI_SYSTEM)
        if not run.model_start(sid, model=model, provider=provider, time_ns=span.start_time):
            return
        error_type = _error(span)
        if error_type is not None:
            run.model_error(sid, ModelError(error_type, provider=provider or None),
                            time_ns=span.end_time)
            return
        text, calls = _output(attrs)
        reasons = attrs.get(c.GEN_AI_RESPONSE_FINISH_REASONS)
        finish = reasons[0] if isinstance(reasons, (tuple, list)) and reasons else \
            _str(attrs, OI_FINISH_REASON) or None
        run.model_end(sid, usage=_usage(attrs), text=text, tool_calls=calls,
                      finish_reason=str(finish) if finish else None,
                      response_id=_str(attrs, c.GEN_AI_RESPONSE_ID) or None,
                      response_model=_str(attrs, c.GEN_AI_RESPONSE_MODEL) or None,
                      time_to_first_token_ms=_first_chunk_ms(span), time_ns=span.end_time)

    def _tool(self, run: AdapterRun, sid: int, span: ReadableSpan,
              attrs: Mapping[str, Any]) -> None:
        name = _str(attrs, c.GEN_AI_TOOL_NAME, OI_TOOL_NAME) or \
            span.name.removeprefix(c.SPAN_EXECUTE_TOOL).strip() or "tool"
        raw_args = _str(attrs, c.GEN_AI_TOOL_CALL_ARGUMENTS, OI_TOOL_PARAMETERS, OI_INPUT)
        result, output_call_id, failed = _tool_output(
            _str(attrs, c.GEN_AI_TOOL_CALL_RESULT, OI_OUTPUT))
        run.tool_start(sid, tool=name,
                       call_id=_str(attrs, c.GEN_AI_TOOL_CALL_ID, OI_TOOL_ID,
                                    OI_TOOL_CALL_ID) or output_call_id,
                       arguments=_json_object(raw_args) if raw_args else None,
                       time_ns=span.start_time)
        error_type = _error(span) or ("ToolException" if failed else None)
        error = ToolExecutionError(f"the tool span ended with an error: {error_type}",
                                   tool=name, error_type=error_type) if error_type else None
        run.tool_end(sid, result=result or None, error=error, time_ns=span.end_time)
