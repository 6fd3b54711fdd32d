"""The one catalog of telemetry names: spans, attributes, span events, metrics, units, buckets.

Nothing else in loopobs spells a telemetry name. Names follow the
OpenTelemetry GenAI semantic conventions (v1.41 shape, as the official Python
tooling emits it) where they exist, and ``loopobs.*`` otherwise. Because the
conventions still move, a rename happens here and nowhere else.

Both metric paths read :data:`METRICS` (and record what
:mod:`loopobs.exporters.event_metrics` maps each event to): the OTel
``MetricsObserver`` creates instruments from the specs, and the ``PrometheusObserver`` registers
``prometheus-client`` metrics under :attr:`MetricSpec.prometheus_name` — the
name OpenTelemetry's Prometheus translation gives the OTel instrument — so one
dashboard serves a direct scrape and an OTLP → Collector → Prometheus pipeline.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "METRICS",
    "MetricSpec",
    "prometheus_label",
]

# -- instrumentation scope ----------------------------------------------------------------------
SCOPE_NAME = "loopobs"
"""The tracer's and meter's instrumentation scope name."""
SCHEMA_URL = "https://opentelemetry.io/schemas/1.41.0"
"""The semantic-conventions version the names below follow."""

# -- span names (the model or tool name follows after a space) ------------------------------
SPAN_INVOKE_AGENT = "invoke_agent"
SPAN_TURN = "turn"
SPAN_CHAT = "chat"
SPAN_EXECUTE_TOOL = "execute_tool"

# -- operation names (gen_ai.operation.name) ------------------------------------------------
OP_INVOKE_AGENT = "invoke_agent"
OP_CHAT = "chat"
OP_EXECUTE_TOOL = "execute_tool"

# -- GenAI semantic-convention attributes ---------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_STREAM = "gen_ai.request.stream"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = "gen_ai.response.time_to_first_chunk"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = "gen_ai.usage.reasoning.output_tokens"
GEN_AI_TOKEN_TYPE = "gen_ai.token.type"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
ERROR_TYPE = "error.type"

# -- loopobs attributes ---------------------------------------------------------------------
LOOPOBS_RUN_ID = "loopobs.run.id"
LOOPOBS_RUN_STATUS = "loopobs.run.status"
LOOPOBS_RUN_TOTAL_TURNS = "loopobs.run.total_turns"
LOOPOBS_RUN_RESUMED_FROM = "loopobs.run.resumed_from"
LOOPOBS_TURN_INDEX = "loopobs.turn.index"
LOOPOBS_ATTEMPT = "loopobs.attempt"
LOOPOBS_TOOL_RESULT_HASH = "loopobs.tool.result_hash"
LOOPOBS_TOOL_OUTCOME = "loopobs.tool.outcome"
LOOPOBS_MODEL_FROM = "loopobs.model.from"
LOOPOBS_MODEL_TO = "loopobs.model.to"
LOOPOBS_COMPACTION_REASON = "loopobs.compaction.reason"
LOOPOBS_DETECTION_ACTION = "loopobs.detection.action"
LOOPOBS_OBSERVER_NAME = "loopobs.observer.name"
LOOPOBS_OBSERVER_HOOK = "loopobs.observer.hook"
LOOPOBS_LABEL = "loopobs.label"
LOOPOBS_COST_USD = "loopobs.cost.usd"
"""USD of a model call (``chat``), a turn, or a run (``invoke_agent``); absent when unknown.
The GenAI conventions define no cost attribute."""
LOOPOBS_BUDGET_LIMIT = "loopobs.budget.limit"
LOOPOBS_BUDGET_SCOPE = "loopobs.budget.scope"
LOOPOBS_BUDGET_ACTION = "loopobs.budget.action"

# -- exemplar labels (OpenMetrics; the names Grafana's trace links expect) ------------------
EXEMPLAR_TRACE_ID = "trace_id"
EXEMPLAR_SPAN_ID = "span_id"

# -- span events ------------------------------------------------------------------------------
EVENT_COMPACTION = "loopobs.compaction"
EVENT_FALLBACK = "loopobs.fallback"
EVENT_MODEL_SWITCHED = "loopobs.model_switched"
EVENT_LOOP_DETECTED = "loopobs.loop_detected"
EVENT_CONVERGENCE_DETECTED = "loopobs.convergence_detected"
EVENT_SUSPENDED = "loopobs.suspended"
EVENT_SLEEP = "loopobs.sleep"
EVENT_BUDGET_EXCEEDED = "loopobs.budget_exceeded"
EVENT_INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"
"""Content-capture event (EVENT_ONLY / SPAN_AND_EVENT modes), added to the ``chat`` span."""

# -- span event attributes (the fields of the event's context) ------------------------------
LOOPOBS_COMPACTION_TOKENS_BEFORE = "loopobs.compaction.tokens_before"
LOOPOBS_COMPACTION_TOKENS_AFTER = "loopobs.compaction.tokens_after"
LOOPOBS_COMPACTION_TOKENS_SAVED = "loopobs.compaction.tokens_saved"
LOOPOBS_COMPACTION_MESSAGES_REMOVED = "loopobs.compaction.messages_removed"
LOOPOBS_DETECTION_PATTERN = "loopobs.detection.pattern"
LOOPOBS_DETECTION_REPETITIONS = "loopobs.detection.repetitions"
LOOPOBS_DETECTION_SIMILARITY = "loopobs.detection.similarity"
LOOPOBS_DETECTION_CONSECUTIVE = "loopobs.detection.consecutive"
LOOPOBS_PARK_REASON = "loopobs.park.reason"
LOOPOBS_PARK_KIND = "loopobs.park.kind"
LOOPOBS_PARK_WAKE_AT = "loopobs.park.wake_at"
LOOPOBS_BUDGET_VALUE = "loopobs.budget.value"
LOOPOBS_BUDGET_ALLOWED = "loopobs.budget.allowed"

# -- attribute values -------------------------------------------------------------------------
TOOL_TYPE_FUNCTION = "function"
"""``gen_ai.tool.type`` of a tool the loop runs client-side."""
ERROR_TYPE_OTHER = "_OTHER"
"""``error.type`` when a failure carries no error object (semconv's fallback value)."""
ERROR_TYPE_TOOL = "ToolError"
"""``error.type`` of a failed tool attempt that carries no error object."""

# -- token types (gen_ai.token.type); the last three only on loopobs.tokens -----------------
TOKEN_INPUT = "input"
TOKEN_OUTPUT = "output"
TOKEN_CACHE_READ = "cache_read"
TOKEN_CACHE_WRITE = "cache_write"
TOKEN_REASONING = "reasoning"

# -- buckets ----------------------------------------------------------------------------------
TOKEN_BUCKETS: tuple[float, ...] = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)
"""Advisory buckets of ``gen_ai.client.token.usage`` (semconv)."""
DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)
"""Advisory buckets of ``gen_ai.client.operation.duration`` and the chunk timings (semconv)."""
AGENT_DURATION_BUCKETS: tuple[float, ...] = (
    0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 51.2, 102.4, 204.8, 409.6,
)
"""Whole runs take longer than one call: doubling from 0.1 s to about 7 minutes."""
RUN_COST_BUCKETS: tuple[float, ...] = (
    0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100,
)
"""USD per run: a tenth of a cent to a hundred dollars, about ×3 per bucket."""

InstrumentKind = Literal["counter", "histogram", "updown_counter"]

_UNIT_SUFFIX: Mapping[str, str] = {"s": "seconds", "ms": "milliseconds", "By": "bytes"}


def prometheus_label(attribute: str) -> str:
    """The Prometheus label name OpenTelemetry's translation gives an attribute key."""
    return re.sub(r"[^a-zA-Z0-9]+", "_", attribute)


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric: its OTel name, instrument kind, unit, attribute keys and buckets."""

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...]
    buckets: tuple[float, ...] | None = None

    @property
    def prometheus_name(self) -> str:
        """The name OTel's Prometheus translation produces (without ``_bucket`` etc.).

        Dots become underscores; a unit in braces adds nothing, a real unit adds
        its word (``_seconds``); counters end in ``_total``.
        """
        base = re.sub(r"[^a-zA-Z0-9:]+", "_", self.name)
        suffix = _UNIT_SUFFIX.get(self.unit, "" if self.unit.startswith("{") or
                                  self.unit == "1" else self.unit)
        if suffix and not base.endswith("_" + suffix):
            base = f"{base}_{suffix}"
        if self.kind == "counter" and not base.endswith("_total"):
            base = f"{base}_total"
        return base

    @property
    def prometheus_unit(self) -> str:
        """The OpenMetrics unit word (``seconds``); ``""`` for ``1`` and ``{…}`` units."""
        if self.unit == "1" or self.unit.startswith("{"):
            return ""
        return _UNIT_SUFFIX.get(self.unit, self.unit)

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        """The Prometheus label names for :attr:`attributes`."""
        return tuple(prometheus_label(a) for a in self.attributes)


_MODEL_CALL = (GEN_AI_OPERATION_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL)

TOKEN_USAGE = MetricSpec(
    "gen_ai.client.token.usage", "histogram", "{token}",
    "Tokens per model call, by token type (input, output).",
    (*_MODEL_CALL, GEN_AI_TOKEN_TYPE), TOKEN_BUCKETS,
)
OPERATION_DURATION = MetricSpec(
    "gen_ai.client.operation.duration", "histogram", "s",
    "Duration of one model call attempt.",
    (*_MODEL_CALL, ERROR_TYPE), DURATION_BUCKETS,
)
TIME_TO_FIRST_CHUNK = MetricSpec(
    "gen_ai.client.operation.time_to_first_chunk", "histogram", "s",
    "Time from the start of a streamed model call to its first chunk.",
    _MODEL_CALL, DURATION_BUCKETS,
)
TOOL_DURATION = MetricSpec(
    "gen_ai.execute_tool.duration", "histogram", "s",
    "Duration of one tool call attempt.",
    (GEN_AI_TOOL_NAME, ERROR_TYPE), DURATION_BUCKETS,
)
AGENT_DURATION = MetricSpec(
    "gen_ai.invoke_agent.duration", "histogram", "s",
    "Duration of one agent run.",
    (GEN_AI_AGENT_NAME, ERROR_TYPE), AGENT_DURATION_BUCKETS,
)
RUNS = MetricSpec(
    "loopobs.runs", "counter", "{run}", "Runs ended, by status.",
    (GEN_AI_AGENT_NAME, LOOPOBS_RUN_STATUS),
)
RUNS_ACTIVE = MetricSpec(
    "loopobs.runs.active", "updown_counter", "{run}", "Runs in progress.",
    (GEN_AI_AGENT_NAME,),
)
TURNS = MetricSpec(
    "loopobs.turns", "counter", "{turn}", "Turns ended.",
    (GEN_AI_AGENT_NAME,),
)
TOKENS = MetricSpec(
    "loopobs.tokens", "counter", "{token}",
    "Tokens used, by model and type (input, output, cache_read, cache_write, reasoning).",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, GEN_AI_TOKEN_TYPE, GEN_AI_AGENT_NAME),
)
TOOL_CALLS = MetricSpec(
    "loopobs.tool.calls", "counter", "{call}", "Tool call attempts, by tool and outcome.",
    (GEN_AI_TOOL_NAME, LOOPOBS_TOOL_OUTCOME, GEN_AI_AGENT_NAME),
)
STREAM_FAILURES = MetricSpec(
    "loopobs.stream.failures", "counter", "{failure}", "Failed model call attempts.",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, ERROR_TYPE, GEN_AI_AGENT_NAME),
)
FALLBACKS = MetricSpec(
    "loopobs.fallbacks", "counter", "{fallback}", "Turns moved to a fallback model.",
    (LOOPOBS_MODEL_FROM, LOOPOBS_MODEL_TO),
)
MODEL_SWITCHES = MetricSpec(
    "loopobs.model_switches", "counter", "{switch}", "Model changes between calls.",
    (LOOPOBS_MODEL_FROM, LOOPOBS_MODEL_TO),
)
COMPACTIONS = MetricSpec(
    "loopobs.compactions", "counter", "{compaction}", "Context compactions.",
    (LOOPOBS_COMPACTION_REASON,),
)
COMPACTION_TOKENS_SAVED = MetricSpec(
    "loopobs.compaction.tokens_saved", "counter", "{token}", "Tokens removed by compaction.",
    (LOOPOBS_COMPACTION_REASON,),
)
LOOP_DETECTIONS = MetricSpec(
    "loopobs.loop_detections", "counter", "{detection}", "Runaway tool loops detected.",
    (GEN_AI_TOOL_NAME, LOOPOBS_DETECTION_ACTION),
)
CONVERGENCE_DETECTIONS = MetricSpec(
    "loopobs.convergence_detections", "counter", "{detection}", "Converged answers detected.",
    (LOOPOBS_DETECTION_ACTION,),
)
OBSERVER_ERRORS = MetricSpec(
    "loopobs.observer.errors", "counter", "{error}", "Exceptions raised by observers.",
    (LOOPOBS_OBSERVER_NAME, LOOPOBS_OBSERVER_HOOK),
)
LABEL_OVERFLOW = MetricSpec(
    "loopobs.label_overflow", "counter", "{value}",
    "Label values folded into _other because a label reached its limit of distinct values.",
    (LOOPOBS_LABEL,),
)
COST = MetricSpec(
    "loopobs.cost.usd", "counter", "{USD}",
    "USD spent on model calls, priced from their usage (priced calls only).",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL),
)
UNPRICED_CALLS = MetricSpec(
    "loopobs.cost.unpriced_calls", "counter", "{call}",
    "Model calls whose cost is unknown (no price for the model), by model.",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL),
)
RUN_COST = MetricSpec(
    "loopobs.run.cost.usd", "histogram", "{USD}",
    "USD per run, for runs whose every model call was priced.",
    (GEN_AI_AGENT_NAME,), RUN_COST_BUCKETS,
)
BUDGET_EXCEEDED = MetricSpec(
    "loopobs.budget.exceeded", "counter", "{event}",
    "Budget verdicts: limits crossed (action stop) and warning shares reached (action warn).",
    (GEN_AI_AGENT_NAME, LOOPOBS_BUDGET_LIMIT, LOOPOBS_BUDGET_SCOPE, LOOPOBS_BUDGET_ACTION),
)

# -- MCP (semantic conventions for MCP), context providers, sessions ---------------------------
MCP_METHOD_NAME = "mcp.method.name"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
MCP_SESSION_ID = "mcp.session.id"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
LOOPOBS_MCP_SERVER = "loopobs.mcp.server"
SPAN_CONTEXT_PROVIDER = "context_provider"
SPAN_SESSION_QUEUE = "session_queue"
SPAN_SESSION_RESET = "session_reset"
LOOPOBS_CONTEXT_PROVIDER_NAME = "loopobs.context_provider.name"
LOOPOBS_CONTEXT_PROVIDER_OUTCOME = "loopobs.context_provider.outcome"
LOOPOBS_CONTEXT_PROVIDER_CHARS = "loopobs.context_provider.chars"
LOOPOBS_CONTEXT_PROVIDER_TEXT = "loopobs.context_provider.text"
LOOPOBS_SESSION_ID = "loopobs.session.id"
LOOPOBS_SESSION_EPOCH = "loopobs.session.epoch"
LOOPOBS_SESSION_DISCARDED = "loopobs.session.discarded"
LOOPOBS_QUEUE_NAME = "loopobs.queue.name"
LOOPOBS_QUEUE_OUTCOME = "loopobs.queue.outcome"
LOOPOBS_QUEUE_POLICY = "loopobs.queue.policy"
LOOPOBS_QUEUE_CAPACITY = "loopobs.queue.capacity"

MCP_DURATION_BUCKETS: tuple[float, ...] = (
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)
"""The MCP conventions' advice for ``mcp.client.operation.duration``."""

MCP_CLIENT_DURATION = MetricSpec(
    "mcp.client.operation.duration", "histogram", "s",
    "Duration of one MCP request as the client sees it (tool calls).",
    (MCP_METHOD_NAME, GEN_AI_TOOL_NAME, ERROR_TYPE, NETWORK_TRANSPORT, MCP_PROTOCOL_VERSION),
    MCP_DURATION_BUCKETS,
)
CONTEXT_PROVIDER_DURATION = MetricSpec(
    "loopobs.context_provider.duration", "histogram", "s",
    "Duration of one context provider before a model call, by outcome.",
    (LOOPOBS_CONTEXT_PROVIDER_NAME, LOOPOBS_CONTEXT_PROVIDER_OUTCOME), DURATION_BUCKETS,
)
SESSION_QUEUE_EVENTS = MetricSpec(
    "loopobs.session.queue.events", "counter", "{event}",
    "Backpressure of session queues: saturated, dropped, rejected.",
    (LOOPOBS_QUEUE_NAME, LOOPOBS_QUEUE_OUTCOME),
)

METRICS: tuple[MetricSpec, ...] = (
    TOKEN_USAGE,
    OPERATION_DURATION,
    TIME_TO_FIRST_CHUNK,
    TOOL_DURATION,
    AGENT_DURATION,
    RUNS,
    RUNS_ACTIVE,
    TURNS,
    TOKENS,
    TOOL_CALLS,
    STREAM_FAILURES,
    FALLBACKS,
    MODEL_SWITCHES,
    COMPACTIONS,
    COMPACTION_TOKENS_SAVED,
    LOOP_DETECTIONS,
    CONVERGENCE_DETECTIONS,
    OBSERVER_ERRORS,
    LABEL_OVERFLOW,
    MCP_CLIENT_DURATION,
    CONTEXT_PROVIDER_DURATION,
    SESSION_QUEUE_EVENTS,
    COST,
    UNPRICED_CALLS,
    RUN_COST,
    BUDGET_EXCEEDED,
)
"""Every metric loopobs records."""

OVERFLOW_VALUE = "_other"
"""The label value that absorbs values past a label's limit."""

# -- Prometheus only (not in METRICS: the OpenTelemetry path has no such failure) ---------------
MULTIPROCESS_DAMAGED_FILES = "loopobs_multiprocess_damaged_files"
"""Gauge: multi-process files a scrape skipped because they could not be read."""
LABEL_SANITISED = MetricSpec(
    "loopobs.label_sanitised", "counter", "{value}",
    "Label values whose unencodable characters (lone surrogates) were replaced with U+FFFD.",
    (LOOPOBS_LABEL,),
)
"""A label value that cannot be encoded would fail every scrape; it is repaired and counted."""
