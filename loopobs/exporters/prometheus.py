"""``PrometheusObserver``: agent-loop metrics recorded straight into ``prometheus-client``.

Every metric, label name, unit and bucket list comes from
:mod:`loopobs.exporters.catalog`, under the name OpenTelemetry's Prometheus
translation gives the matching ``MetricsObserver`` instrument, so one dashboard
serves a direct scrape and an OTLP → Collector → Prometheus pipeline.

Recording is cheap: each label value passes a bound (a set lookup), and the
label children of each metric are cached by their value tuple, so a repeated
label set costs a dict lookup plus prometheus-client's own ``inc`` /
``observe``. Serve the registry with
:func:`loopobs.exporters.metrics_server.start_metrics_server`.

Bounded labels: model and tool names come from model output. Each label name
admits at most ``max_label_values`` distinct values; later values are recorded
as ``_other`` and each such event is counted in
``loopobs_label_overflow_total{loopobs_label="<label name>"}``.

Exemplars: when a ``TracingObserver`` traces the run (see
:mod:`loopobs.exporters.trace_links`), token and duration samples carry the
run's ``trace_id`` and root ``span_id`` (visible in the OpenMetrics format).

Multi-process: with ``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client``
is imported, values go to per-process files that a ``MultiProcessCollector``
sums; ``loopobs_runs_active`` then uses the ``livesum`` gauge mode, and
exemplars are off (prometheus-client does not store them there). See
``docs/prometheus.md``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, get_args
from uuid import UUID

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import values as _prom_values

from loopobs.core.detectors import ConvergenceAction
from loopobs.core.errors import LoopError, ModelError, RateLimited, StreamError
from loopobs.core.events import (
    CompactedContext,
    ConvergenceDetectedContext,
    FallbackContext,
    LoopDetectedContext,
    ModelSwitchedContext,
    RunEndContext,
    RunStartContext,
    StreamContext,
    StreamFailureContext,
    ToolOutcomeKind,
    ToolPostContext,
    TurnEndContext,
)
from loopobs.core.observer import LoopObserver, ObserverSet
from loopobs.core.run import RunStatus
from loopobs.exporters import catalog as c
from loopobs.exporters import trace_links

__all__ = ["BoundedLabel", "PrometheusObserver", "multiprocess_enabled"]

_ABSENT = ""
"""Label value for an attribute that does not apply (Prometheus treats ``""`` as absent)."""
_TOOL_ERROR = "ToolError"
"""``error.type`` of a failed tool attempt that carries no error object (as MetricsObserver)."""

# Label values known in advance: their series start at zero (the Prometheus
# instrumentation guide's advice), so a dashboard shows 0 rather than "No data" and
# an absent()-style alert does not fire before the first event.
_RUN_STATUSES = tuple(status.value for status in RunStatus)
_TOOL_OUTCOMES: tuple[str, ...] = get_args(ToolOutcomeKind)
_STREAM_ERROR_TYPES = tuple(cls.__name__ for cls in (ModelError, RateLimited, StreamError))
_LOOP_ACTIONS = ("warn", "stop")
_CONVERGENCE_ACTIONS: tuple[str, ...] = get_args(ConvergenceAction)
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_enabled() -> bool:
    """Whether prometheus-client stores values in ``PROMETHEUS_MULTIPROC_DIR`` files.

    prometheus-client decides this once, when it is first imported.
    """
    return bool(getattr(_prom_values.ValueClass, "_multiprocess", False))


_SHARED: dict[tuple[str, str], Any] = {}
_SHARED_LOCK = threading.Lock()


def _metric(cls: Callable[..., Any], name: str, registry: CollectorRegistry | None,
            *args: Any, **kwargs: Any) -> Any:
    """A prometheus-client metric; in multi-process mode, one per name in the process.

    A multi-process value caches its number and writes it whole to the
    process's file, so two metric objects for one series would overwrite each
    other's counts. Every observer of the process therefore shares one object
    per metric, registered in each observer's registry.
    """
    if not multiprocess_enabled():
        return cls(name, *args, registry=registry, **kwargs)
    with _SHARED_LOCK:
        key = (getattr(cls, "__name__", str(cls)), name)
        metric = _SHARED.get(key)
        if metric is None:
            metric = _SHARED[key] = cls(name, *args, registry=None, **kwargs)
    if registry is not None:
        registry.register(metric)
    return metric


def _check_multiprocess_dir() -> None:
    """Fail now, naming the variable, if multi-process values have nowhere to go."""
    path = os.environ.get(_MULTIPROC_ENV, "")
    if not path:
        raise ValueError(
            f"prometheus-client is in multi-process mode but {_MULTIPROC_ENV} is no longer set: "
            "set it (to a writable directory) for the whole life of the process")
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"{_MULTIPROC_ENV}={path!r} is not a writable directory: create it "
                         "before the workers start")


def _sanitised(value: str) -> str | None:
    """``value`` with unencodable characters (lone surrogates) replaced; None if clean."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value)
    return None


def error_type(error: LoopError | None, default: str = c.ERROR_TYPE_OTHER) -> str:
    """The ``error.type`` label value of ``error``: its class name (``default`` for None)."""
    return default if error is None else type(error).__name__


class BoundedLabel:
    """Admits at most ``limit`` distinct values for one label name; later ones become ``_other``.

    ``""`` (attribute absent) is always admitted and not counted. Each value
    folded into ``_other`` increments ``overflow`` (a counter child for this
    label name, bound at the first overflow so that no zero series shows up
    before). A value that cannot be encoded (a lone surrogate, as a model's
    stream can split one) would fail every later scrape: its bad characters
    become U+FFFD first, each time counted in ``sanitised`` when given.
    Thread-safe; an admitted value costs one set lookup.
    """

    __slots__ = ("_declared", "_lock", "_overflow", "_overflow_metric", "_sanitised",
                 "_sanitised_metric", "_values", "limit", "name")

    def __init__(self, name: str, limit: int, overflow: Counter,
                 sanitised: Counter | None = None) -> None:
        self.name = name
        self.limit = limit
        self._overflow_metric = overflow
        self._overflow: Any = None
        self._sanitised_metric = sanitised
        self._sanitised: Any = None
        self._values: set[str] = {_ABSENT}
        self._declared = 1  # "" is admitted and not counted
        self._lock = threading.Lock()

    def declare(self, values: Iterable[str]) -> None:
        """Admit a fixed vocabulary (statuses, outcomes) without counting it toward ``limit``."""
        with self._lock:
            for value in values:
                if value not in self._values:
                    self._values.add(value)
                    self._declared += 1

    @property
    def admitted(self) -> frozenset[str]:
        """The values admitted so far (declared ones included, without ``""``)."""
        return frozenset(self._values - {_ABSENT})

    def __call__(self, value: str) -> str:
        """``value`` (made encodable) if admitted, now or before; else ``_other``."""
        if value in self._values:
            return value
        clean = _sanitised(value)
        if clean is not None:
            value = clean
            if self._sanitised_metric is not None:
                if self._sanitised is None:
                    self._sanitised = self._sanitised_metric.labels(self.name)
                self._sanitised.inc()
            if value in self._values:
                return value
        with self._lock:
            if value in self._values:
                return value
            if len(self._values) - self._declared < self.limit:
                self._values.add(value)
                return value
            if self._overflow is None:
                self._overflow = self._overflow_metric.labels(self.name)
        self._overflow.inc()
        return c.OVERFLOW_VALUE


class _Family:
    """One prometheus-client metric and its label children, cached by value tuple."""

    __slots__ = ("_children", "_lock", "metric")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}
        self._lock = threading.Lock()

    def zero(self, *values: str) -> None:
        """Create the series for ``values`` (at zero if it is new)."""
        self.child(*values)

    def child(self, *values: str) -> Any:
        """The child for ``values`` (already bounded, so the cache is bounded too)."""
        found = self._children.get(values)
        if found is None:
            with self._lock:
                found = self._children.get(values)
                if found is None:
                    found = self._children[values] = self.metric.labels(*values)
        return found


class _ObserverErrors:
    """``loopobs_observer_errors_total`` from the ``failures`` of the sets the observer is in.

    A registry collector: each scrape first adds the failures counted since the
    previous sync, then yields the counter. Syncing by delta keeps the counter
    monotonic when a set is detached, reset or garbage-collected; in
    multi-process mode the observer also syncs at every ``on_run_end``, because
    the worker's own registry is never scraped there.
    """

    def __init__(self, counter: Counter, bound_name: BoundedLabel, bound_hook: BoundedLabel):
        self._counter = counter
        self._family = _Family(counter)
        self._bound_name = bound_name
        self._bound_hook = bound_hook
        self._seen: weakref.WeakKeyDictionary[ObserverSet, Mapping[tuple[str, str], int]] = (
            weakref.WeakKeyDictionary()
        )
        self._lock = threading.Lock()

    def watch(self, observers: ObserverSet) -> None:
        """Start counting the failures of ``observers`` (those already counted included)."""
        with self._lock:
            self._seen.setdefault(observers, {})

    def sync(self) -> None:
        """Add each watched set's failures since the last sync to the counter."""
        with self._lock:
            for observers, seen in list(self._seen.items()):
                now = observers.failures
                for (name, hook), count in now.items():
                    before = seen.get((name, hook), 0)
                    delta = count - before if count >= before else count  # reset in between
                    if delta:
                        self._family.child(self._bound_name(name), self._bound_hook(hook)).inc(
                            delta
                        )
                self._seen[observers] = now

    def describe(self) -> Iterable[Any]:
        """The counter's family, so the registry can refuse duplicate names."""
        return self._counter.describe()

    def collect(self) -> Iterable[Any]:
        """Sync, then the counter's samples."""
        self.sync()
        return self._counter.collect()


class PrometheusObserver(LoopObserver):
    """Records the catalog's metrics on prometheus-client, ready for a ``/metrics`` scrape.

    Args:
        registry: Where the metrics are registered; a fresh ``CollectorRegistry``
            when ``None`` (never the global ``REGISTRY`` unless you pass it).
        max_label_values: Distinct values each label name admits before further
            values fold into ``_other``.
        exemplars: Attach ``trace_id`` / ``span_id`` exemplars to token and
            duration samples of traced runs (ignored in multi-process mode).

    Per run, only the agent name is kept (keyed by ``run_id``) from
    ``on_run_start`` to ``on_run_end``; nothing else outlives an event. Safe
    to share between concurrent runs and threads.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_label_values: int = 100,
        exemplars: bool = True,
    ) -> None:
        if max_label_values < 1:
            raise ValueError("max_label_values must be at least 1")
        self.multiprocess = multiprocess_enabled()
        if self.multiprocess:
            _check_multiprocess_dir()
        self.registry = CollectorRegistry() if registry is None else registry
        self.max_label_values = max_label_values
        self.exemplars = exemplars and not self.multiprocess
        reg = self.registry

        def hist(spec: c.MetricSpec) -> _Family:
            return _Family(_metric(
                Histogram, spec.prometheus_name, reg, spec.description, spec.prometheus_labels,
                unit=spec.prometheus_unit, buckets=spec.buckets or Histogram.DEFAULT_BUCKETS,
            ))

        def count(spec: c.MetricSpec, registry: CollectorRegistry | None = reg) -> Counter:
            counter: Counter = _metric(
                Counter, spec.prometheus_name, registry, spec.description,
                spec.prometheus_labels, unit=spec.prometheus_unit,
            )
            return counter

        overflow = count(c.LABEL_OVERFLOW)
        sanitised = count(c.LABEL_SANITISED)
        self._bounds: dict[str, BoundedLabel] = {}
        for spec in c.METRICS:
            for label in spec.prometheus_labels:
                if label not in self._bounds:
                    self._bounds[label] = BoundedLabel(label, max_label_values, overflow,
                                                       sanitised)
        lbl = c.prometheus_label
        self._b_provider = self._bounds[lbl(c.GEN_AI_PROVIDER_NAME)]
        self._b_model = self._bounds[lbl(c.GEN_AI_REQUEST_MODEL)]
        self._b_tool = self._bounds[lbl(c.GEN_AI_TOOL_NAME)]
        self._b_agent = self._bounds[lbl(c.GEN_AI_AGENT_NAME)]
        self._b_error = self._bounds[lbl(c.ERROR_TYPE)]
        self._b_status = self._bounds[lbl(c.LOOPOBS_RUN_STATUS)]
        self._b_outcome = self._bounds[lbl(c.LOOPOBS_TOOL_OUTCOME)]
        self._b_from = self._bounds[lbl(c.LOOPOBS_MODEL_FROM)]
        self._b_to = self._bounds[lbl(c.LOOPOBS_MODEL_TO)]
        self._b_reason = self._bounds[lbl(c.LOOPOBS_COMPACTION_REASON)]
        self._b_action = self._bounds[lbl(c.LOOPOBS_DETECTION_ACTION)]

        self._token_usage = hist(c.TOKEN_USAGE)
        self._op_duration = hist(c.OPERATION_DURATION)
        self._ttfc = hist(c.TIME_TO_FIRST_CHUNK)
        self._tool_duration = hist(c.TOOL_DURATION)
        self._agent_duration = hist(c.AGENT_DURATION)
        self._runs = _Family(count(c.RUNS))
        self._runs_active = _Family(_metric(
            Gauge, c.RUNS_ACTIVE.prometheus_name, reg, c.RUNS_ACTIVE.description,
            c.RUNS_ACTIVE.prometheus_labels, multiprocess_mode="livesum",
        ))
        self._turns = _Family(count(c.TURNS))
        self._tokens = _Family(count(c.TOKENS))
        self._tool_calls = _Family(count(c.TOOL_CALLS))
        self._stream_failures = _Family(count(c.STREAM_FAILURES))
        self._fallbacks = _Family(count(c.FALLBACKS))
        self._model_switches = _Family(count(c.MODEL_SWITCHES))
        self._compactions = _Family(count(c.COMPACTIONS))
        self._tokens_saved = _Family(count(c.COMPACTION_TOKENS_SAVED))
        self._loop_detections = _Family(count(c.LOOP_DETECTIONS))
        self._convergence = _Family(count(c.CONVERGENCE_DETECTIONS))
        self._observer_errors = _ObserverErrors(
            count(c.OBSERVER_ERRORS, registry=None),
            self._bounds[lbl(c.LOOPOBS_OBSERVER_NAME)],
            self._bounds[lbl(c.LOOPOBS_OBSERVER_HOOK)],
        )
        reg.register(self._observer_errors)

        self._b_status.declare(_RUN_STATUSES)
        self._b_outcome.declare(_TOOL_OUTCOMES)
        self._b_action.declare((*_LOOP_ACTIONS, *_CONVERGENCE_ACTIONS))
        self._b_error.declare(_STREAM_ERROR_TYPES)
        self._known: set[Hashable] = set()
        self._known_lock = threading.Lock()
        for action in _LOOP_ACTIONS:
            self._loop_detections.zero(_ABSENT, action)
        for action in _CONVERGENCE_ACTIONS:
            self._convergence.zero(action)
        self._agents: dict[UUID, str] = {}

    # -- helpers ------------------------------------------------------------------------------
    @property
    def label_bounds(self) -> Mapping[str, BoundedLabel]:
        """The bound of each Prometheus label name."""
        return self._bounds

    @property
    def open_runs(self) -> int:
        """Runs started and not yet ended (the per-run state this observer holds)."""
        return len(self._agents)

    def _first_time(self, key: Hashable) -> bool:
        """True once per ``key``: when its known label combinations must be created."""
        if key in self._known:
            return False
        with self._known_lock:
            if key in self._known:
                return False
            self._known.add(key)
            return True

    def _exemplar(self, run_id: UUID) -> dict[str, str] | None:
        if not self.exemplars:
            return None
        link = trace_links.lookup(run_id)
        if link is None:
            return None
        return {c.EXEMPLAR_TRACE_ID: link[0], c.EXEMPLAR_SPAN_ID: link[1]}

    # -- lifecycle ----------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Count the failures of ``observers`` in ``loopobs_observer_errors_total``."""
        self._observer_errors.watch(observers)

    def reset(self) -> None:
        """Forget the open runs, taking them out of ``loopobs_runs_active``.

        Recorded counters and histograms stay (they are cumulative); a run
        forgotten here that ends later is recorded as one joined halfway.
        """
        for run_id in list(self._agents):
            agent = self._agents.pop(run_id, None)
            if agent is not None:
                self._runs_active.child(agent).dec()

    def sync_observer_errors(self) -> None:
        """Bring ``loopobs_observer_errors_total`` up to date now (scrapes do it themselves)."""
        self._observer_errors.sync()

    # -- runs and turns -----------------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """Remember the run's agent and count it in ``loopobs_runs_active``."""
        agent = self._b_agent(ctx.agent)
        if self._first_time(("agent", agent)):
            for status in _RUN_STATUSES:
                self._runs.zero(agent, status)
        self._agents[ctx.run_id] = agent
        self._runs_active.child(agent).inc()

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Record the run's duration and status, and release its per-run state.

        ``loopobs_runs_active`` drops only for runs whose start this observer saw;
        a run it joined halfway is recorded with an absent agent label.
        """
        agent = self._agents.pop(ctx.run_id, None)
        if agent is None:
            agent = _ABSENT
        else:
            self._runs_active.child(agent).dec()
        err = _ABSENT if ctx.error is None else self._b_error(error_type(ctx.error))
        self._agent_duration.child(agent, err).observe(
            ctx.duration_ms / 1000.0, self._exemplar(ctx.run_id)
        )
        self._runs.child(agent, self._b_status(ctx.status)).inc()
        if self.multiprocess:
            self._observer_errors.sync()

    def on_turn_end(self, ctx: TurnEndContext) -> None:
        """Count the turn in ``loopobs_turns_total``."""
        self._turns.child(self._agents.get(ctx.run_id, _ABSENT)).inc()

    # -- model calls --------------------------------------------------------------------------
    def on_stream_success(self, ctx: StreamContext) -> None:
        """Record the call's tokens, duration and time to first chunk."""
        provider = self._b_provider(ctx.provider)
        model = self._b_model(ctx.model)
        self._zero_stream_failures(provider, model)
        ex = self._exemplar(ctx.run_id)
        usage = self._token_usage
        usage.child(c.OP_CHAT, provider, model, c.TOKEN_INPUT).observe(ctx.input_tokens, ex)
        usage.child(c.OP_CHAT, provider, model, c.TOKEN_OUTPUT).observe(ctx.output_tokens, ex)
        self._op_duration.child(c.OP_CHAT, provider, model, _ABSENT).observe(
            ctx.duration_ms / 1000.0, ex
        )
        if ctx.time_to_first_token_ms is not None:
            self._ttfc.child(c.OP_CHAT, provider, model).observe(
                ctx.time_to_first_token_ms / 1000.0, ex
            )
        tokens = self._tokens
        tokens.child(provider, model, c.TOKEN_INPUT).inc(ctx.input_tokens, ex)
        tokens.child(provider, model, c.TOKEN_OUTPUT).inc(ctx.output_tokens, ex)
        if ctx.cache_read_input_tokens:
            tokens.child(provider, model, c.TOKEN_CACHE_READ).inc(ctx.cache_read_input_tokens, ex)
        if ctx.cache_write_input_tokens:
            tokens.child(provider, model, c.TOKEN_CACHE_WRITE).inc(
                ctx.cache_write_input_tokens, ex
            )
        if ctx.reasoning_output_tokens:
            tokens.child(provider, model, c.TOKEN_REASONING).inc(ctx.reasoning_output_tokens, ex)

    def on_stream_failure(self, ctx: StreamFailureContext) -> None:
        """Record the failed attempt's duration (with ``error_type``) and count the failure."""
        provider = self._b_provider(ctx.provider)
        model = self._b_model(ctx.model)
        self._zero_stream_failures(provider, model)
        err = self._b_error(error_type(ctx.error))
        self._op_duration.child(c.OP_CHAT, provider, model, err).observe(
            ctx.duration_ms / 1000.0, self._exemplar(ctx.run_id)
        )
        self._stream_failures.child(provider, model, err).inc()

    def _zero_stream_failures(self, provider: str, model: str) -> None:
        if self._first_time(("model", provider, model)):
            for name in _STREAM_ERROR_TYPES:
                self._stream_failures.zero(provider, model, name)

    # -- tools --------------------------------------------------------------------------------
    def _zero_tool(self, tool: str) -> None:
        if self._first_time(("tool", tool)):
            for outcome in _TOOL_OUTCOMES:
                self._tool_calls.zero(tool, outcome)

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Record the attempt's duration and count it by tool and outcome."""
        tool = self._b_tool(ctx.tool)
        self._zero_tool(tool)
        err = self._b_error(error_type(ctx.error, _TOOL_ERROR)) if ctx.is_error else _ABSENT
        self._tool_duration.child(tool, err).observe(
            ctx.duration_ms / 1000.0, self._exemplar(ctx.run_id)
        )
        self._tool_calls.child(tool, self._b_outcome(ctx.outcome)).inc()

    # -- loop control -------------------------------------------------------------------------
    def on_compaction(self, ctx: CompactedContext) -> None:
        """Count the compaction and the tokens it saved."""
        reason = self._b_reason(ctx.reason)
        self._compactions.child(reason).inc()
        if ctx.tokens_saved > 0:
            self._tokens_saved.child(reason).inc(ctx.tokens_saved)

    def on_fallback(self, ctx: FallbackContext) -> None:
        """Count the move to a fallback model."""
        self._fallbacks.child(self._b_from(ctx.from_model), self._b_to(ctx.to_model)).inc()

    def on_model_switched(self, ctx: ModelSwitchedContext) -> None:
        """Count the model change."""
        self._model_switches.child(self._b_from(ctx.from_model), self._b_to(ctx.to_model)).inc()

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        """Count the detection by tool and action."""
        tool = _ABSENT if ctx.tool is None else self._b_tool(ctx.tool)
        self._loop_detections.child(tool, self._b_action(ctx.action)).inc()

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        """Count the detection by action."""
        self._convergence.child(self._b_action(ctx.action)).inc()
