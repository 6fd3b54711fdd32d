"""``MetricsObserver``: loop events → OpenTelemetry metrics, named by the catalog.

Instruments are created once, from :data:`loopobs.exporters.catalog.METRICS`
(name, kind, unit, description, advisory buckets). Attributes are the spec's
low-cardinality keys only — model, provider, tool, agent, status, error type,
token type — never ids or content. A label that sees more than
``max_label_values`` distinct values folds the rest into ``_other`` and counts
the fold in ``loopobs.label_overflow``, so a misbehaving caller cannot mint
unbounded series.

``loopobs.observer.errors`` is an observable counter: its callback reads the
failure counts of every :class:`~loopobs.core.observer.ObserverSet` this
observer was attached to.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from loopobs.core.events import (
    BudgetExceededContext,
    CompactedContext,
    ConvergenceDetectedContext,
    FallbackContext,
    LoopDetectedContext,
    ModelSwitchedContext,
    RunEndContext,
    RunStartContext,
    StreamContext,
    StreamFailureContext,
    ToolPostContext,
    TurnEndContext,
)
from loopobs.core.observer import LoopObserver, ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters.catalog import MetricSpec

__all__ = ["DEFAULT_MAX_LABEL_VALUES", "MetricsObserver"]

DEFAULT_MAX_LABEL_VALUES = 200
"""Distinct values one label key may take before new ones fold into ``_other``."""

_CAPPED = frozenset({
    c.GEN_AI_AGENT_NAME, c.GEN_AI_REQUEST_MODEL, c.GEN_AI_PROVIDER_NAME, c.GEN_AI_TOOL_NAME,
    c.LOOPOBS_MODEL_FROM, c.LOOPOBS_MODEL_TO, c.ERROR_TYPE, c.LOOPOBS_RUN_STATUS,
    c.LOOPOBS_COMPACTION_REASON, c.LOOPOBS_DETECTION_ACTION, c.LOOPOBS_TOOL_OUTCOME,
    c.LOOPOBS_OBSERVER_NAME,
})


class MetricsObserver(LoopObserver):
    """Records GenAI client metrics and loop lifecycle metrics; safe across concurrent runs.

    Args:
        meter_provider: where metrics go; ``None`` uses the global provider (a
            no-op until the application installs an SDK). Never installed globally.
        max_label_values: cap on distinct values per label key.

    Per-run state is the agent name of each open run, dropped at ``on_run_end``.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    ) -> None:
        from loopobs import __version__

        self._provider = meter_provider
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
        self._max_label_values = max_label_values
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._agents: dict[UUID, str] = {}
        self._sets: weakref.WeakSet[ObserverSet] = weakref.WeakSet()
        self._instruments: dict[str, Any] = {}
        for spec in c.METRICS:
            if spec is c.OBSERVER_ERRORS:
                self._instruments[spec.name] = meter.create_observable_counter(
                    spec.name, [self._observe_errors], unit=spec.unit,
                    description=spec.description)
            else:
                self._instruments[spec.name] = _create(meter, spec)
        i = self._instruments
        self._token_usage = i[c.TOKEN_USAGE.name]
        self._op_duration = i[c.OPERATION_DURATION.name]
        self._ttfc = i[c.TIME_TO_FIRST_CHUNK.name]
        self._tool_duration = i[c.TOOL_DURATION.name]
        self._agent_duration = i[c.AGENT_DURATION.name]
        self._runs = i[c.RUNS.name]
        self._runs_active = i[c.RUNS_ACTIVE.name]
        self._turns = i[c.TURNS.name]
        self._tokens = i[c.TOKENS.name]
        self._tool_calls = i[c.TOOL_CALLS.name]
        self._stream_failures = i[c.STREAM_FAILURES.name]
        self._fallbacks = i[c.FALLBACKS.name]
        self._model_switches = i[c.MODEL_SWITCHES.name]
        self._compactions = i[c.COMPACTIONS.name]
        self._tokens_saved = i[c.COMPACTION_TOKENS_SAVED.name]
        self._loop_detections = i[c.LOOP_DETECTIONS.name]
        self._convergence = i[c.CONVERGENCE_DETECTIONS.name]
        self._label_overflow = i[c.LABEL_OVERFLOW.name]
        self._cost = i[c.COST.name]
        self._unpriced = i[c.UNPRICED_CALLS.name]
        self._run_cost = i[c.RUN_COST.name]
        self._budget_exceeded = i[c.BUDGET_EXCEEDED.name]

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended (0 between runs: no per-run state leaks)."""
        return len(self._agents)

    # -- label governance -----------------------------------------------------------------
    def _v(self, key: str, value: str) -> str:
        """``value`` for label ``key``, or ``_other`` once the key has its fill of values."""
        seen = self._seen.get(key)
        if seen is not None and value in seen:
            return value
        with self._lock:
            seen = self._seen.setdefault(key, set())
            if value in seen:
                return value
            if len(seen) < self._max_label_values:
                seen.add(value)
                return value
        self._label_overflow.add(1, {c.LOOPOBS_LABEL: key})
        return c.OVERFLOW_VALUE

    def _model_attrs(self, provider: str, model: str) -> dict[str, str]:
        attrs = {c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                 c.GEN_AI_REQUEST_MODEL: self._v(c.GEN_AI_REQUEST_MODEL, model)}
        if provider:
            attrs[c.GEN_AI_PROVIDER_NAME] = self._v(c.GEN_AI_PROVIDER_NAME, provider)
        return attrs

    def _agent(self, run_id: UUID) -> dict[str, str]:
        agent = self._agents.get(run_id)
        return {} if agent is None else {c.GEN_AI_AGENT_NAME: agent}

    # -- observer errors ------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Remember ``observers``: ``loopobs.observer.errors`` reports its failure counts."""
        self._sets.add(observers)

    def on_detach(self, observers: ObserverSet) -> None:
        """Stop reporting ``observers``' failures."""
        self._sets.discard(observers)

    def _observe_errors(self, options: CallbackOptions) -> Iterable[Observation]:
        totals: dict[tuple[str, str], int] = {}
        for observers in list(self._sets):
            for key, count in observers.failures.items():
                totals[key] = totals.get(key, 0) + count
        return [
            Observation(count, {c.LOOPOBS_OBSERVER_NAME: self._v(c.LOOPOBS_OBSERVER_NAME, name),
                                c.LOOPOBS_OBSERVER_HOOK: hook})
            for (name, hook), count in totals.items()
        ]

    # -- runs and turns -------------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """``loopobs.runs.active`` +1 for the run's agent."""
        agent = self._v(c.GEN_AI_AGENT_NAME, ctx.agent)
        self._agents[ctx.run_id] = agent
        self._runs_active.add(1, {c.GEN_AI_AGENT_NAME: agent})

    def on_run_end(self, ctx: RunEndContext) -> None:
        """``loopobs.runs`` by status, ``gen_ai.invoke_agent.duration``, ``runs.active`` −1."""
        agent = self._agents.pop(ctx.run_id, None)
        base = {} if agent is None else {c.GEN_AI_AGENT_NAME: agent}
        self._runs.add(1, {**base, c.LOOPOBS_RUN_STATUS: self._v(c.LOOPOBS_RUN_STATUS,
                                                                 ctx.status)})
        duration = dict(base)
        if ctx.error is not None:
            duration[c.ERROR_TYPE] = self._v(c.ERROR_TYPE, type(ctx.error).__name__)
        self._agent_duration.record(ctx.duration_ms / 1000, duration)
        if ctx.cost_usd is not None:
            self._run_cost.record(ctx.cost_usd, base)
        if agent is not None:
            self._runs_active.add(-1, base)

    def on_turn_end(self, ctx: TurnEndContext) -> None:
        """``loopobs.turns`` +1."""
        self._turns.add(1, self._agent(ctx.run_id))

    # -- model calls ----------------------------------------------------------------------
    def on_stream_success(self, ctx: StreamContext) -> None:
        """Duration, time to first chunk, token usage (histogram and ``loopobs.tokens``)."""
        attrs = self._model_attrs(ctx.provider, ctx.model)
        self._op_duration.record(ctx.duration_ms / 1000, attrs)
        if ctx.time_to_first_token_ms is not None:
            self._ttfc.record(ctx.time_to_first_token_ms / 1000, attrs)
        self._token_usage.record(ctx.input_tokens, {**attrs, c.GEN_AI_TOKEN_TYPE: c.TOKEN_INPUT})
        self._token_usage.record(ctx.output_tokens,
                                 {**attrs, c.GEN_AI_TOKEN_TYPE: c.TOKEN_OUTPUT})
        tokens = {k: v for k, v in attrs.items() if k != c.GEN_AI_OPERATION_NAME}
        for kind, count in (
            (c.TOKEN_INPUT, ctx.input_tokens),
            (c.TOKEN_OUTPUT, ctx.output_tokens),
            (c.TOKEN_CACHE_READ, ctx.cache_read_input_tokens),
            (c.TOKEN_CACHE_WRITE, ctx.cache_write_input_tokens),
            (c.TOKEN_REASONING, ctx.reasoning_output_tokens),
        ):
            if count:
                self._tokens.add(count, {**tokens, c.GEN_AI_TOKEN_TYPE: kind})
        if ctx.cost_usd is None:
            self._unpriced.add(1, tokens)
        else:
            self._cost.add(ctx.cost_usd, tokens)

    def on_stream_failure(self, ctx: StreamFailureContext) -> None:
        """Duration with ``error.type``, and ``loopobs.stream.failures``."""
        attrs = self._model_attrs(ctx.provider, ctx.model)
        attrs[c.ERROR_TYPE] = self._v(c.ERROR_TYPE, type(ctx.error).__name__)
        self._op_duration.record(ctx.duration_ms / 1000, attrs)
        del attrs[c.GEN_AI_OPERATION_NAME]
        self._stream_failures.add(1, attrs)

    # -- tools ----------------------------------------------------------------------------
    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """``gen_ai.execute_tool.duration`` and ``loopobs.tool.calls`` by outcome."""
        tool = self._v(c.GEN_AI_TOOL_NAME, ctx.tool)
        duration = {c.GEN_AI_TOOL_NAME: tool}
        if ctx.is_error:
            duration[c.ERROR_TYPE] = self._v(
                c.ERROR_TYPE, type(ctx.error).__name__ if ctx.error is not None else "ToolError")
        self._tool_duration.record(ctx.duration_ms / 1000, duration)
        self._tool_calls.add(1, {c.GEN_AI_TOOL_NAME: tool,
                                 c.LOOPOBS_TOOL_OUTCOME: self._v(c.LOOPOBS_TOOL_OUTCOME,
                                                                 ctx.outcome)})

    # -- loop control ---------------------------------------------------------------------
    def _from_to(self, from_model: str, to_model: str) -> dict[str, str]:
        return {c.LOOPOBS_MODEL_FROM: self._v(c.LOOPOBS_MODEL_FROM, from_model),
                c.LOOPOBS_MODEL_TO: self._v(c.LOOPOBS_MODEL_TO, to_model)}

    def on_fallback(self, ctx: FallbackContext) -> None:
        """``loopobs.fallbacks`` +1 by from/to model."""
        self._fallbacks.add(1, self._from_to(ctx.from_model, ctx.to_model))

    def on_model_switched(self, ctx: ModelSwitchedContext) -> None:
        """``loopobs.model_switches`` +1 by from/to model."""
        self._model_switches.add(1, self._from_to(ctx.from_model, ctx.to_model))

    def on_compaction(self, ctx: CompactedContext) -> None:
        """``loopobs.compactions`` +1 and ``loopobs.compaction.tokens_saved``, by reason."""
        attrs = {c.LOOPOBS_COMPACTION_REASON: self._v(c.LOOPOBS_COMPACTION_REASON, ctx.reason)}
        self._compactions.add(1, attrs)
        if ctx.tokens_saved > 0:
            self._tokens_saved.add(ctx.tokens_saved, attrs)

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        """``loopobs.loop_detections`` +1 by tool and action."""
        attrs = {c.LOOPOBS_DETECTION_ACTION: self._v(c.LOOPOBS_DETECTION_ACTION, ctx.action)}
        if ctx.tool is not None:
            attrs[c.GEN_AI_TOOL_NAME] = self._v(c.GEN_AI_TOOL_NAME, ctx.tool)
        self._loop_detections.add(1, attrs)

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        """``loopobs.convergence_detections`` +1 by action."""
        self._convergence.add(
            1, {c.LOOPOBS_DETECTION_ACTION: self._v(c.LOOPOBS_DETECTION_ACTION, ctx.action)})

    def on_budget_exceeded(self, ctx: BudgetExceededContext) -> None:
        """``loopobs.budget.exceeded`` +1 by limit, scope and action."""
        self._budget_exceeded.add(1, {**self._agent(ctx.run_id),
                                      c.LOOPOBS_BUDGET_LIMIT: ctx.limit,
                                      c.LOOPOBS_BUDGET_SCOPE: ctx.scope,
                                      c.LOOPOBS_BUDGET_ACTION: ctx.action})

    # -- lifecycle ------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget open runs (their ``runs.active`` contribution is withdrawn) and seen labels."""
        for run_id in list(self._agents):
            agent = self._agents.pop(run_id, None)
            if agent is not None:
                self._runs_active.add(-1, {c.GEN_AI_AGENT_NAME: agent})
        with self._lock:
            self._seen.clear()

    def force_flush(self, timeout_s: float | None = None) -> None:
        """Flush the meter provider, if it is an SDK provider this observer was given."""
        flush = getattr(self._provider, "force_flush", None)
        if flush is not None:
            flush(int((30.0 if timeout_s is None else timeout_s) * 1000))


def _create(meter: metrics.Meter, spec: MetricSpec) -> Any:
    if spec.kind == "histogram":
        return meter.create_histogram(
            spec.name, unit=spec.unit, description=spec.description,
            explicit_bucket_boundaries_advisory=list(spec.buckets) if spec.buckets else None)
    if spec.kind == "updown_counter":
        return meter.create_up_down_counter(spec.name, unit=spec.unit,
                                            description=spec.description)
    return meter.create_counter(spec.name, unit=spec.unit, description=spec.description)

