"""The one mapping from loop events to catalog metrics, and the observer base both backends share.

:data:`EVENT_METRICS` says, for each hook, which metric records what value with
which labels. ``MetricsObserver`` (OpenTelemetry) and ``PrometheusObserver``
(prometheus-client) both derive from :class:`MetricRecorder`, which walks the
table; they differ only in how a value is recorded and how a label is bounded.
A new metric is one :class:`Recording` here plus its spec in the catalog; a hook
the table names is heard by the recorders without a method of its own.

Labels are attribute keys of the catalog; the value ``""`` means the attribute
is absent (OpenTelemetry leaves it out; Prometheus, which needs every label,
stores ``""``, which it treats as absent). Every present value passes the
backend's bound, so no label takes more than ``max_label_values`` values, nor a
value longer than :data:`MAX_LABEL_LENGTH` characters.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from uuid import UUID

from loopobs.contract import events as ev
from loopobs.contract.errors import LoopError
from loopobs.contract.observer import LoopObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.catalog import MetricSpec

__all__ = [
    "DEFAULT_MAX_LABEL_VALUES",
    "EVENT_METRICS",
    "EVENT_METRICS_LATEST",
    "EventMetrics",
    "Binder",
    "MetricRecorder",
    "Recorder",
    "Sink",
    "Recording",
    "ATTRIBUTED_METRICS",
    "MAX_LABEL_LENGTH",
    "TRUNCATED_MARKER",
    "error_type",
    "event_metrics_for",
    "truncated_label",
]

DEFAULT_MAX_LABEL_VALUES = 100
"""Distinct values one label key may take before new ones fold into ``_other``."""

ATTRIBUTED_METRICS: tuple[MetricSpec, ...] = (c.COST, c.RUN_COST)
"""The cost metrics that carry the allow-listed attribution labels (``attribution_labels``)."""
_ATTRIBUTION_NAME = re.compile(r"[a-z_][a-z0-9_]{0,63}")

MAX_LABEL_LENGTH = 256
"""Characters one label value may have, on both metric paths; a longer value (a 50,000-char
tool name from model output) is cut to this length, ending in :data:`TRUNCATED_MARKER`, and
counted in ``loopobs.label_sanitised``."""
TRUNCATED_MARKER = "…"


def attribution_limits(labels: Mapping[str, int] | None) -> dict[str, int]:
    """``attribution_labels`` checked: attribution name → distinct values it may take.

    Raises:
        ValueError: a name is not a lower-case label word, or a bound is not a positive int.
    """
    out: dict[str, int] = {}
    for name, bound in sorted((labels or {}).items()):
        if not isinstance(name, str) or not _ATTRIBUTION_NAME.fullmatch(name):
            raise ValueError(
                f"attribution_labels: {name!r} is not an attribution name (lower-case "
                "letters, digits and _, at most 64)"
            )
        if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
            raise ValueError(
                f"attribution_labels: the bound of {name!r} must be a positive int, not {bound!r}"
            )
        out[name] = bound
    return out


def label_values_limit(max_label_values: int) -> int:
    """``max_label_values`` checked: the distinct values each label name admits.

    Raises:
        ValueError: it is less than 1.
    """
    if max_label_values < 1:
        raise ValueError("max_label_values must be at least 1")
    return max_label_values


def truncated_label(value: str) -> str | None:
    """``value`` cut to :data:`MAX_LABEL_LENGTH` characters (the marker last); None if it fits."""
    if len(value) <= MAX_LABEL_LENGTH:
        return None
    return value[: MAX_LABEL_LENGTH - len(TRUNCATED_MARKER)] + TRUNCATED_MARKER


def error_type(error: LoopError | None, default: str = c.ERROR_TYPE_OTHER) -> str:
    """The ``error.type`` value of ``error``: its class name (``default`` for None)."""
    return default if error is None else type(error).__name__


@dataclass(frozen=True, slots=True)
class Recording:
    """One metric an event records: ``value(ctx)``, labelled by the metric's attributes.

    Each attribute of the metric takes its value from ``fixed`` (constants such
    as the token type, never bounded) or else from the event's labels (see
    :class:`EventMetrics`); an attribute neither gives is absent. A value of
    None is not recorded, nor a 0 when ``skip_zero``; ``started_only`` records
    only for runs whose start the observer saw. ``exemplar`` lets a backend
    attach the run's trace to the sample.
    """

    metric: MetricSpec
    value: Callable[[Any], float | None]
    fixed: Mapping[str, str] = field(default_factory=dict)
    skip_zero: bool = False
    started_only: bool = False
    exemplar: bool = False

    def __post_init__(self) -> None:
        unknown = set(self.fixed) - set(self.metric.attributes)
        if unknown:
            raise ValueError(f"{self.metric.name} has no attribute {sorted(unknown)}")


@dataclass(frozen=True, slots=True)
class EventMetrics:
    """What one hook records: its event's label values, and the metrics that use them.

    ``labels(ctx)`` gives the raw value of each attribute in ``keys``, in that
    order (``""``: absent). Each present value passes the backend's bound once
    per event, however many metrics carry it. ``with_agent`` adds the run's
    agent name as ``gen_ai.agent.name``.
    """

    keys: tuple[str, ...]
    labels: Callable[[Any], tuple[str, ...]]
    recordings: tuple[Recording, ...]
    with_agent: bool = False


def _one(ctx: Any) -> float:
    return 1


def _minus_one(ctx: Any) -> float:
    return -1


def _seconds(ctx: Any) -> float:
    return float(ctx.duration_ms) / 1000.0


def _nothing(ctx: Any) -> tuple[str, ...]:
    return ()


def _ttfc(ctx: ev.StreamSuccessContext) -> float | None:
    ttfc = ctx.time_to_first_token_ms
    return None if ttfc is None else ttfc / 1000.0


def _cost(ctx: ev.StreamSuccessContext | ev.RunEndContext) -> float | None:
    # None is an unknown cost: nothing is added (the call counts as unpriced instead).
    return ctx.cost_usd


def _unpriced(ctx: ev.StreamSuccessContext) -> float | None:
    return 1 if ctx.cost_usd is None else None


def _expired(ctx: ev.SharedBudgetContext) -> float:
    return ctx.expired


def _drift(ctx: ev.SharedBudgetContext) -> float | None:
    # Only a commit that landed settles a reservation: reserved minus what the call cost.
    if ctx.operation != "commit" or ctx.outcome != "ok" or ctx.committed_usd is None:
        return None
    return max(0.0, ctx.reserved_usd - ctx.committed_usd)


def _tool_error(ctx: ev.ToolPostContext) -> str:
    if not ctx.is_error:
        return ""
    return error_type(ctx.error, c.ERROR_TYPE_TOOL)


_SERVER = (c.SERVER_ADDRESS, c.SERVER_PORT)
_SUCCESS_KEYS = (
    c.GEN_AI_PROVIDER_NAME,
    c.GEN_AI_REQUEST_MODEL,
    c.GEN_AI_RESPONSE_MODEL,
    *_SERVER,
    c.GEN_AI_TOKEN_MODALITY,
)
_FAILURE_KEYS = (c.GEN_AI_PROVIDER_NAME, c.GEN_AI_REQUEST_MODEL, *_SERVER, c.ERROR_TYPE)


def _tool_labels(ctx: ev.ToolPostContext) -> tuple[str, ...]:
    mcp = ctx.mcp
    if mcp is None:
        return (ctx.tool, _tool_error(ctx), ctx.outcome, "", "", "")
    return (
        ctx.tool,
        _tool_error(ctx),
        ctx.outcome,
        mcp.method,
        mcp.transport,
        mcp.protocol_version or "",
    )


def _mcp_seconds(ctx: ev.ToolPostContext) -> float | None:
    return None if ctx.mcp is None else ctx.mcp.duration_ms / 1000.0


_FROM_TO = (c.LOOPOBS_MODEL_FROM, c.LOOPOBS_MODEL_TO)
_CHAT = {c.GEN_AI_OPERATION_NAME: c.OP_CHAT}
_UNKNOWN_MODALITY = {**_CHAT, c.GEN_AI_TOKEN_MODALITY: c.TOKEN_MODALITY_UNKNOWN}


def _port(port: int | None) -> str:
    return "" if port is None else str(port)


def _success_labels(ctx: ev.StreamSuccessContext) -> tuple[str, ...]:
    reported = ctx.input_tokens or ctx.output_tokens or ctx.usage_details
    return (
        ctx.provider,
        ctx.model,
        ctx.response_model or ctx.model,
        ctx.server_address or "",
        _port(ctx.server_port),
        c.TOKEN_MODALITY_TEXT if reported else c.TOKEN_MODALITY_UNKNOWN,
    )


def _failure_labels(ctx: ev.StreamFailureContext) -> tuple[str, ...]:
    return (
        ctx.provider,
        ctx.model,
        ctx.server_address or "",
        _port(ctx.server_port),
        error_type(ctx.error),
    )


def _if_reported(
    count: Callable[[ev.StreamSuccessContext], int],
) -> Callable[[ev.StreamSuccessContext], int | None]:
    """``count``, or None (nothing recorded) for a call whose model reported no usage: its
    tokens are unknown, and a 0 would pull the token histograms down."""

    def reported(ctx: ev.StreamSuccessContext) -> int | None:
        return count(ctx) if ctx.usage_reported else None

    return reported


def _token_usage(kind: str, count: Callable[[ev.StreamSuccessContext], int]) -> Recording:
    return Recording(
        c.TOKEN_USAGE, _if_reported(count), {**_CHAT, c.GEN_AI_TOKEN_TYPE: kind}, exemplar=True
    )


def _tokens(
    kind: str, count: Callable[[ev.StreamSuccessContext], int], *, skip_zero: bool
) -> Recording:
    return Recording(
        c.TOKENS,
        _if_reported(count),
        {c.GEN_AI_TOKEN_TYPE: kind},
        skip_zero=skip_zero,
        exemplar=True,
    )


def _zero(ctx: Any) -> float:
    return 0


_LATEST_COUNTERS = (
    (c.INFERENCE_INPUT_TOKENS, lambda ctx: ctx.input_tokens),
    (c.INFERENCE_OUTPUT_TOKENS, lambda ctx: ctx.output_tokens),
    (c.INFERENCE_CACHE_READ_TOKENS, lambda ctx: ctx.cache_read_input_tokens),
    (c.INFERENCE_CACHE_WRITE_TOKENS, lambda ctx: ctx.cache_write_input_tokens),
    (c.INFERENCE_REASONING_TOKENS, lambda ctx: ctx.reasoning_output_tokens),
)


def event_metrics_for(latest: bool) -> Mapping[ev.HookName, EventMetrics]:
    """The event → metric table with the default conventions, or the newest (``latest``)."""
    duration = c.INFERENCE_DURATION if latest else c.OPERATION_DURATION
    ttfc = c.INFERENCE_TIME_TO_FIRST_CHUNK if latest else c.TIME_TO_FIRST_CHUNK
    if latest:
        # Every attempt counts its tokens, failed ones as 0 of modality "unknown".
        usage: tuple[Recording, ...] = (
            *(Recording(spec, count, _CHAT, exemplar=True) for spec, count in _LATEST_COUNTERS),
            Recording(c.INFERENCE_OPERATION_INPUT_TOKENS, lambda ctx: ctx.input_tokens, _CHAT),
            Recording(c.INFERENCE_OPERATION_OUTPUT_TOKENS, lambda ctx: ctx.output_tokens, _CHAT),
        )
        failed_usage: tuple[Recording, ...] = tuple(
            Recording(spec, _zero, _UNKNOWN_MODALITY) for spec, _ in _LATEST_COUNTERS
        )
    else:
        usage = (
            _token_usage(c.TOKEN_INPUT, lambda ctx: ctx.input_tokens),
            _token_usage(c.TOKEN_OUTPUT, lambda ctx: ctx.output_tokens),
        )
        failed_usage = ()
    success_keys = _SUCCESS_KEYS if latest else _SUCCESS_KEYS[:-1]

    def success_labels(ctx: ev.StreamSuccessContext) -> tuple[str, ...]:
        return _success_labels(ctx) if latest else _success_labels(ctx)[:-1]

    return {
        "on_run_start": EventMetrics(
            (), _nothing, (Recording(c.RUNS_ACTIVE, _one),), with_agent=True
        ),
        "on_run_end": EventMetrics(
            (c.LOOPOBS_RUN_STATUS, c.ERROR_TYPE),
            lambda ctx: (str(ctx.status), "" if ctx.error is None else error_type(ctx.error)),
            (
                Recording(c.RUNS, _one),
                Recording(
                    c.AGENT_DURATION,
                    _seconds,
                    {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT},
                    exemplar=True,
                ),
                Recording(c.RUNS_ACTIVE, _minus_one, started_only=True),
                Recording(c.RUN_COST, _cost, exemplar=True),
            ),
            with_agent=True,
        ),
        "on_turn_end": EventMetrics((), _nothing, (Recording(c.TURNS, _one),), with_agent=True),
        "on_stream_success": EventMetrics(
            success_keys,
            success_labels,
            (
                *usage,
                Recording(duration, _seconds, _CHAT, exemplar=True),
                Recording(ttfc, _ttfc, _CHAT, exemplar=True),
                _tokens(c.TOKEN_INPUT, lambda ctx: ctx.input_tokens, skip_zero=False),
                _tokens(c.TOKEN_OUTPUT, lambda ctx: ctx.output_tokens, skip_zero=False),
                _tokens(
                    c.TOKEN_CACHE_READ, lambda ctx: ctx.cache_read_input_tokens, skip_zero=True
                ),
                _tokens(
                    c.TOKEN_CACHE_WRITE, lambda ctx: ctx.cache_write_input_tokens, skip_zero=True
                ),
                _tokens(c.TOKEN_REASONING, lambda ctx: ctx.reasoning_output_tokens, skip_zero=True),
                Recording(c.COST, _cost, exemplar=True),
                Recording(c.UNPRICED_CALLS, _unpriced),
            ),
            with_agent=True,
        ),
        "on_stream_failure": EventMetrics(
            _FAILURE_KEYS,
            _failure_labels,
            (
                Recording(duration, _seconds, _CHAT, exemplar=True),
                *failed_usage,
                Recording(c.STREAM_FAILURES, _one),
            ),
            with_agent=True,
        ),
        "on_tool_post": EventMetrics(
            (
                c.GEN_AI_TOOL_NAME,
                c.ERROR_TYPE,
                c.LOOPOBS_TOOL_OUTCOME,
                c.MCP_METHOD_NAME,
                c.NETWORK_TRANSPORT,
                c.MCP_PROTOCOL_VERSION,
            ),
            _tool_labels,
            (
                Recording(
                    c.TOOL_DURATION,
                    _seconds,
                    {
                        c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                        c.GEN_AI_TOOL_TYPE: c.TOOL_TYPE_FUNCTION,
                    },
                    exemplar=True,
                ),
                Recording(c.TOOL_CALLS, _one),
                Recording(c.MCP_CLIENT_DURATION, _mcp_seconds, exemplar=True),
            ),
            with_agent=True,
        ),
        "on_fallback": EventMetrics(
            _FROM_TO, lambda ctx: (ctx.from_model, ctx.to_model), (Recording(c.FALLBACKS, _one),)
        ),
        "on_model_switched": EventMetrics(
            _FROM_TO,
            lambda ctx: (ctx.from_model, ctx.to_model),
            (Recording(c.MODEL_SWITCHES, _one),),
        ),
        "on_compaction": EventMetrics(
            (c.LOOPOBS_COMPACTION_REASON,),
            lambda ctx: (ctx.reason,),
            (
                Recording(c.COMPACTIONS, _one),
                Recording(
                    c.COMPACTION_TOKENS_SAVED, lambda ctx: max(0, ctx.tokens_saved), skip_zero=True
                ),
            ),
        ),
        "on_loop_detected": EventMetrics(
            (c.GEN_AI_TOOL_NAME, c.LOOPOBS_DETECTION_ACTION),
            lambda ctx: (ctx.tool or "", ctx.action),
            (Recording(c.LOOP_DETECTIONS, _one),),
        ),
        "on_convergence_detected": EventMetrics(
            (c.LOOPOBS_DETECTION_ACTION,),
            lambda ctx: (ctx.action,),
            (Recording(c.CONVERGENCE_DETECTIONS, _one),),
        ),
        "on_context_provider": EventMetrics(
            (c.LOOPOBS_CONTEXT_PROVIDER_NAME, c.LOOPOBS_CONTEXT_PROVIDER_OUTCOME),
            lambda ctx: (ctx.provider, ctx.outcome),
            (Recording(c.CONTEXT_PROVIDER_DURATION, _seconds, exemplar=True),),
        ),
        "on_backpressure": EventMetrics(
            (c.LOOPOBS_QUEUE_NAME, c.LOOPOBS_QUEUE_OUTCOME),
            lambda ctx: (ctx.queue, ctx.outcome),
            (Recording(c.SESSION_QUEUE_EVENTS, _one),),
        ),
        "on_budget_exceeded": EventMetrics(
            (c.LOOPOBS_BUDGET_LIMIT, c.LOOPOBS_BUDGET_SCOPE, c.LOOPOBS_BUDGET_ACTION),
            lambda ctx: (ctx.limit, ctx.scope, ctx.action),
            (Recording(c.BUDGET_EXCEEDED, _one),),
            with_agent=True,
        ),
        "on_budget_unpriced": EventMetrics(
            (c.GEN_AI_PROVIDER_NAME, c.GEN_AI_REQUEST_MODEL, c.LOOPOBS_BUDGET_SCOPE),
            lambda ctx: (ctx.provider, ctx.model, ctx.scope),
            (Recording(c.BUDGET_UNPRICED, _one),),
            with_agent=True,
        ),
        "on_shared_budget": EventMetrics(
            (c.LOOPOBS_SHARED_BUDGET_OPERATION, c.LOOPOBS_SHARED_BUDGET_OUTCOME),
            lambda ctx: (ctx.operation, ctx.outcome),
            (
                Recording(c.SHARED_BUDGET_OPERATIONS, _one),
                Recording(c.SHARED_BUDGET_STORE_DURATION, _seconds),
                Recording(c.SHARED_BUDGET_EXPIRED, _expired, skip_zero=True),
                Recording(c.SHARED_BUDGET_DRIFT, _drift),
            ),
            with_agent=True,
        ),
    }


EVENT_METRICS: Mapping[ev.HookName, EventMetrics] = event_metrics_for(False)
"""Hook → what its event records, in recording order (default conventions)."""
EVENT_METRICS_LATEST: Mapping[ev.HookName, EventMetrics] = event_metrics_for(True)
"""The same with ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``."""

Sink = Callable[[float, tuple[str, ...], UUID], None]
"""Records one value with its label values (in the metric's attribute order) for a run."""
Recorder = Callable[[float, UUID], None]
"""Records one value for a run, with the label values it was bound to."""
Binder = Callable[[tuple[str, ...]], Recorder]
"""The recorder of one metric for a set of label values (in the metric's attribute order)."""


_PickedKey = tuple[str, tuple[str, ...], "str | None", str, tuple[str, ...]]
_Slot = list[Any]
"""A metric's label values for one event label set, and its recorder once bound."""
_PICKED_MAX = 10_000
"""Label sets whose picked values (and recorders) a recorder keeps (cleared when full)."""
_BOUND_MAX = 4_096
"""Recorders one metric keeps bound, by label values (cleared when full)."""


class _Step(NamedTuple):
    # A tuple, unpacked in the walk: cheaper per event than attribute lookups.
    value: Callable[[Any], float | None]
    skip_zero: bool
    started_only: bool
    pick: Callable[[Sequence[str]], tuple[str, ...]]
    bind: Binder


@dataclass(slots=True)
class _Chunks:
    """An open attempt's chunk timing: its label values, its last chunk, its recorder."""

    labels: tuple[str, ...]
    last_ns: int | None = None
    record: Recorder | None = None
    """Bound at the attempt's first gap: an attempt without one creates no series."""


@dataclass(frozen=True, slots=True)
class _Plan:
    labels: Callable[[Any], tuple[str, ...]]
    bounds: tuple[Callable[[str], str], ...]
    with_agent: bool
    tail: tuple[str, ...]
    steps: tuple[_Step, ...]


def _picker(indices: Sequence[int]) -> Callable[[Sequence[str]], tuple[str, ...]]:
    if not indices:
        return lambda row: ()
    if len(indices) == 1:
        index = indices[0]
        return lambda row: (row[index],)
    getter: Callable[[Sequence[str]], tuple[str, ...]] = operator.itemgetter(*indices)
    return getter


class MetricRecorder(LoopObserver):
    """Records :data:`EVENT_METRICS`; a backend supplies :meth:`_bounder` and :meth:`_binder`.

    The table is compiled once per recorder into per-hook plans (bound
    functions, label positions, binders). An event's label set is resolved once
    into the recorders of its metrics (each bound to its label values by the
    backend), so a repeated label set costs one lookup and its records. Per
    run, only the (bounded) agent name is kept, from ``on_run_start`` to
    ``on_run_end``; ``runs.active`` drops only for runs whose start was seen, so
    a recorder attached halfway through a run never goes below zero. Safe to
    share between concurrent runs and threads, as the backends are.
    """

    def __init__(
        self,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
        *,
        latest_semconv: bool | None = None,
        attribution_labels: Mapping[str, int] | None = None,
    ) -> None:
        self.max_label_values = label_values_limit(max_label_values)
        self.latest_semconv = c.latest_experimental() if latest_semconv is None else latest_semconv
        """Whether the newest GenAI names are recorded (``OTEL_SEMCONV_STABILITY_OPT_IN``)."""
        self.attribution_labels: Mapping[str, int] = attribution_limits(attribution_labels)
        """Attribution names recorded as labels of the cost metrics, each with its bound."""
        keys = tuple(c.LOOPOBS_ATTRIBUTION_PREFIX + name for name in self.attribution_labels)
        self._attribution_keys = keys
        self._label_limits = dict(zip(keys, self.attribution_labels.values(), strict=True))
        self._blank: tuple[str, ...] = ("",) * len(keys)
        self._attributions: dict[UUID, tuple[str, ...]] = {}
        extended = {
            spec.name: dataclasses.replace(spec, attributes=spec.attributes + keys)
            for spec in ATTRIBUTED_METRICS
            if keys
        }
        self.metric_specs = tuple(
            extended.get(spec.name, spec) for spec in c.metrics_for(self.latest_semconv)
        )
        """The metrics this recorder records: the catalog's set for its conventions (the
        cost metrics with the allow-listed attribution labels)."""
        table = event_metrics_for(self.latest_semconv)
        if extended:
            table = {
                hook: dataclasses.replace(
                    mapping,
                    recordings=tuple(
                        dataclasses.replace(r, metric=extended.get(r.metric.name, r.metric))
                        for r in mapping.recordings
                    ),
                )
                for hook, mapping in table.items()
            }
        self._table = table
        self._agents: dict[UUID, str] = {}
        self._models: dict[UUID, str] = {}
        self._calls: dict[UUID, list[int]] = {}
        self._chunks: dict[UUID, dict[int, _Chunks]] = {}
        """Open attempts' chunk timing, by run then turn (a run's own events touch its part)."""
        self._plans: dict[str, _Plan] = {}
        self._picked: dict[_PickedKey, tuple[_Slot, ...]] = {}

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended (0 between runs: no per-run state leaks)."""
        return len(self._agents)

    def label_limit(self, key: str) -> int:
        """Distinct values label ``key`` admits: its ``attribution_labels`` bound, else
        ``max_label_values``."""
        return self._label_limits.get(key, self.max_label_values)

    # -- what a backend supplies -----------------------------------------------------------
    def _bounder(self, key: str) -> Callable[[str], str]:
        """The bound of label ``key``: a value, or ``_other`` once the key has its fill."""
        raise NotImplementedError

    def _binder(self, recording: Recording) -> Binder:
        """How this backend records ``recording``'s metric for one set of label values."""
        raise NotImplementedError

    def _memo(self, recording: Recording) -> Binder:
        """The backend's binder of ``recording``, keeping each label set's recorder."""
        binder = self._binder(recording)
        bound: dict[tuple[str, ...], Recorder] = {}

        def bind(values: tuple[str, ...]) -> Recorder:
            found = bound.get(values)
            if found is None:
                if len(bound) >= _BOUND_MAX:  # reset() lets new values in: stay bounded anyway
                    bound.clear()
                found = bound[values] = binder(values)
            return found

        return bind

    def _sink(self, recording: Recording) -> Sink:
        """Records ``recording``'s metric by label values (for the paths not cached per event)."""
        bind = self._memo(recording)

        def sink(value: float, values: tuple[str, ...], run_id: UUID) -> None:
            bind(values)(value, run_id)

        return sink

    def _compile(self) -> None:
        """Turn :data:`EVENT_METRICS` into this backend's plans; call once, after setup."""
        self._agent_bound = self._bounder(c.GEN_AI_AGENT_NAME)
        self._model_bound = self._bounder(c.GEN_AI_REQUEST_MODEL)
        self._attribution_bounds = tuple(
            (name, self._bounder(key))
            for name, key in zip(self.attribution_labels, self._attribution_keys, strict=True)
        )
        for hook, mapping in self._table.items():
            # A row holds the event's bounded values, then the run's agent and model, then ""
            # (absent), then the fixed values; each metric picks its attributes by position.
            # The run's bounded attribution values follow its model.
            position = {key: i for i, key in enumerate(mapping.keys)}
            attributed = len(self._attribution_keys)
            agent_at, absent_at = len(mapping.keys), len(mapping.keys) + 2 + attributed
            if mapping.with_agent:
                position[c.GEN_AI_AGENT_NAME] = agent_at
                position.setdefault(c.GEN_AI_REQUEST_MODEL, agent_at + 1)
                for i, key in enumerate(self._attribution_keys):
                    position[key] = agent_at + 2 + i
            tail: list[str] = [""]
            steps = []
            for recording in mapping.recordings:
                indices = []
                for attribute in recording.metric.attributes:
                    fixed = recording.fixed.get(attribute)
                    if fixed is not None:
                        indices.append(absent_at + len(tail))
                        tail.append(fixed)
                    else:
                        indices.append(position.get(attribute, absent_at))
                steps.append(
                    _Step(
                        recording.value,
                        recording.skip_zero,
                        recording.started_only,
                        _picker(indices),
                        self._memo(recording),
                    )
                )
            self._plans[hook] = _Plan(
                mapping.labels,
                tuple(self._bounder(k) for k in mapping.keys),
                mapping.with_agent,
                tuple(tail),
                tuple(steps),
            )
        chunk = (
            c.INFERENCE_TIME_PER_OUTPUT_CHUNK if self.latest_semconv else c.TIME_PER_OUTPUT_CHUNK
        )
        self._chunk_bind = self._memo(Recording(chunk, _one, _CHAT))
        self._chunk_bounds = tuple(
            self._bounder(key) if key != c.GEN_AI_OPERATION_NAME else None
            for key in chunk.attributes
        )
        self._per_run_sinks = (
            tuple(
                self._sink(Recording(spec, _one, {c.GEN_AI_OPERATION_NAME: c.OP_INVOKE_AGENT}))
                for spec in (c.AGENT_INFERENCE_CALLS, c.AGENT_TOOL_CALLS)
            )
            if self.latest_semconv
            else ()
        )

    # -- the walk --------------------------------------------------------------------------
    def _apply(self, ctx: ev.EventContext, agent: str | None, model: str = "") -> None:
        plan = self._plans[ctx.hook]
        raw = plan.labels(ctx)
        # Each metric's label values for an event's label set, kept once every value passed
        # its bound unchanged, with the metric's recorder once bound (at its first value: a
        # metric never recorded creates no series). A repeated label set skips the bounds,
        # the picking and the binding. Values folded into _other are bounded again every
        # time (each fold is counted).
        attrs = self._attributions.get(ctx.run_id, self._blank) if self._blank else ()
        key = (ctx.hook, raw, agent, model, attrs)
        slots = self._picked.get(key)
        if slots is None:
            bounds = plan.bounds
            row = [bound(value) if value else "" for bound, value in zip(bounds, raw, strict=True)]
            cacheable = row == list(raw)
            row.append(agent or "")
            row.append(model)
            row.extend(attrs)
            row.extend(plan.tail)
            slots = tuple([step.pick(row), None] for step in plan.steps)
            if cacheable:
                if len(self._picked) >= _PICKED_MAX:
                    self._picked.clear()
                self._picked[key] = slots
        run_id = ctx.run_id
        for (value_of, skip_zero, started_only, _pick, bind), slot in zip(
            plan.steps, slots, strict=True
        ):
            if started_only and agent is None:
                continue
            value = value_of(ctx)
            if value is None or (skip_zero and not value):
                continue
            record = slot[1]
            if record is None:
                record = slot[1] = bind(slot[0])
            record(value, run_id)

    def _forget_agents(self) -> list[str]:
        """Drop every open run's agent (for ``reset``); return them."""
        agents = list(self._agents.values())
        self._agents.clear()
        self._models.clear()
        self._calls.clear()
        self._chunks.clear()
        self._attributions.clear()
        self._picked.clear()  # bounds forget their values too
        return agents

    # -- the hooks -------------------------------------------------------------------------
    def _record_event(self, ctx: ev.EventContext) -> None:
        """Record what :data:`EVENT_METRICS` says ``ctx``'s hook records.

        Every hook of the table that needs no more than that (the turn's end, fallbacks,
        detections, compactions, budgets …) is this method: a row that asks for the
        run's agent gets the agent and model remembered since ``on_run_start``.
        """
        if self._plans[ctx.hook].with_agent:
            run_id = ctx.run_id
            self._apply(ctx, self._agents.get(run_id), self._models.get(run_id, ""))
        else:
            self._apply(ctx, None)

    def on_run_start(self, ctx: ev.RunStartContext) -> None:
        """``runs.active`` +1 for the run's agent, remembered until the run ends."""
        agent = self._agent_bound(ctx.agent)
        self._agents[ctx.run_id] = agent
        self._models[ctx.run_id] = self._model_bound(ctx.model) if ctx.model else ""
        if self.latest_semconv:
            self._calls[ctx.run_id] = [0, 0]
        if self._attribution_bounds:
            given = ctx.attribution
            self._attributions[ctx.run_id] = tuple(
                bound(value) if (value := given.get(name)) else ""
                for name, bound in self._attribution_bounds
            )
        self._apply(ctx, agent, self._models[ctx.run_id])

    def on_run_end(self, ctx: ev.RunEndContext) -> None:
        """``runs`` by status, the run's duration, ``runs.active`` −1; the run is forgotten.

        With the newest conventions, also the run's model and tool call counts.
        """
        self._chunks.pop(ctx.run_id, None)
        agent = self._agents.pop(ctx.run_id, None)
        model = self._models.pop(ctx.run_id, "")
        self._apply(ctx, agent, model)
        if self._attributions:
            self._attributions.pop(ctx.run_id, None)
        calls = self._calls.pop(ctx.run_id, None)
        if calls is not None and agent is not None:
            labels = (
                c.OP_INVOKE_AGENT,
                agent,
                model,
                "" if ctx.error is None else error_type(ctx.error),
            )
            for sink, count in zip(self._per_run_sinks, calls, strict=True):
                sink(count, labels, ctx.run_id)

    def on_stream_start(self, ctx: ev.StreamStartContext) -> None:
        """Start timing the attempt's chunks (and count the run's model calls)."""
        calls = self._calls.get(ctx.run_id)
        if calls is not None:
            calls[0] += 1
        raw = {
            c.GEN_AI_PROVIDER_NAME: ctx.provider,
            c.GEN_AI_REQUEST_MODEL: ctx.model,
            c.SERVER_ADDRESS: ctx.server_address or "",
            c.SERVER_PORT: _port(ctx.server_port),
        }
        attributes = (
            c.INFERENCE_TIME_PER_OUTPUT_CHUNK if self.latest_semconv else c.TIME_PER_OUTPUT_CHUNK
        ).attributes
        labels = tuple(
            c.OP_CHAT if bound is None else (bound(value) if (value := raw.get(key)) else "")
            for key, bound in zip(attributes, self._chunk_bounds, strict=True)
        )
        turns = self._chunks.get(ctx.run_id)
        if turns is None:
            turns = self._chunks[ctx.run_id] = {}
        turns[ctx.turn] = _Chunks(labels)

    def _chunk(self, run_id: UUID, turn: int, time_ns: int) -> None:
        turns = self._chunks.get(run_id)
        chunks = None if turns is None else turns.get(turn)
        if chunks is None:
            return
        last = chunks.last_ns
        chunks.last_ns = time_ns
        if last is not None:
            record = chunks.record
            if record is None:
                record = chunks.record = self._chunk_bind(chunks.labels)
            record(max(0, time_ns - last) / 1e9, run_id)

    def _end_chunks(self, run_id: UUID, turn: int) -> None:
        turns = self._chunks.get(run_id)
        if turns is not None:
            turns.pop(turn, None)
            if not turns:
                del self._chunks[run_id]

    def on_text_delta(self, ctx: ev.TextDeltaContext) -> None:
        """The time since the attempt's previous chunk (from the second chunk on), recorded now.

        Recorded in the emitter's context: under the loop, the chat span it timed is current,
        so an exemplar links to it.
        """
        self._chunk(ctx.run_id, ctx.turn, ctx.time_ns)

    def on_thinking_delta(self, ctx: ev.ThinkingDeltaContext) -> None:
        """The time since the attempt's previous chunk (reasoning chunks are output too)."""
        self._chunk(ctx.run_id, ctx.turn, ctx.time_ns)

    def on_stream_success(self, ctx: ev.StreamSuccessContext) -> None:
        """The call's duration, time to first chunk and tokens; its chunk timing ends."""
        self._end_chunks(ctx.run_id, ctx.turn)
        self._apply(ctx, self._agents.get(ctx.run_id))

    def on_stream_failure(self, ctx: ev.StreamFailureContext) -> None:
        """The failed attempt's duration (with ``error.type``) and a stream failure."""
        self._end_chunks(ctx.run_id, ctx.turn)
        self._apply(ctx, self._agents.get(ctx.run_id))

    def on_tool_post(self, ctx: ev.ToolPostContext) -> None:
        """The attempt's duration (``error.type`` when it failed) and ``tool.calls`` by outcome."""
        calls = self._calls.get(ctx.run_id)
        if calls is not None:
            calls[1] += 1
        self._apply(ctx, self._agents.get(ctx.run_id))


def _bind_table_hooks() -> None:
    """Every hook the table names and ``MetricRecorder`` does not define records its row."""
    for hook in {**EVENT_METRICS, **EVENT_METRICS_LATEST}:
        if hook not in vars(MetricRecorder):
            setattr(MetricRecorder, hook, MetricRecorder._record_event)


_bind_table_hooks()
