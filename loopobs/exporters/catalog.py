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

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as _ga
from opentelemetry.semconv._incubating.attributes import openai_attributes as _oa
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics as _gm
from opentelemetry.semconv.attributes import error_attributes as _error
from opentelemetry.semconv.attributes import exception_attributes as _exception
from opentelemetry.semconv.attributes import server_attributes as _server

__all__ = [
    "METRICS",
    "METRICS_LATEST",
    "MetricSpec",
    "latest_experimental",
    "metrics_for",
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
# Taken from the generated constants of ``opentelemetry-semantic-conventions`` wherever
# the package has them, so a name is never typed twice; only names newer than the
# package (the semantic-conventions-genai renames) are spelled here.
GEN_AI_OPERATION_NAME = _ga.GEN_AI_OPERATION_NAME
GEN_AI_PROVIDER_NAME = _ga.GEN_AI_PROVIDER_NAME
GEN_AI_AGENT_NAME = _ga.GEN_AI_AGENT_NAME
GEN_AI_CONVERSATION_ID = _ga.GEN_AI_CONVERSATION_ID
GEN_AI_REQUEST_MODEL = _ga.GEN_AI_REQUEST_MODEL
GEN_AI_REQUEST_STREAM = _ga.GEN_AI_REQUEST_STREAM
GEN_AI_REQUEST_MAX_TOKENS = _ga.GEN_AI_REQUEST_MAX_TOKENS
GEN_AI_REQUEST_TEMPERATURE = _ga.GEN_AI_REQUEST_TEMPERATURE
GEN_AI_REQUEST_TOP_P = _ga.GEN_AI_REQUEST_TOP_P
GEN_AI_REQUEST_TOP_K = _ga.GEN_AI_REQUEST_TOP_K
GEN_AI_REQUEST_FREQUENCY_PENALTY = _ga.GEN_AI_REQUEST_FREQUENCY_PENALTY
GEN_AI_REQUEST_PRESENCE_PENALTY = _ga.GEN_AI_REQUEST_PRESENCE_PENALTY
GEN_AI_REQUEST_STOP_SEQUENCES = _ga.GEN_AI_REQUEST_STOP_SEQUENCES
GEN_AI_REQUEST_SEED = _ga.GEN_AI_REQUEST_SEED
GEN_AI_REQUEST_CHOICE_COUNT = _ga.GEN_AI_REQUEST_CHOICE_COUNT
GEN_AI_RESPONSE_MODEL = _ga.GEN_AI_RESPONSE_MODEL
GEN_AI_RESPONSE_ID = _ga.GEN_AI_RESPONSE_ID
GEN_AI_RESPONSE_FINISH_REASONS = _ga.GEN_AI_RESPONSE_FINISH_REASONS
GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = _ga.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
GEN_AI_USAGE_INPUT_TOKENS = _ga.GEN_AI_USAGE_INPUT_TOKENS
GEN_AI_USAGE_OUTPUT_TOKENS = _ga.GEN_AI_USAGE_OUTPUT_TOKENS
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = _ga.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = _ga.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
"""The newer name of ``…cache_creation.input_tokens`` (semantic-conventions-genai)."""
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = _ga.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
GEN_AI_TOKEN_TYPE = _ga.GEN_AI_TOKEN_TYPE
GEN_AI_TOKEN_MODALITY = "gen_ai.token.modality"
"""Required on the newer per-type token counters (semantic-conventions-genai)."""
GEN_AI_TOOL_NAME = _ga.GEN_AI_TOOL_NAME
GEN_AI_TOOL_CALL_ID = _ga.GEN_AI_TOOL_CALL_ID
GEN_AI_TOOL_TYPE = _ga.GEN_AI_TOOL_TYPE
GEN_AI_TOOL_DESCRIPTION = _ga.GEN_AI_TOOL_DESCRIPTION
GEN_AI_TOOL_CALL_ARGUMENTS = _ga.GEN_AI_TOOL_CALL_ARGUMENTS
GEN_AI_TOOL_CALL_RESULT = _ga.GEN_AI_TOOL_CALL_RESULT
GEN_AI_INPUT_MESSAGES = _ga.GEN_AI_INPUT_MESSAGES
GEN_AI_OUTPUT_MESSAGES = _ga.GEN_AI_OUTPUT_MESSAGES
GEN_AI_SYSTEM_INSTRUCTIONS = _ga.GEN_AI_SYSTEM_INSTRUCTIONS
GEN_AI_EVALUATION_NAME = _ga.GEN_AI_EVALUATION_NAME
GEN_AI_EVALUATION_SCORE_VALUE = _ga.GEN_AI_EVALUATION_SCORE_VALUE
GEN_AI_EVALUATION_SCORE_LABEL = _ga.GEN_AI_EVALUATION_SCORE_LABEL
GEN_AI_EVALUATION_EXPLANATION = _ga.GEN_AI_EVALUATION_EXPLANATION
OPENAI_REQUEST_SERVICE_TIER = _oa.OPENAI_REQUEST_SERVICE_TIER
OPENAI_RESPONSE_SERVICE_TIER = _oa.OPENAI_RESPONSE_SERVICE_TIER
OPENAI_RESPONSE_SYSTEM_FINGERPRINT = _oa.OPENAI_RESPONSE_SYSTEM_FINGERPRINT
SERVER_ADDRESS = _server.SERVER_ADDRESS
SERVER_PORT = _server.SERVER_PORT
ERROR_TYPE = _error.ERROR_TYPE
EXCEPTION_TYPE = _exception.EXCEPTION_TYPE
EXCEPTION_MESSAGE = _exception.EXCEPTION_MESSAGE

INT_ATTRIBUTES = frozenset({SERVER_PORT})
"""Metric attributes whose values are integers (every other metric label is a string)."""

REQUEST_OPTION_ATTRIBUTES: Mapping[str, tuple[str, type]] = {
    "max_tokens": (GEN_AI_REQUEST_MAX_TOKENS, int),
    "max_completion_tokens": (GEN_AI_REQUEST_MAX_TOKENS, int),
    "temperature": (GEN_AI_REQUEST_TEMPERATURE, float),
    "top_p": (GEN_AI_REQUEST_TOP_P, float),
    "top_k": (GEN_AI_REQUEST_TOP_K, float),
    "frequency_penalty": (GEN_AI_REQUEST_FREQUENCY_PENALTY, float),
    "presence_penalty": (GEN_AI_REQUEST_PRESENCE_PENALTY, float),
    "stop": (GEN_AI_REQUEST_STOP_SEQUENCES, list),
    "stop_sequences": (GEN_AI_REQUEST_STOP_SEQUENCES, list),
    "seed": (GEN_AI_REQUEST_SEED, int),
    "n": (GEN_AI_REQUEST_CHOICE_COUNT, int),
}
"""Request option (as the OpenAI and Anthropic APIs spell it) → the attribute reporting it,
and the attribute's type. Options not listed here are not reported."""
OPENAI_REQUEST_OPTION_ATTRIBUTES: Mapping[str, tuple[str, type]] = {
    "service_tier": (OPENAI_REQUEST_SERVICE_TIER, str),
}
"""Options reported only when the provider is ``openai``."""

# -- loopobs attributes ---------------------------------------------------------------------
LOOPOBS_RUN_ID = "loopobs.run.id"
LOOPOBS_RUN_STATUS = "loopobs.run.status"
LOOPOBS_RUN_TOTAL_TURNS = "loopobs.run.total_turns"
LOOPOBS_RUN_RESUMED_FROM = "loopobs.run.resumed_from"
LOOPOBS_RUN_LOOP_DETECTED = "loopobs.run.loop_detected"
"""On the root span at its end: a detector warned or stopped the run (for tail sampling)."""
LOOPOBS_RUN_BUDGET_STOPPED = "loopobs.run.budget_stopped"
"""On the root span at its end: a budget stopped the run (for tail sampling)."""
LOOPOBS_ATTRIBUTION_PREFIX = "loopobs.attribution."
"""``loopobs.attribution.<name>``: the run's attribution (``Conversation(attribution=...)``)."""
USER_ID = "user.id"
"""The conventions' user id: the run's ``user`` attribution entry."""
LOOPOBS_TURN_INDEX = "loopobs.turn.index"
LOOPOBS_TURN_INPUT_TOKENS = "loopobs.turn.input_tokens"
"""Input tokens of a turn's successful model call (on loopobs's own ``turn`` span)."""
LOOPOBS_TURN_OUTPUT_TOKENS = "loopobs.turn.output_tokens"
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
LOOPOBS_SHARED_BUDGET_OPERATION = "loopobs.shared_budget.operation"
"""A shared budget's ledger step: ``reserve``, ``commit``, ``release``."""
LOOPOBS_SHARED_BUDGET_OUTCOME = "loopobs.shared_budget.outcome"
"""How the step ended: ``ok``, ``refused``, ``error``, ``unguarded`` (last two: store errors)."""

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
EVENT_BUDGET_UNPRICED = "loopobs.budget_unpriced"
"""A USD limit met a model call with no known price (once per run and scope)."""
EVENT_SHARED_BUDGET = "loopobs.shared_budget"
"""A shared budget's ledger step that did not end ``ok``: a refusal or a store error."""
EVENT_INFERENCE_DETAILS = "gen_ai.client.inference.operation.details"
"""Content-capture event (EVENT_ONLY / SPAN_AND_EVENT modes): a log record, and a ``chat``
span event."""
EVENT_OPERATION_EXCEPTION = "gen_ai.client.operation.exception"
"""A failed model call, as a log record (severity WARN) with the ``exception.*`` attributes."""
EVENT_INFERENCE_EXCEPTION = "gen_ai.client.inference.exception"
"""The newer name of :data:`EVENT_OPERATION_EXCEPTION` (semantic-conventions-genai)."""
EVENT_EVALUATION_RESULT = "gen_ai.evaluation.result"
"""An evaluation of a run or model call (:func:`loopobs.record_evaluation`)."""

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
LOOPOBS_SHARED_BUDGET_STORE = "loopobs.shared_budget.store"
"""The ledger a shared budget's step went to (``memory``, ``redis://host:port/db``)."""
LOOPOBS_SHARED_BUDGET_DURATION_MS = "loopobs.shared_budget.duration_ms"
LOOPOBS_SHARED_BUDGET_RESERVED_USD = "loopobs.shared_budget.reserved_usd"
LOOPOBS_SHARED_BUDGET_SCOPE_KEY = "loopobs.shared_budget.scope_key"
"""The scope that refused a reservation (``tenant:acme``): an id, on spans only."""

# -- attribute values -------------------------------------------------------------------------
TOKEN_MODALITY_TEXT = "text"
"""``gen_ai.token.modality`` of reported usage (loopobs messages are text)."""
TOKEN_MODALITY_UNKNOWN = "unknown"
"""``gen_ai.token.modality`` of a call that reported no usage (recorded as 0)."""
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
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""Advisory buckets of ``gen_ai.client.token.usage`` (semconv)."""
DURATION_BUCKETS: tuple[float, ...] = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""Advisory buckets of ``gen_ai.client.operation.duration`` and the chunk timings (semconv)."""
AGENT_DURATION_BUCKETS: tuple[float, ...] = (
    0.1,
    0.2,
    0.4,
    0.8,
    1.6,
    3.2,
    6.4,
    12.8,
    25.6,
    51.2,
    102.4,
    204.8,
    409.6,
)
"""Whole runs take longer than one call: doubling from 0.1 s to about 7 minutes."""
RUN_COST_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.0003,
    0.001,
    0.003,
    0.01,
    0.03,
    0.1,
    0.3,
    1,
    3,
    10,
    30,
    100,
)
"""USD per run: a tenth of a cent to a hundred dollars, about ×3 per bucket."""

STORE_DURATION_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
"""Seconds of one shared-state store step: half a millisecond (local Redis) to its deadlines."""

DRIFT_BUCKETS: tuple[float, ...] = (
    0.0,
    0.0001,
    0.0003,
    0.001,
    0.003,
    0.01,
    0.03,
    0.1,
    0.3,
    1,
    3,
)
"""USD a reservation held beyond what its call cost: nothing to three dollars, about ×3."""

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
        suffix = _UNIT_SUFFIX.get(
            self.unit, "" if self.unit.startswith("{") or self.unit == "1" else self.unit
        )
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


_MODEL_CALL = (
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_RESPONSE_MODEL,
    SERVER_ADDRESS,
    SERVER_PORT,
)

TOKEN_USAGE = MetricSpec(
    _gm.GEN_AI_CLIENT_TOKEN_USAGE,
    "histogram",
    "{token}",
    "Tokens per model call, by token type (input, output).",
    (*_MODEL_CALL, GEN_AI_TOKEN_TYPE),
    TOKEN_BUCKETS,
)
OPERATION_DURATION = MetricSpec(
    _gm.GEN_AI_CLIENT_OPERATION_DURATION,
    "histogram",
    "s",
    "Duration of one model call attempt.",
    (*_MODEL_CALL, ERROR_TYPE),
    DURATION_BUCKETS,
)
TIME_TO_FIRST_CHUNK = MetricSpec(
    _gm.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK,
    "histogram",
    "s",
    "Time from the start of a streamed model call to its first chunk.",
    _MODEL_CALL,
    DURATION_BUCKETS,
)
TIME_PER_OUTPUT_CHUNK = MetricSpec(
    _gm.GEN_AI_CLIENT_OPERATION_TIME_PER_OUTPUT_CHUNK,
    "histogram",
    "s",
    "Time between consecutive chunks of a streamed model call, for each chunk after the first.",
    _MODEL_CALL,
    DURATION_BUCKETS,
)
TOOL_DURATION = MetricSpec(
    "gen_ai.execute_tool.duration",
    "histogram",
    "s",
    "Duration of one tool call attempt.",
    (GEN_AI_OPERATION_NAME, GEN_AI_TOOL_NAME, GEN_AI_TOOL_TYPE, GEN_AI_AGENT_NAME, ERROR_TYPE),
    DURATION_BUCKETS,
)
AGENT_DURATION = MetricSpec(
    "gen_ai.invoke_agent.duration",
    "histogram",
    "s",
    "Duration of one agent run.",
    (GEN_AI_OPERATION_NAME, GEN_AI_AGENT_NAME, GEN_AI_REQUEST_MODEL, ERROR_TYPE),
    AGENT_DURATION_BUCKETS,
)

# -- the newer names (semantic-conventions-genai), behind OTEL_SEMCONV_STABILITY_OPT_IN ----
INFERENCE_DURATION = MetricSpec(
    "gen_ai.client.inference.duration",
    "histogram",
    "s",
    "Duration of one model call attempt.",
    (*_MODEL_CALL, ERROR_TYPE),
    DURATION_BUCKETS,
)
INFERENCE_TIME_TO_FIRST_CHUNK = MetricSpec(
    "gen_ai.client.inference.time_to_first_chunk",
    "histogram",
    "s",
    "Time from the start of a streamed model call to its first chunk.",
    _MODEL_CALL,
    DURATION_BUCKETS,
)
INFERENCE_TIME_PER_OUTPUT_CHUNK = MetricSpec(
    "gen_ai.client.inference.time_per_output_chunk",
    "histogram",
    "s",
    "Time between consecutive chunks of a streamed model call, for each chunk after the first.",
    _MODEL_CALL,
    DURATION_BUCKETS,
)
_USAGE_COUNTER = (*_MODEL_CALL, GEN_AI_TOKEN_MODALITY)


def _usage_counter(name: str, what: str) -> MetricSpec:
    return MetricSpec(
        f"gen_ai.client.inference.usage.{name}",
        "counter",
        "{token}",
        f"{what}, per model call attempt (0 when none was reported).",
        _USAGE_COUNTER,
    )


INFERENCE_INPUT_TOKENS = _usage_counter("input_tokens", "Input tokens, cached ones included")
INFERENCE_OUTPUT_TOKENS = _usage_counter("output_tokens", "Output tokens, reasoning included")
INFERENCE_CACHE_READ_TOKENS = _usage_counter(
    "cache_read.input_tokens", "Input tokens served from the provider's cache"
)
INFERENCE_CACHE_WRITE_TOKENS = _usage_counter(
    "cache_write.input_tokens", "Input tokens written to the provider's cache"
)
INFERENCE_REASONING_TOKENS = _usage_counter(
    "reasoning.output_tokens", "Output tokens spent on reasoning"
)
INFERENCE_OPERATION_INPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.operation.input_tokens",
    "histogram",
    "{token}",
    "Input tokens per model call (for percentiles; the counters are for totals).",
    (*_MODEL_CALL, ERROR_TYPE),
    TOKEN_BUCKETS,
)
INFERENCE_OPERATION_OUTPUT_TOKENS = MetricSpec(
    "gen_ai.client.inference.operation.output_tokens",
    "histogram",
    "{token}",
    "Output tokens per model call (for percentiles; the counters are for totals).",
    (*_MODEL_CALL, ERROR_TYPE),
    TOKEN_BUCKETS,
)
CALL_COUNT_BUCKETS: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
"""Model or tool calls per run: doubling from 1 to 128."""
AGENT_INFERENCE_CALLS = MetricSpec(
    "gen_ai.invoke_agent.inference_calls",
    "histogram",
    "{inference_call}",
    "Model call attempts per agent run.",
    (GEN_AI_OPERATION_NAME, GEN_AI_AGENT_NAME, GEN_AI_REQUEST_MODEL, ERROR_TYPE),
    CALL_COUNT_BUCKETS,
)
AGENT_TOOL_CALLS = MetricSpec(
    "gen_ai.invoke_agent.tool_calls",
    "histogram",
    "{tool_call}",
    "Tool call attempts per agent run.",
    (GEN_AI_OPERATION_NAME, GEN_AI_AGENT_NAME, GEN_AI_REQUEST_MODEL, ERROR_TYPE),
    CALL_COUNT_BUCKETS,
)

RUNS = MetricSpec(
    "loopobs.runs",
    "counter",
    "{run}",
    "Runs ended, by status.",
    (GEN_AI_AGENT_NAME, LOOPOBS_RUN_STATUS),
)
RUNS_ACTIVE = MetricSpec(
    "loopobs.runs.active",
    "updown_counter",
    "{run}",
    "Runs in progress.",
    (GEN_AI_AGENT_NAME,),
)
TURNS = MetricSpec(
    "loopobs.turns",
    "counter",
    "{turn}",
    "Turns ended.",
    (GEN_AI_AGENT_NAME,),
)
TOKENS = MetricSpec(
    "loopobs.tokens",
    "counter",
    "{token}",
    "Tokens used, by model and type (input, output, cache_read, cache_write, reasoning).",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, GEN_AI_TOKEN_TYPE, GEN_AI_AGENT_NAME),
)
TOOL_CALLS = MetricSpec(
    "loopobs.tool.calls",
    "counter",
    "{call}",
    "Tool call attempts, by tool and outcome.",
    (GEN_AI_TOOL_NAME, LOOPOBS_TOOL_OUTCOME, GEN_AI_AGENT_NAME),
)
STREAM_FAILURES = MetricSpec(
    "loopobs.stream.failures",
    "counter",
    "{failure}",
    "Failed model call attempts.",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, ERROR_TYPE, GEN_AI_AGENT_NAME),
)
FALLBACKS = MetricSpec(
    "loopobs.fallbacks",
    "counter",
    "{fallback}",
    "Turns moved to a fallback model.",
    (LOOPOBS_MODEL_FROM, LOOPOBS_MODEL_TO),
)
MODEL_SWITCHES = MetricSpec(
    "loopobs.model_switches",
    "counter",
    "{switch}",
    "Model changes between calls.",
    (LOOPOBS_MODEL_FROM, LOOPOBS_MODEL_TO),
)
COMPACTIONS = MetricSpec(
    "loopobs.compactions",
    "counter",
    "{compaction}",
    "Context compactions.",
    (LOOPOBS_COMPACTION_REASON,),
)
COMPACTION_TOKENS_SAVED = MetricSpec(
    "loopobs.compaction.tokens_saved",
    "counter",
    "{token}",
    "Tokens removed by compaction.",
    (LOOPOBS_COMPACTION_REASON,),
)
LOOP_DETECTIONS = MetricSpec(
    "loopobs.loop_detections",
    "counter",
    "{detection}",
    "Runaway tool loops detected.",
    (GEN_AI_TOOL_NAME, LOOPOBS_DETECTION_ACTION),
)
CONVERGENCE_DETECTIONS = MetricSpec(
    "loopobs.convergence_detections",
    "counter",
    "{detection}",
    "Converged answers detected.",
    (LOOPOBS_DETECTION_ACTION,),
)
OBSERVER_ERRORS = MetricSpec(
    "loopobs.observer.errors",
    "counter",
    "{error}",
    "Exceptions raised by observers.",
    (LOOPOBS_OBSERVER_NAME, LOOPOBS_OBSERVER_HOOK),
)
LABEL_OVERFLOW = MetricSpec(
    "loopobs.label_overflow",
    "counter",
    "{value}",
    "Label values folded into _other because a label reached its limit of distinct values.",
    (LOOPOBS_LABEL,),
)
COST = MetricSpec(
    "loopobs.cost.usd",
    "counter",
    "{USD}",
    "USD spent on model calls, priced from their usage (priced calls only).",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL),
)
UNPRICED_CALLS = MetricSpec(
    "loopobs.cost.unpriced_calls",
    "counter",
    "{call}",
    "Model calls whose cost is unknown (no price for the model), by model.",
    (GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL),
)
RUN_COST = MetricSpec(
    "loopobs.run.cost.usd",
    "histogram",
    "{USD}",
    "USD per run, for runs whose every model call was priced.",
    (GEN_AI_AGENT_NAME,),
    RUN_COST_BUCKETS,
)
BUDGET_EXCEEDED = MetricSpec(
    "loopobs.budget.exceeded",
    "counter",
    "{event}",
    "Budget verdicts: limits crossed (action stop) and warning shares reached (action warn).",
    (GEN_AI_AGENT_NAME, LOOPOBS_BUDGET_LIMIT, LOOPOBS_BUDGET_SCOPE, LOOPOBS_BUDGET_ACTION),
)
BUDGET_UNPRICED = MetricSpec(
    "loopobs.budget.unpriced",
    "counter",
    "{event}",
    "USD limits that met a model with no price (once per run and scope): the limit cannot "
    "apply to its calls.",
    (GEN_AI_AGENT_NAME, GEN_AI_PROVIDER_NAME, GEN_AI_REQUEST_MODEL, LOOPOBS_BUDGET_SCOPE),
)
SHARED_BUDGET_OPERATIONS = MetricSpec(
    "loopobs.shared_budget.operations",
    "counter",
    "{operation}",
    "Shared budget ledger steps by operation and outcome: reservations made (reserve ok), "
    "refused, store errors (error, unguarded), commits, releases.",
    (GEN_AI_AGENT_NAME, LOOPOBS_SHARED_BUDGET_OPERATION, LOOPOBS_SHARED_BUDGET_OUTCOME),
)
SHARED_BUDGET_STORE_DURATION = MetricSpec(
    "loopobs.shared_budget.store.duration",
    "histogram",
    "s",
    "Duration of one shared budget ledger step on its store (Redis, or memory).",
    (LOOPOBS_SHARED_BUDGET_OPERATION, LOOPOBS_SHARED_BUDGET_OUTCOME),
    STORE_DURATION_BUCKETS,
)
SHARED_BUDGET_EXPIRED = MetricSpec(
    "loopobs.shared_budget.reservations.expired",
    "counter",
    "{reservation}",
    "Shared budget reservations that expired before their commit (a worker killed mid-call, "
    "or a call longer than the TTL), as the ledger found them.",
    (GEN_AI_AGENT_NAME,),
)
SHARED_BUDGET_DRIFT = MetricSpec(
    "loopobs.shared_budget.drift.usd",
    "histogram",
    "{USD}",
    "USD a committed call's reservation held beyond what the call cost (reserved minus committed).",
    (GEN_AI_AGENT_NAME,),
    DRIFT_BUCKETS,
)

# -- MCP (semantic conventions for MCP), context providers, sessions ---------------------------
MCP_METHOD_NAME = "mcp.method.name"
MCP_PROTOCOL_VERSION = "mcp.protocol.version"
MCP_SESSION_ID = "mcp.session.id"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
RPC_RESPONSE_STATUS_CODE = "rpc.response.status_code"
NETWORK_TRANSPORT = "network.transport"
NETWORK_PROTOCOL_NAME = "network.protocol.name"
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
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
"""The MCP conventions' advice for ``mcp.client.operation.duration``."""

MCP_CLIENT_DURATION = MetricSpec(
    "mcp.client.operation.duration",
    "histogram",
    "s",
    "Duration of one MCP request as the client sees it (tool calls).",
    (MCP_METHOD_NAME, GEN_AI_TOOL_NAME, ERROR_TYPE, NETWORK_TRANSPORT, MCP_PROTOCOL_VERSION),
    MCP_DURATION_BUCKETS,
)
CONTEXT_PROVIDER_DURATION = MetricSpec(
    "loopobs.context_provider.duration",
    "histogram",
    "s",
    "Duration of one context provider before a model call, by outcome.",
    (LOOPOBS_CONTEXT_PROVIDER_NAME, LOOPOBS_CONTEXT_PROVIDER_OUTCOME),
    DURATION_BUCKETS,
)
SESSION_QUEUE_EVENTS = MetricSpec(
    "loopobs.session.queue.events",
    "counter",
    "{event}",
    "Backpressure of session queues: saturated, dropped, rejected.",
    (LOOPOBS_QUEUE_NAME, LOOPOBS_QUEUE_OUTCOME),
)

_LOOPOBS_METRICS: tuple[MetricSpec, ...] = (
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
    BUDGET_UNPRICED,
    SHARED_BUDGET_OPERATIONS,
    SHARED_BUDGET_STORE_DURATION,
    SHARED_BUDGET_EXPIRED,
    SHARED_BUDGET_DRIFT,
)

METRICS: tuple[MetricSpec, ...] = (
    TOKEN_USAGE,
    OPERATION_DURATION,
    TIME_TO_FIRST_CHUNK,
    TIME_PER_OUTPUT_CHUNK,
    TOOL_DURATION,
    AGENT_DURATION,
    *_LOOPOBS_METRICS,
)
"""Every metric loopobs records with the default conventions (v1.41)."""

METRICS_LATEST: tuple[MetricSpec, ...] = (
    INFERENCE_DURATION,
    INFERENCE_TIME_TO_FIRST_CHUNK,
    INFERENCE_TIME_PER_OUTPUT_CHUNK,
    INFERENCE_INPUT_TOKENS,
    INFERENCE_OUTPUT_TOKENS,
    INFERENCE_CACHE_READ_TOKENS,
    INFERENCE_CACHE_WRITE_TOKENS,
    INFERENCE_REASONING_TOKENS,
    INFERENCE_OPERATION_INPUT_TOKENS,
    INFERENCE_OPERATION_OUTPUT_TOKENS,
    TOOL_DURATION,
    AGENT_DURATION,
    AGENT_INFERENCE_CALLS,
    AGENT_TOOL_CALLS,
    *_LOOPOBS_METRICS,
)
"""Every metric loopobs records with the opt-in switch set (see :func:`latest_experimental`)."""

EVALUATION_SCORE = MetricSpec(
    "loopobs.evaluation.score",
    "histogram",
    "1",
    "Evaluation scores recorded with loopobs.record_evaluation, by evaluation name and label.",
    (GEN_AI_EVALUATION_NAME, GEN_AI_EVALUATION_SCORE_LABEL),
    (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
)
"""Recorded by :func:`loopobs.record_evaluation`, not by the observers (so not in
:data:`METRICS`); the label's values are the caller's, so keep them few."""

SEMCONV_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
"""The variable the conventions prescribe for opting in to newer names (a comma-separated list)."""
GEN_AI_LATEST_EXPERIMENTAL = "gen_ai_latest_experimental"
"""The value of :data:`SEMCONV_OPT_IN_ENV` that selects the newest GenAI names."""


def latest_experimental(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_SEMCONV_STABILITY_OPT_IN`` lists ``gen_ai_latest_experimental``."""
    raw = (os.environ if environ is None else environ).get(SEMCONV_OPT_IN_ENV, "")
    return GEN_AI_LATEST_EXPERIMENTAL in {part.strip().lower() for part in raw.split(",")}


def metrics_for(latest: bool) -> tuple[MetricSpec, ...]:
    """:data:`METRICS_LATEST` when ``latest``, else :data:`METRICS`."""
    return METRICS_LATEST if latest else METRICS


OVERFLOW_VALUE = "_other"
"""The label value that absorbs values past a label's limit."""

# -- not in METRICS: recorded only when a label value needs repair -----------------------------
MULTIPROCESS_DAMAGED_FILES = "loopobs_multiprocess_damaged_files"
"""Gauge (Prometheus only): multi-process files a scrape skipped because they could not be
read."""
LABEL_SANITISED = MetricSpec(
    "loopobs.label_sanitised",
    "counter",
    "{value}",
    "Label values repaired: cut to the length bound, or (Prometheus) unencodable characters "
    "(lone surrogates) replaced with U+FFFD.",
    (LOOPOBS_LABEL,),
)
"""A label value that cannot be encoded would fail every scrape, and a huge one bloats every
scrape; each is repaired and counted (length cuts on both metric paths)."""
