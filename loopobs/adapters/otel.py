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
  ``tool.*``), as written by every OpenInference instrumentation;
- the frameworks' own spans: Google ADK (1.x ``agent_run [NAME]`` / ``call_llm`` and 2.x),
  Strands Agents (legacy and latest shapes), Microsoft Agent Framework, AG2, AutoGen
  AgentChat (no content on its tool spans: their arguments are the model's calls with the
  same call id) and the Anthropic SDK (``anthropic.*``), with their own content attributes
  and events.

What becomes what: an agent span is a run (nested agent spans are runs of their
own); model and tool spans belong to the run of their nearest agent ancestor, or,
when they have none (``group_by="trace"``, the default), to one run per trace,
which ends when the trace's local root span ends (or, if later, the last of its
model and tool spans: a root may end before its children). A model span is one model call
(a turn begins with it; usage from ``gen_ai.usage.*`` or ``llm.token_count.*``);
a tool span is one tool call attempt (arguments and result from
``gen_ai.tool.call.*`` or ``input.value`` / ``output.value``; never
``tool.parameters``, the tool's schema). A model span nested in another model span,
or sharing an overlapping span's response id, is the same call, counted once; so is a
model span that is a trace by itself inside the time of a model span of another trace
with the same model and usage (OpenInference's OpenAI span, which its LangChain
instrumentor does not make a child of the LangChain ``LLM`` span): such a span is held
back while spans of other traces that began before it are open, dropped if one of them
is its request, and reported when they have ended.
Spans reach a processor when they end, children before parents, so each model or
tool span is reported, with its own start and end times, when it ends; the run
starts with its agent span (classified again when its first child starts, for
frameworks that name it just after it starts) or the trace's first GenAI span.
A trace that is one GenAI span (an app with no span around its calls) is a run
of its own, in a session shared by all such runs, so the detectors see them together.

Limits, by construction: the processor cannot stop a run (span processors only
watch; detector verdicts are still reported to every observer, and metrics,
Prometheus and the dashboards work), and it sees no streamed deltas (spans carry
no chunks). Repetition detection needs the tool spans to carry arguments or
results (content capture on in the instrumentation): a call with neither is not
counted by the repetition detector (no false alarm, no detection). Spans of
loopobs's own tracing observer are ignored, so it may share the provider; the
processor's events are emitted in an empty OTel context, so spans loopobs writes
never nest under the app's.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from loopobs.adapters._extras import missing_extra

try:
    from opentelemetry import context as otel_context
    from opentelemetry.sdk.trace import Event, ReadableSpan, Span, SpanProcessor
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
    from opentelemetry.trace import StatusCode
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("otel", "opentelemetry-sdk", "otel-adapter", exc) from exc

from loopobs.adapters._run import AdapterRun, FrameworkToolCall, RunTracker, shielded, token_count
from loopobs.contract.errors import Cancelled, LoopError, ModelError, ToolExecutionError
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.contract.token_counts import plausible_token_count
from loopobs.cost.pricing import PricesArg
from loopobs.exporters import catalog as c

__all__ = ["ContentStrippingExporter", "GenAISpanProcessor"]

logger = logging.getLogger("loopobs.adapters")

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
OI_TOOL_PARAMETERS = "tool.parameters"  # the tool's JSON schema: never read as arguments
OI_TOOL_ID = "tool.id"
OI_TOOL_CALL_ID = "tool_call.id"
OI_TOOL_CALL_ARGUMENTS = "tool_call.function.arguments"
OI_INPUT = "input.value"
OI_OUTPUT = "output.value"
OI_AGENT_NAME = "agent.name"
OI_SESSION = "session.id"
OI_FIRST_TOKEN_EVENT = "First Token Stream Event"

_LEGACY_INPUT_TOKENS = "gen_ai.usage.prompt_tokens"
_LEGACY_OUTPUT_TOKENS = "gen_ai.usage.completion_tokens"
_LEGACY_SYSTEM = "gen_ai.system"
_CHUNK_EVENT = "gen_ai.content.completion.chunk"

# Attributes of the native emitters, read where the conventions' own are absent.
ADK_LLM_SPAN = "call_llm"  # Google ADK 1.x: its model span has no gen_ai.operation.name
ADK_AGENT_SPAN = "agent_run ["  # Google ADK 1.x: "agent_run [NAME]", with no attributes
# OpenInference's smolagents instrumentor names an agent's span "NAME.run" and gives no name
# attribute; its runs carry smolagents.max_steps.
SMOLAGENTS_MAX_STEPS = "smolagents.max_steps"
SMOLAGENTS_RUN_SUFFIX = ".run"
ADK_TOOL_ARGS = "gcp.vertex.agent.tool_call_args"
ADK_TOOL_RESPONSE = "gcp.vertex.agent.tool_response"
ADK_SESSION = "gcp.vertex.agent.session_id"
# what ADK writes in its tool attributes when content is off (or not applicable): no content
ADK_PLACEHOLDERS = frozenset({"{}", "N/A", "<not specified>"})
ANTHROPIC_TOOL_RESULT = "anthropic.tool_result.content"
# Strands: content on span events. Its legacy (default) shape puts a tool's arguments on
# gen_ai.tool.message (content) and its result on gen_ai.choice (message); the latest
# shape puts messages on the conventions' details event, not on the span.
STRANDS_TOOL_MESSAGE = "gen_ai.tool.message"
STRANDS_CHOICE = "gen_ai.choice"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
ANTHROPIC_SESSION = "anthropic.session.id"

_MODEL_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
_ARGUMENT_ATTRIBUTES = (
    c.GEN_AI_TOOL_CALL_ARGUMENTS,
    OI_TOOL_CALL_ARGUMENTS,
    OI_INPUT,
    ADK_TOOL_ARGS,
)
_RESULT_ATTRIBUTES = (
    c.GEN_AI_TOOL_CALL_RESULT,
    OI_OUTPUT,
    ANTHROPIC_TOOL_RESULT,
    ADK_TOOL_RESPONSE,
)
_LONE = -1
"""The key under which the runs of one-span traces remember response ids (span ids are > 0)."""
_MAX_ASKED = 256
"""Tool calls asked for and not yet run that a run remembers (the latest)."""
_MAX_RESPONSE_IDS = 1024
"""Response ids remembered per run, to count a call described by two spans once."""
_MAX_SPANS = 65536
"""Open spans the processor follows; beyond it the oldest are forgotten (as if they ended)."""
_LOG_INTERVAL_S = 60.0

Kind = Literal["agent", "model", "tool", "other"]


def _kind(attrs: Mapping[str, Any], name: str = "") -> Kind:
    """What a span is, from its attributes (and, for ADK 1.x's ``call_llm``, its name)."""
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
    if op is None and oi is None:
        if name == ADK_LLM_SPAN:
            return "model"
        if name.startswith(ADK_AGENT_SPAN) and name.endswith("]"):
            return "agent"
    return "other"


class _Skipped:
    """Attributes of one span that were malformed and skipped (counted by the processor)."""

    __slots__ = ("names",)

    def __init__(self) -> None:
        self.names: list[str] = []

    def add(self, name: str) -> None:
        self.names.append(name)


def _count(attrs: Mapping[str, Any], skipped: _Skipped, *names: str) -> Any:
    """The first of ``names`` present, as a token count; 0 if none is.

    A present count that is not plausible (NaN, infinite, fractional, negative,
    absurd, not a number) is skipped here and passed on as it is, so that
    :meth:`~loopobs.adapters.AdapterRun.model_end` makes it unknown (and the
    call's cost with it), as for every adapter.
    """
    for name in names:
        if name not in attrs:
            continue
        value = token_count(attrs[name])
        if plausible_token_count(value) is None:
            skipped.add(name)
        return value
    return 0


def _str(attrs: Mapping[str, Any], *names: str) -> str:
    for name in names:
        value = attrs.get(name)
        if (
            isinstance(value, str)
            and value
            and not (name in (ADK_TOOL_ARGS, ADK_TOOL_RESPONSE) and value in ADK_PLACEHOLDERS)
        ):
            return value
    return ""


def _loads(text: str, name: str, skipped: _Skipped) -> Any:
    """``text`` parsed as JSON; None (and skipped) if it is not JSON or nests too deep."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        skipped.add(name)
        return None


def _arguments(text: str, name: str, skipped: _Skipped) -> dict[str, Any] | None:
    """Tool arguments from their JSON text: an object as is, another value as ``input``.

    Text that is not JSON is the ``input`` itself; JSON nested too deep to parse
    is skipped (no arguments).
    """
    try:
        value = json.loads(text)
    except RecursionError:
        skipped.add(name)
        return None
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}


def _tool_output(text: str, skipped: _Skipped) -> tuple[str, str | None, bool]:
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
    except RecursionError:
        skipped.add(OI_OUTPUT)
        return text, None, False
    data = value.get("data") if isinstance(value, dict) else None
    if not isinstance(data, dict) or "content" not in data:
        return text, None, False
    content = data["content"]
    call_id = data.get("tool_call_id")
    if not isinstance(content, str):
        try:
            content = json.dumps(content)
        except (TypeError, ValueError, RecursionError):
            skipped.add(OI_OUTPUT)
            return text, None, False
    return content, call_id if isinstance(call_id, str) else None, data.get("status") == "error"


def _sends_no_request(name: str, attrs: Mapping[str, Any]) -> bool:
    """Whether an LLM span only prepares a request: OpenInference's LlamaIndex
    instrumentation writes ``OpenAI._prepare_chat_with_tools`` (kind ``LLM``, no usage,
    no messages) beside the span of the call itself."""
    return (
        "._prepare_" in name
        and attrs.get(OI_SPAN_KIND) == "LLM"
        and not any(
            n in attrs
            for n in (
                OI_PROMPT_TOKENS,
                OI_COMPLETION_TOKENS,
                OI_FINISH_REASON,
                c.GEN_AI_USAGE_INPUT_TOKENS,
            )
        )
    )


def _blocks_text(text: str) -> str:
    """The text of a result written as text blocks (the Anthropic SDK's
    ``[{"type": "text", "text": ...}]``, Strands' ``[{"text": ...}]``), else ``text``."""
    if not text.startswith("[{"):
        return text
    try:
        blocks = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(blocks, list) or not all(
        isinstance(b, dict) and b.get("type", "text") == "text" and isinstance(b.get("text"), str)
        for b in blocks
    ):
        return text
    return "".join(b["text"] for b in blocks)


def _event_str(span: ReadableSpan, event: str, name: str) -> str:
    """The first non-empty string attribute ``name`` of an event ``event`` of ``span``."""
    for item in span.events:
        if item.name == event:
            value = (item.attributes or {}).get(name)
            if isinstance(value, str) and value:
                return value
    return ""


def _usage(attrs: Mapping[str, Any], skipped: _Skipped) -> Usage | None:
    names = (
        c.GEN_AI_USAGE_INPUT_TOKENS,
        c.GEN_AI_USAGE_OUTPUT_TOKENS,
        _LEGACY_INPUT_TOKENS,
        _LEGACY_OUTPUT_TOKENS,
        OI_PROMPT_TOKENS,
        OI_COMPLETION_TOKENS,
    )
    if not any(n in attrs for n in names):
        return None
    return Usage(
        input_tokens=_count(
            attrs, skipped, c.GEN_AI_USAGE_INPUT_TOKENS, _LEGACY_INPUT_TOKENS, OI_PROMPT_TOKENS
        ),
        output_tokens=_count(
            attrs,
            skipped,
            c.GEN_AI_USAGE_OUTPUT_TOKENS,
            _LEGACY_OUTPUT_TOKENS,
            OI_COMPLETION_TOKENS,
        ),
        cache_read_input_tokens=_count(
            attrs, skipped, c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, OI_CACHE_READ
        ),
        cache_write_input_tokens=_count(
            attrs,
            skipped,
            c.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS,
            c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
            OI_CACHE_WRITE,
        ),
        reasoning_output_tokens=_count(
            attrs, skipped, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, OI_REASONING
        ),
    )


def _output(
    attrs: Mapping[str, Any], skipped: _Skipped, span: ReadableSpan | None = None
) -> tuple[str, list[FrameworkToolCall]]:
    """The response text and the tool calls it asks for, from either convention.

    Messages or parts of an unexpected shape are skipped (counted once per span).
    """
    text: list[str] = []
    calls: list[FrameworkToolCall] = []
    name = c.GEN_AI_OUTPUT_MESSAGES
    raw = attrs.get(name)
    if raw is None and span is not None:
        raw = _event_str(span, DETAILS_EVENT, name) or None
    if isinstance(raw, str):
        messages = _loads(raw, name, skipped)
        malformed = not isinstance(messages, list)
        for message in messages if isinstance(messages, list) else []:
            parts = message.get("parts") if isinstance(message, dict) else None
            if (
                parts is None
                and isinstance(message, dict)
                and ("content" in message or "tool_calls" in message)
            ):
                # OpenAI-style messages (AG2 writes them so): content and tool_calls
                malformed |= not _openai_message(message, text, calls, name, skipped)
                continue
            if not isinstance(parts, list):
                malformed = True
                continue
            for part in parts:
                if not isinstance(part, dict):
                    malformed = True
                    continue
                if part.get("type") == "text":
                    text.append(str(part.get("content") or ""))
                elif part.get("type") == "tool_call":
                    args = part.get("arguments")
                    calls.append(
                        FrameworkToolCall(
                            str(part.get("id") or ""),
                            str(part.get("name") or ""),
                            args
                            if isinstance(args, dict)
                            else (_arguments(args, name, skipped) or {})
                            if isinstance(args, str)
                            else {},
                        )
                    )
        if malformed and messages is not None:
            skipped.add(name)
        return "".join(text), calls
    prefix = f"{OI_OUTPUT_MESSAGES}.0.message."
    content = attrs.get(prefix + "content")
    if isinstance(content, str):
        text.append(content)
    index = 0
    while True:
        call = f"{prefix}tool_calls.{index}.tool_call."
        call_name = attrs.get(call + "function.name")
        if call_name is None:
            break
        args = attrs.get(call + "function.arguments")
        arguments = (
            _arguments(args, call + "function.arguments", skipped)
            if isinstance(args, str)
            else None
        )
        calls.append(
            FrameworkToolCall(str(attrs.get(call + "id") or ""), str(call_name), arguments or {})
        )
        index += 1
    return "".join(text), calls


def _openai_message(
    message: dict[str, Any],
    text: list[str],
    calls: list[FrameworkToolCall],
    name: str,
    skipped: _Skipped,
) -> bool:
    """Read an OpenAI-style message's text and tool calls; False if it is malformed."""
    content = message.get("content")
    if isinstance(content, str):
        text.append(content)
    elif content is not None:
        return False
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        return False
    for call in raw_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            return False
        args = function.get("arguments")
        calls.append(
            FrameworkToolCall(
                str(call.get("id") or ""),
                str(function.get("name") or ""),
                args
                if isinstance(args, dict)
                else (_arguments(args, name, skipped) or {})
                if isinstance(args, str)
                else {},
            )
        )
    return True


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


def _first_chunk_ms(span: ReadableSpan, skipped: _Skipped) -> float | None:
    attrs = span.attributes or {}
    name = c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
    seconds = attrs.get(name)
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        if math.isfinite(seconds) and seconds >= 0:
            return float(seconds) * 1000.0
        skipped.add(name)
    start = span.start_time or 0
    for event in span.events:
        if event.name in (OI_FIRST_TOKEN_EVENT, _CHUNK_EVENT):
            return max(0.0, (event.timestamp - start) / 1e6)
    return None


def _seen(table: dict[int, OrderedDict[str, None]], key: int, item: str) -> bool:
    """Whether run ``key`` already had ``item`` in ``table``; remembers it (bounded)."""
    seen = table.get(key)
    if seen is None:
        seen = table[key] = OrderedDict()
    if item in seen:
        return True
    seen[item] = None
    if len(seen) > _MAX_RESPONSE_IDS:
        seen.popitem(last=False)
    return False


@dataclass(slots=True, eq=False)
class _Node:
    """A started span the processor follows until it ends."""

    kind: Kind
    agent: int | None  # span id of the nearest agent span (itself for an agent span)
    root: int  # span id of the trace's local root
    start_ns: int
    holds_run: bool = True  # whether the run waits for this span's end
    parent: int | None = None  # span id of its parent, when the processor follows it
    # The live span while its kind may still change: frameworks (ADK, Strands, MAF)
    # set gen_ai.operation.name and gen_ai.agent.name just after the span starts.
    span: Span | None = None
    covered: bool = False  # a model span nested in it was reported (so it is no call itself)

    @property
    def owner(self) -> int:
        """The span whose run this span reports into: its agent, else its trace's local root."""
        return self.agent if self.agent is not None else self.root


@dataclass(slots=True, eq=False)
class _Held:
    """A model span that is a trace by itself, held back (see ``GenAISpanProcessor._hold``)."""

    node: _Node
    span: ReadableSpan
    attrs: Mapping[str, Any]
    waits_for: set[int]  # the open spans of other traces around it


def _same_request(outer: ReadableSpan, attrs: Mapping[str, Any], held: _Held) -> bool:
    """Whether model span ``outer`` and the held one describe one request: ``outer`` lasts
    from before to after it, and they name the same model and report the same usage (or the
    same response id)."""
    inner = held.span
    if not (
        (outer.start_time or 0) <= (inner.start_time or 0)
        and (inner.end_time or 0) <= (outer.end_time or 0)
    ):
        return False
    ids = (_str(attrs, c.GEN_AI_RESPONSE_ID), _str(held.attrs, c.GEN_AI_RESPONSE_ID))
    if ids[0] and ids[1]:
        return ids[0] == ids[1]
    model = _str(attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL, c.GEN_AI_RESPONSE_MODEL)
    held_model = _str(held.attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL, c.GEN_AI_RESPONSE_MODEL)
    if model and held_model and model != held_model:
        return False
    usage, held_usage = _usage(attrs, _Skipped()), _usage(held.attrs, _Skipped())
    return usage is not None and usage == held_usage


_MAX_HELD = 1024
"""One-span model traces held back at most; past it the oldest is reported."""


@dataclass(slots=True, eq=False)
class _Owner:
    """An agent span or a local root, and the spans of its run that have not ended yet."""

    start_ns: int
    open_spans: int = 0
    ended: bool = False
    error_type: str | None = None
    end_ns: int | None = None


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

    A run ends when its agent span (or its trace's local root) and every span
    reported into it have ended, whichever ends last, so a root that ends before
    its children (a request handler returning while the model call finishes)
    neither loses them nor leaves the run open. At most 65,536 open spans are
    followed; past that the oldest is forgotten as if it had ended, so a trace
    whose spans never end cannot keep runs open without bound.

    Attributes of an unexpected shape (a NaN or negative token count, ``parts``
    that is not a list, arguments nested too deep to parse) are skipped, counted
    in :attr:`skipped_attributes` and logged (at most once a minute); the span
    is still reported with what could be read, and its run still ends.

    Thread-safe; its hooks never raise into the instrumented app. ``shutdown()``
    ends any run still open (status ``cancelled``), so no run stays counted active,
    and flushes the observers (shut them down yourself: they may be shared).
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        group_by: Literal["trace", "agent"] = "trace",
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
    ) -> None:
        if group_by not in ("trace", "agent"):
            raise ValueError("group_by must be 'trace' or 'agent'")
        self.tracker = (
            tracker
            if tracker is not None
            else RunTracker(observers, detectors=detectors, prices=prices)
        )
        self.group_by = group_by
        self._lock = threading.RLock()
        self._nodes: OrderedDict[int, _Node] = OrderedDict()
        self._owners: dict[int, _Owner] = {}  # agent or local-root span id → its open spans
        self._runs: dict[int, AdapterRun] = {}  # agent or local-root span id → run
        self._skipped = 0
        self._last_log = float("-inf")
        self._closed = False
        # response ids reported per run (agent or local-root span id): a call two spans
        # describe (a framework's and its provider SDK's) is reported once
        self._responses: dict[int, OrderedDict[str, tuple[int, int]]] = {}
        # call ids of the tool spans reported per run: ADK 2.x ends a model span after the
        # tools it asked for, and a call must not be received again when it ends
        self._tool_ids: dict[int, OrderedDict[str, None]] = {}
        # calls the model asked for per run, (id, tool) in order, not yet seen run: a tool
        # span without a call id (OpenInference's LlamaIndex spans) is the first of its tool
        self._asked: dict[int, list[tuple[str, str]]] = {}
        # the session of runs whose trace is one GenAI span (an app with no span of its
        # own around its calls): such runs share it, so the detectors see them together
        self._lone_session = uuid.uuid4()
        # one-span model traces held back while a span of another trace that may describe
        # the same request is open (OpenInference's OpenAI span is no child of its LangChain
        # span): reported when those have ended, dropped when one of them is that request
        self._held: OrderedDict[int, _Held] = OrderedDict()

    @property
    def observers(self) -> ObserverSet:
        """The observers fed by this processor; attach and detach at any time."""
        return self.tracker.observers

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended."""
        return len(self._runs)

    def run_of(self, span: Any = None) -> AdapterRun | None:
        """The loopobs run that ``span`` (default: the current span) reports into, if any.

        For hooks that can end a framework's run (a stop adapter, e.g. CrewAI's step
        callback): ``run_of().raise_if_stopped()`` raises the run's
        :class:`~loopobs.adapters.RunStopped` once the loop policy stopped it.
        """
        if span is None:
            from opentelemetry import trace

            span = trace.get_current_span()
        sid = span.get_span_context().span_id
        with self._lock:
            node = self._nodes.get(sid)
            if node is None:
                return None
            return self._runs.get(node.owner)

    @property
    def skipped_attributes(self) -> int:
        """Span attributes skipped because their values were malformed (see the class doc)."""
        return self._skipped

    # -- SpanProcessor ---------------------------------------------------------------------
    @shielded
    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        """Follow the span; an agent span starts its run."""
        if (
            span.instrumentation_scope is not None
            and span.instrumentation_scope.name == c.SCOPE_NAME
        ):
            return
        if self._closed:
            return
        sid = span.get_span_context().span_id
        attrs = span.attributes or {}
        kind = _kind(attrs, span.name)
        start = span.start_time or 0
        with self._lock:
            parent_id = span.parent.span_id if span.parent is not None else None
            parent = self._nodes.get(parent_id) if parent_id is not None else None
            if parent is not None and parent.kind == "other" and parent_id is not None:
                self._classify_late(parent_id, parent)
            node = _Node(
                kind,
                parent.agent if parent else None,
                parent.root if parent else sid,
                start,
                parent=parent_id if parent is not None else None,
                span=span if kind == "other" else None,
            )
            if kind == "agent":
                node.agent = sid
            # A run waits for its own span and its model and tool spans; the app's other
            # spans (one it never ends, say) must not keep it open.
            node.holds_run = kind != "other" or node.owner == sid
            self._nodes[sid] = node
            if node.holds_run:
                owner = self._owners.get(node.owner)
                if owner is None:
                    owner = self._owners[node.owner] = _Owner(start)
                owner.open_spans += 1
            if len(self._nodes) > _MAX_SPANS:
                old_id, old = self._nodes.popitem(last=False)
                self._release(old_id, old, None, None)
            if kind == "agent":
                self._start_run(sid, span.name, attrs, start, agent=True)

    @shielded
    def on_end(self, span: ReadableSpan) -> None:
        """Report a model or tool span; the last span of a run to end ends the run."""
        if self._closed:
            return
        span_context = span.get_span_context()
        if span_context is None:  # a ReadableSpan may lack one
            return
        sid = span_context.span_id
        with self._lock:
            node = self._nodes.get(sid)
            if node is None:
                return
            token = otel_context.attach(otel_context.Context())
            try:
                attrs = span.attributes or {}
                # A span that says it is an agent only at its end (OpenInference sets its
                # attributes then) stays what it was: its children were reported already.
                kind = _kind(attrs, span.name) if node.kind == "other" else node.kind
                del self._nodes[sid]
                if kind in ("model", "tool"):
                    self._report(kind, node, sid, span, attrs)
            finally:
                try:
                    self._release(sid, node, _error(span), span.end_time)
                    if self._held:
                        self._settle_held(sid)
                finally:
                    otel_context.detach(token)

    @shielded
    def shutdown(self) -> None:
        """End every run still open (status ``cancelled``) and flush the observers.

        From then on the processor ignores spans (``provider.shutdown()`` calls this;
        spans that end after it feed no observer). The observers are not shut down:
        they may serve other sources too.
        """
        with self._lock:
            for held_id, held in list(self._held.items()):
                del self._held[held_id]
                self._report_held(held_id, held)
            self._closed = True
            for key in list(self._runs):
                self._runs.pop(key).end(status="cancelled")
            self._nodes.clear()
            self._owners.clear()
            self._responses.clear()
            self._tool_ids.clear()
            self._asked.clear()
        self.tracker.observers.force_flush()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the observers; False if one of them failed to."""
        try:
            self.tracker.observers.force_flush(timeout_millis / 1000.0)
        except Exception:
            return False
        return True

    # -- runs ------------------------------------------------------------------------------
    def _start_run(
        self,
        key: int,
        span_name: str,
        attrs: Mapping[str, Any],
        start: int,
        *,
        agent: bool,
        session_attrs: Mapping[str, Any] | None = None,
        lone: bool = False,
    ) -> AdapterRun:
        session = _str(
            attrs if session_attrs is None else session_attrs,
            c.GEN_AI_CONVERSATION_ID,
            OI_SESSION,
            ADK_SESSION,
            ANTHROPIC_SESSION,
        )
        name = _str(attrs, c.GEN_AI_AGENT_NAME, OI_AGENT_NAME)
        if not name and agent:
            if span_name.startswith(ADK_AGENT_SPAN) and span_name.endswith("]"):
                name = span_name[len(ADK_AGENT_SPAN) : -1]
            elif SMOLAGENTS_MAX_STEPS in attrs and span_name.endswith(SMOLAGENTS_RUN_SUFFIX):
                name = span_name.removesuffix(SMOLAGENTS_RUN_SUFFIX) or span_name
            else:
                name = span_name.removeprefix(c.SPAN_INVOKE_AGENT).strip() or span_name
        run = self.tracker.start_run(
            agent=name or None,
            model=_str(attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL),
            session_id=uuid.uuid5(_SESSION_NAMESPACE, session)
            if session
            else self._lone_session
            if lone
            else None,
            time_ns=start,
        )
        self._runs[key] = run
        return run

    def _classify_late(self, sid: int, node: _Node) -> None:
        """``node``, followed as another span, is an agent span if its attributes now say so.

        ADK, Strands and Microsoft Agent Framework set ``gen_ai.operation.name`` and
        ``gen_ai.agent.name`` (and the conversation id) just after the span starts:
        this is asked, of the live span, each time a child of it starts, so the run
        starts before anything is reported under it.
        """
        span = node.span
        if span is None:
            return
        name = span.name
        attrs = span.attributes or {}
        if _kind(attrs, name) != "agent":
            return
        node.kind, node.agent, node.span = "agent", sid, None
        if not node.holds_run:
            # It waited for nothing (another span of its run); now its own run waits for it.
            node.holds_run = True
            self._owners[sid] = _Owner(node.start_ns, open_spans=1)
        if sid not in self._runs:
            self._start_run(sid, name, attrs, node.start_ns, agent=True)

    def _run_for(
        self, node: _Node, sid: int, span: ReadableSpan, attrs: Mapping[str, Any]
    ) -> AdapterRun | None:
        """The run ``node`` reports into; for spans outside agents, opened on first use.

        A run of a trace that is this one span (an app with no span of its own around
        its calls) joins the processor's one session for such runs, unless the span
        names a conversation: the detectors then see its calls one after another.
        """
        if node.agent is not None:
            return self._runs.get(node.agent)
        if self.group_by == "agent":
            return None
        run = self._runs.get(node.root)
        if run is None:
            owner = self._owners.get(node.root)
            start = owner.start_ns if owner is not None else node.start_ns
            run = self._start_run(
                node.root,
                span.name,
                {},
                start,
                agent=False,
                session_attrs=attrs,
                lone=node.root == sid,
            )
        return run

    def _cover(self, node: _Node) -> None:
        """A model span ended: a model span around it describes the same call.

        A framework's model span holding its provider SDK's (Strands, MAF, AG2 with
        an instrumented client; OpenInference's LangChain span around its OpenAI one)
        is one call: the inner span, which ends first, reports it, and the outer one is
        skipped. Every ancestor up to the agent is marked, because an ancestor may say
        it is a model span only at its end (OpenInference sets its attributes then).
        """
        parent = node.parent
        while parent is not None:
            above = self._nodes.get(parent)
            if above is None or above.kind == "agent":
                return
            above.covered = True
            parent = above.parent

    def _seen_response(self, key: int, span: ReadableSpan, attrs: Mapping[str, Any]) -> bool:
        """Whether a model span of run ``key`` with this response id, overlapping this one
        in time, was already reported: two spans of one request.

        Spans that do not overlap are two requests, even with one id (a server or a mock
        that answers every request with the same id must not lose calls).
        """
        response_id = _str(attrs, c.GEN_AI_RESPONSE_ID)
        if not response_id:
            return False
        start, end = span.start_time or 0, span.end_time or 0
        seen = self._responses.get(key)
        if seen is None:
            seen = self._responses[key] = OrderedDict()
        before = seen.get(response_id)
        if before is not None and start <= before[1] and before[0] <= end:
            return True
        seen[response_id] = (start, end)
        seen.move_to_end(response_id)
        if len(seen) > _MAX_RESPONSE_IDS:
            seen.popitem(last=False)
        return False

    def _release(self, sid: int, node: _Node, error_type: str | None, end_ns: int | None) -> None:
        """``sid`` ended (or was forgotten); its run ends once nothing of it is open."""
        key = node.owner
        owner = self._owners.get(key)
        if owner is None:
            # Everything the run waited for was over before this span (it became a model
            # or tool span only at its end): a run its report opened ends with it.
            self._end_run(key, None, end_ns)
            return
        if not node.holds_run:
            return
        if sid == key:
            owner.ended, owner.error_type = True, error_type
        if end_ns is not None and (owner.end_ns is None or end_ns > owner.end_ns):
            owner.end_ns = end_ns
        owner.open_spans -= 1
        if owner.open_spans > 0:
            return
        del self._owners[key]
        # The owner's own span is counted too, so nothing open means it ended as well
        # (or was forgotten, its end never seen: then the run ends cancelled).
        self._end_run(key, owner.error_type, owner.end_ns, seen=owner.ended)

    def _end_run(
        self, key: int, error_type: str | None, end_ns: int | None, *, seen: bool = True
    ) -> None:
        self._responses.pop(key, None)
        self._tool_ids.pop(key, None)
        self._asked.pop(key, None)
        run = self._runs.pop(key, None)
        if run is None:
            return
        error: LoopError | None = None
        if not seen:
            error = Cancelled("the processor stopped following the span before it ended")
        elif error_type in ("CancelledError", "KeyboardInterrupt"):
            error = Cancelled("the agent span ended cancelled")
        elif error_type:
            error = LoopError(f"the agent span ended with an error: {error_type}")
        run.end(error=error, time_ns=end_ns)

    def _skip(self, span: ReadableSpan, skipped: _Skipped) -> None:
        """Count (and now and then log) what ``span`` had malformed."""
        self._skipped += len(skipped.names)
        now = time.monotonic()
        if now - self._last_log >= _LOG_INTERVAL_S:
            self._last_log = now
            logger.warning(
                "span %r had malformed attributes (%s); they were skipped (%d so far)",
                span.name,
                ", ".join(sorted(set(skipped.names))),
                self._skipped,
            )

    # -- model and tool spans --------------------------------------------------------------
    def _report(
        self, kind: Kind, node: _Node, sid: int, span: ReadableSpan, attrs: Mapping[str, Any]
    ) -> None:
        if kind == "model":
            if _sends_no_request(span.name, attrs):
                return
            self._cover(node)
            # Runs of one-span traces share their response ids, as they share a session.
            key = _LONE if node.agent is None and node.root == sid else node.owner
            if node.covered or self._seen_response(key, span, attrs):
                return  # the same call as a model span already reported
            if key == _LONE and self._hold(node, sid, span, attrs):
                return  # reported once the spans around it have ended, unless one is it
            if self._held:
                self._drop_held(span, attrs)
        self._report_now(kind, node, sid, span, attrs)

    def _report_now(
        self, kind: Kind, node: _Node, sid: int, span: ReadableSpan, attrs: Mapping[str, Any]
    ) -> None:
        run = self._run_for(node, sid, span, attrs)
        if run is None:
            return
        skipped = _Skipped()
        if kind == "model":
            self._model(run, sid, span, attrs, skipped, node.owner)
        else:
            self._tool(run, sid, span, attrs, skipped, node.owner)
        if skipped.names:
            self._skip(span, skipped)

    def _hold(self, node: _Node, sid: int, span: ReadableSpan, attrs: Mapping[str, Any]) -> bool:
        """Hold back a model span that is a trace by itself while spans of other traces that
        began before it are open: one of them may be a framework's span of the same request
        whose provider SDK span did not nest under it (OpenInference's LangChain and OpenAI
        instrumentors together: the OpenAI span is a trace of its own). That span, ending
        later, reports the call into its own run; the held one is then dropped."""
        start = span.start_time or 0
        around = {
            other
            for other, open_node in self._nodes.items()
            if open_node.root != node.root
            and open_node.kind in ("model", "other")
            and open_node.start_ns <= start
        }
        if not around:
            return False
        self._held[sid] = _Held(node, span, attrs, around)
        if len(self._held) > _MAX_HELD:
            old, held = self._held.popitem(last=False)
            self._report_held(old, held)
        return True

    def _drop_held(self, span: ReadableSpan, attrs: Mapping[str, Any]) -> None:
        """A model span ended: a held span it lasted around, of the same request, is it."""
        for held_id, held in list(self._held.items()):
            if _same_request(span, attrs, held):
                del self._held[held_id]
                return

    def _settle_held(self, ended: int) -> None:
        """``ended`` ended: report the held spans it was the last open span around."""
        for held_id, held in list(self._held.items()):
            held.waits_for.discard(ended)
            if not held.waits_for or not any(w in self._nodes for w in held.waits_for):
                del self._held[held_id]
                self._report_held(held_id, held)

    def _report_held(self, sid: int, held: _Held) -> None:
        """Report a held span now, as the run of its own it is, and end that run."""
        self._report_now("model", held.node, sid, held.span, held.attrs)
        self._end_run(held.node.root, _error(held.span), held.span.end_time)

    def _model(
        self,
        run: AdapterRun,
        sid: int,
        span: ReadableSpan,
        attrs: Mapping[str, Any],
        skipped: _Skipped,
        key: int,
    ) -> None:
        # Everything is read before the call is reported, so a span read halfway never
        # leaves its call open (to be ended as cancelled with the run).
        model = _str(attrs, c.GEN_AI_REQUEST_MODEL, OI_MODEL, c.GEN_AI_RESPONSE_MODEL)
        provider = _str(attrs, c.GEN_AI_PROVIDER_NAME, _LEGACY_SYSTEM, OI_PROVIDER, OI_SYSTEM)
        error_type = _error(span)
        if error_type is not None:
            if run.model_start(sid, model=model, provider=provider, time_ns=span.start_time):
                run.model_error(
                    sid, ModelError(error_type, provider=provider or None), time_ns=span.end_time
                )
            return
        text, calls = _output(attrs, skipped, span)
        ran = self._tool_ids.get(key)
        if ran:
            calls = [call for call in calls if not call.id or call.id not in ran]
        if calls:
            asked = self._asked.setdefault(key, [])
            asked.extend((call.id, call.name) for call in calls if call.id)
            del asked[:-_MAX_ASKED]
        reasons = attrs.get(c.GEN_AI_RESPONSE_FINISH_REASONS)
        finish = (
            reasons[0]
            if isinstance(reasons, (tuple, list)) and reasons
            else _str(attrs, OI_FINISH_REASON) or None
        )
        usage = _usage(attrs, skipped)
        first_chunk_ms = _first_chunk_ms(span, skipped)
        if not run.model_start(sid, model=model, provider=provider, time_ns=span.start_time):
            return
        run.model_end(
            sid,
            usage=usage,
            text=text,
            tool_calls=calls,
            finish_reason=str(finish) if finish else None,
            response_id=_str(attrs, c.GEN_AI_RESPONSE_ID) or None,
            response_model=_str(attrs, c.GEN_AI_RESPONSE_MODEL) or None,
            time_to_first_token_ms=first_chunk_ms,
            time_ns=span.end_time,
        )

    def _tool(
        self,
        run: AdapterRun,
        sid: int,
        span: ReadableSpan,
        attrs: Mapping[str, Any],
        skipped: _Skipped,
        key: int,
    ) -> None:
        name = (
            _str(attrs, c.GEN_AI_TOOL_NAME, OI_TOOL_NAME)
            or span.name.removeprefix(c.SPAN_EXECUTE_TOOL).strip()
            or "tool"
        )
        # Never OpenInference's tool.parameters: that is the tool's JSON schema, the same
        # for every call of the tool.
        args_name = next((n for n in _ARGUMENT_ATTRIBUTES if _str(attrs, n)), "")
        raw_args = _str(attrs, args_name) if args_name else ""
        if not raw_args:
            args_name = STRANDS_TOOL_MESSAGE
            raw_args = _event_str(span, STRANDS_TOOL_MESSAGE, "content")
        arguments = _arguments(raw_args, args_name, skipped) if raw_args else None
        raw_result = _str(attrs, *_RESULT_ATTRIBUTES) or _event_str(span, STRANDS_CHOICE, "message")
        result, output_call_id, failed = _tool_output(raw_result, skipped)
        if result and OI_OUTPUT not in attrs:
            result = _blocks_text(result)
        error_type = _error(span) or ("ToolException" if failed else None)
        error = (
            ToolExecutionError(
                f"the tool span ended with an error: {error_type}", tool=name, error_type=error_type
            )
            if error_type
            else None
        )
        call_id = _str(attrs, c.GEN_AI_TOOL_CALL_ID, OI_TOOL_ID, OI_TOOL_CALL_ID) or output_call_id
        asked = self._asked.get(key)
        if asked:
            # the model's call this span runs: its own id, else the first of its tool
            index = next(
                (
                    i
                    for i, (cid, tool) in enumerate(asked)
                    if cid == call_id or (not call_id and tool == name)
                ),
                None,
            )
            if index is not None:
                call_id = asked.pop(index)[0]
        if call_id:
            _seen(self._tool_ids, key, call_id)
        run.tool_start(
            sid, tool=name, call_id=call_id, arguments=arguments, time_ns=span.start_time
        )
        run.tool_end(sid, result=result or None, error=error, time_ns=span.end_time)


CONTENT_ATTRIBUTES: frozenset[str] = frozenset(
    {
        c.GEN_AI_INPUT_MESSAGES,
        c.GEN_AI_OUTPUT_MESSAGES,
        "gen_ai.system_instructions",
        c.GEN_AI_TOOL_CALL_ARGUMENTS,
        c.GEN_AI_TOOL_CALL_RESULT,
        OI_INPUT,
        OI_OUTPUT,
        ANTHROPIC_TOOL_RESULT,
        ADK_TOOL_ARGS,
        ADK_TOOL_RESPONSE,
        "gcp.vertex.agent.llm_request",
        "gcp.vertex.agent.llm_response",
        "gen_ai.prompt",
        "gen_ai.completion",
    }
)
"""Span attributes that hold message content, in the conventions the processor reads."""
CONTENT_PREFIXES: tuple[str, ...] = (
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
)
"""Prefixes of flattened content attributes (OpenInference's, OpenLLMetry's)."""
CONTENT_EVENTS: frozenset[str] = frozenset(
    {
        DETAILS_EVENT,
        STRANDS_TOOL_MESSAGE,
        STRANDS_CHOICE,
        "gen_ai.user.message",
        "gen_ai.assistant.message",
        "gen_ai.system.message",
    }
)
"""Span events that carry message content (the latest conventions' and the legacy ones)."""


class ContentStrippingExporter(SpanExporter):
    """Wraps the app's span exporter: spans leave the process without message content.

    With content capture on in the instrumentation, a :class:`GenAISpanProcessor` on the
    same provider hashes tool arguments and results for the detectors as the spans end;
    this exporter then removes the content attributes (:data:`CONTENT_ATTRIBUTES`, the
    flattened :data:`CONTENT_PREFIXES`) and content events (:data:`CONTENT_EVENTS`) from
    the copies it hands to ``exporter``, so nothing of it is exported::

        provider.add_span_processor(GenAISpanProcessor(observers))
        provider.add_span_processor(BatchSpanProcessor(ContentStrippingExporter(OTLPSpanExporter())))

    Spans themselves are never changed (other processors see them as they are); a
    stripped span gets ``loopobs.content.stripped = true``.
    """

    def __init__(
        self,
        exporter: SpanExporter,
        *,
        attributes: Iterable[str] = CONTENT_ATTRIBUTES,
        prefixes: Iterable[str] = CONTENT_PREFIXES,
        events: Iterable[str] = CONTENT_EVENTS,
    ) -> None:
        self.exporter = exporter
        self._attributes = frozenset(attributes)
        self._prefixes = tuple(prefixes)
        self._events = frozenset(events)

    def _content(self, name: str) -> bool:
        return name in self._attributes or name.startswith(self._prefixes)

    def strip(self, span: ReadableSpan) -> ReadableSpan:
        """``span`` without its content (``span`` itself when it has none)."""
        attrs = span.attributes or {}
        events = [e for e in span.events if e.name not in self._events]
        if len(events) == len(span.events) and not any(self._content(k) for k in attrs):
            return span
        kept = {k: v for k, v in attrs.items() if not self._content(k)}
        kept["loopobs.content.stripped"] = True
        return ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes=kept,
            events=[
                Event(
                    e.name,
                    {k: v for k, v in (e.attributes or {}).items() if not self._content(k)},
                    e.timestamp,
                )
                for e in events
            ],
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return self.exporter.export([self.strip(span) for span in spans])

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)
