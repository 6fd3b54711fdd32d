"""``PrometheusObserver``: agent-loop metrics recorded straight into ``prometheus-client``.

Every metric, label name, unit and bucket list comes from
:mod:`loopobs.exporters.catalog`, under the name OpenTelemetry's Prometheus
translation gives the matching ``MetricsObserver`` instrument, so one dashboard
serves a direct scrape and an OTLP → Collector → Prometheus pipeline.

Recording is cheap: each label value passes a bound (a set lookup), and the
label children of each metric are cached by their value tuple, so a repeated
label set costs a dict lookup plus the child's public ``inc`` / ``observe``. Serve the registry with
:func:`loopobs.exporters.metrics_server.start_metrics_server`.

Bounded labels: model and tool names come from model output. Each label name
admits at most ``max_label_values`` distinct values; later values are recorded
as ``_other`` and each such event is counted in
``loopobs_label_overflow_total{loopobs_label="<label name>"}``. A value that
cannot be encoded (a lone surrogate) is repaired first, and one longer than 256
characters cut, each counted in ``loopobs_label_sanitised_total``, so no value
can break a scrape or bloat it.

Series at zero: label sets known in advance (detections per action; runs per
status for each agent, stream failures per error type for each model, calls per
outcome for each tool, from their first event) exist at 0 before they happen.

Exemplars: when a ``TracingObserver`` traces the run (see
:mod:`loopobs.contract.trace_links`), token and duration samples carry the
run's ``trace_id`` and root ``span_id`` (visible in the OpenMetrics format).

Multi-process: with ``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client``
is imported, values go to per-process files that a ``MultiProcessCollector``
sums; ``loopobs_runs_active`` then uses the ``livesum`` gauge mode, and
exemplars are off (prometheus-client does not store them there). Observers of
one process share one metric object per name (a value caches its number, so two
objects would overwrite each other's counts), and the directory is checked when
an observer is built. See ``docs/prometheus.md``.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, get_args
from uuid import UUID

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import values as prometheus_values

from loopobs.contract import trace_links
from loopobs.contract.errors import ModelError, RateLimited, StreamError
from loopobs.contract.events import (
    ConvergenceAction,
    LoopAction,
    RunEndContext,
    RunStatus,
    ToolOutcomeKind,
)
from loopobs.contract.observer import ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters.event_metrics import (
    DEFAULT_MAX_LABEL_VALUES,
    Binder,
    MetricRecorder,
    Recorder,
    Recording,
    truncated_label,
)

__all__ = ["BoundedLabel", "PrometheusObserver", "multiprocess_enabled"]

_ABSENT = ""
"""Label value for an attribute that does not apply (Prometheus treats ``""`` as absent)."""

# Label values known in advance: their series start at zero (the Prometheus
# instrumentation guide's advice), so a dashboard shows 0 rather than "No data" and
# an absent()-style alert does not fire before the first event.
_RUN_STATUSES = tuple(status.value for status in RunStatus)
_TOOL_OUTCOMES: tuple[str, ...] = get_args(ToolOutcomeKind)
_STREAM_ERROR_TYPES = tuple(cls.__name__ for cls in (ModelError, RateLimited, StreamError))
_LOOP_ACTIONS: tuple[str, ...] = get_args(LoopAction)
_CONVERGENCE_ACTIONS: tuple[str, ...] = get_args(ConvergenceAction)
_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_ZERO_SERIES: tuple[tuple[c.MetricSpec, c.MetricSpec, str, tuple[str, ...]], ...] = (
    # (recording that brings new label values, metric to fill, its label of known values,
    #  those values); every other label of the filled metric comes from the recording.
    (c.RUNS_ACTIVE, c.RUNS, c.LOOPOBS_RUN_STATUS, _RUN_STATUSES),
    (c.TOKENS, c.STREAM_FAILURES, c.ERROR_TYPE, _STREAM_ERROR_TYPES),
    (c.STREAM_FAILURES, c.STREAM_FAILURES, c.ERROR_TYPE, _STREAM_ERROR_TYPES),
    (c.TOOL_CALLS, c.TOOL_CALLS, c.LOOPOBS_TOOL_OUTCOME, _TOOL_OUTCOMES),
)


def multiprocess_enabled() -> bool:
    """Whether prometheus-client stores values in ``PROMETHEUS_MULTIPROC_DIR`` files.

    prometheus-client decides this once, when it is first imported.
    """
    return prometheus_values.ValueClass is not prometheus_values.MutexValue


def _check_multiprocess_dir() -> None:
    """Fail now, naming the variable, if multi-process values have nowhere to go."""
    path = os.environ.get(_MULTIPROC_ENV, "")
    if not path:
        raise ValueError(
            f"prometheus-client is in multi-process mode but {_MULTIPROC_ENV} is no longer set: "
            "set it (to a writable directory) for the whole life of the process"
        )
    if not os.path.isdir(path) or not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(
            f"{_MULTIPROC_ENV}={path!r} is not a writable directory: create it "
            "before the workers start"
        )


def _sanitised(value: str) -> str | None:
    """``value`` with unencodable characters (lone surrogates) replaced; None if clean."""
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in value)
    return None


class BoundedLabel:
    """Admits at most ``limit`` distinct values for one label name; later ones become ``_other``.

    ``""`` (attribute absent) is always admitted and not counted. Each value
    folded into ``_other`` increments ``overflow`` (a counter child for this
    label name, bound at the first overflow so that no zero series shows up
    before). A value that cannot be encoded (a lone surrogate, as a model's
    stream can split one) would fail every later scrape: its bad characters
    become U+FFFD first; a value longer than
    :data:`~loopobs.exporters.event_metrics.MAX_LABEL_LENGTH` is cut to it (a
    50,000-character tool name would make every scrape huge); each repair is
    counted in ``sanitised`` when given.
    Thread-safe; an admitted value costs one set lookup.
    """

    __slots__ = (
        "_lock",
        "_overflow",
        "_overflow_metric",
        "_sanitised",
        "_sanitised_metric",
        "_values",
        "limit",
        "name",
    )

    def __init__(
        self, name: str, limit: int, overflow: Counter, sanitised: Counter | None = None
    ) -> None:
        self.name = name
        self.limit = limit
        self._overflow_metric = overflow
        self._overflow: Any = None
        self._sanitised_metric = sanitised
        self._sanitised: Any = None
        self._values: set[str] = {_ABSENT}
        self._lock = threading.Lock()

    @property
    def admitted(self) -> frozenset[str]:
        """The values admitted so far (without ``""``)."""
        return frozenset(self._values - {_ABSENT})

    def __call__(self, value: str) -> str:
        """``value`` (made encodable) if admitted, now or before; else ``_other``."""
        if value in self._values:
            return value
        clean = _sanitised(value)
        cut = truncated_label(value if clean is None else clean)
        if cut is not None:
            clean = cut
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
            if len(self._values) <= self.limit:  # the set also holds ""
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

    def child(self, *values: str) -> Any:
        """The child for ``values`` (already bounded, so the cache is bounded too)."""
        return self.child_of(values)

    def child_of(self, values: tuple[str, ...]) -> Any:
        """The child for the tuple ``values`` (already bounded)."""
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


class PrometheusObserver(MetricRecorder):
    """Records the catalog's metrics on prometheus-client, ready for a ``/metrics`` scrape.

    What each event records is :data:`~loopobs.exporters.event_metrics.EVENT_METRICS`,
    the table ``MetricsObserver`` records too.

    Args:
        registry: Where the metrics are registered; a fresh ``CollectorRegistry``
            when ``None`` (never the global ``REGISTRY`` unless you pass it).
        max_label_values: Distinct values each label name admits before further
            values fold into ``_other``.
        attribution_labels: attribution names recorded as labels of the cost metrics
            (``loopobs_cost_usd_total``, ``loopobs_run_cost_usd``) as
            ``loopobs_attribution_<name>``, each with its own cap of distinct values (later
            ones fold into ``_other``): ``{"tenant": 50}``. Default: none (attribution
            values are unbounded ids).
        exemplars: Attach ``trace_id`` / ``span_id`` exemplars to token and
            duration samples of traced runs (ignored in multi-process mode).
        latest_semconv: record the newest GenAI metric names; ``None`` reads
            ``OTEL_SEMCONV_STABILITY_OPT_IN`` (``gen_ai_latest_experimental``).

    Per run, only the agent name is kept (keyed by ``run_id``) from
    ``on_run_start`` to ``on_run_end``; nothing else outlives an event. Safe
    to share between concurrent runs and threads.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
        exemplars: bool = True,
        latest_semconv: bool | None = None,
        attribution_labels: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(
            max_label_values, latest_semconv=latest_semconv, attribution_labels=attribution_labels
        )
        self.multiprocess = multiprocess_enabled()
        if self.multiprocess:
            _check_multiprocess_dir()
        self.registry = CollectorRegistry() if registry is None else registry
        self.exemplars = exemplars and not self.multiprocess
        reg = self.registry

        def count(spec: c.MetricSpec, registry: CollectorRegistry | None = reg) -> Counter:
            counter: Counter = _metric(spec, registry)
            return counter

        overflow = count(c.LABEL_OVERFLOW)
        sanitised = count(c.LABEL_SANITISED)
        self._bounds: dict[str, BoundedLabel] = {}
        for spec in self.metric_specs:
            for attribute in spec.attributes:
                if attribute not in self._bounds:
                    self._bounds[attribute] = BoundedLabel(
                        c.prometheus_label(attribute),
                        self.label_limit(attribute),
                        overflow,
                        sanitised,
                    )
        self._families: dict[str, _Family] = {}
        for spec in self.metric_specs:
            if spec is c.OBSERVER_ERRORS or spec is c.LABEL_OVERFLOW:
                continue
            self._families[spec.name] = _Family(_metric(spec, reg))
        self._observer_errors = _ObserverErrors(
            count(c.OBSERVER_ERRORS, registry=None),
            self._bounds[c.LOOPOBS_OBSERVER_NAME],
            self._bounds[c.LOOPOBS_OBSERVER_HOOK],
        )
        reg.register(self._observer_errors)
        self._known: set[Hashable] = set()
        self._known_lock = threading.Lock()
        self._compile()
        for action in _LOOP_ACTIONS:
            self._families[c.LOOP_DETECTIONS.name].child_of((_ABSENT, action))
        for action in _CONVERGENCE_ACTIONS:
            self._families[c.CONVERGENCE_DETECTIONS.name].child_of((action,))

    # -- helpers ------------------------------------------------------------------------------
    @property
    def label_bounds(self) -> Mapping[str, BoundedLabel]:
        """The bound of each Prometheus label name."""
        return {bound.name: bound for bound in self._bounds.values()}

    def _exemplar(self, run_id: UUID) -> dict[str, str] | None:
        link = trace_links.lookup(run_id)
        if link is None:
            return None
        return {c.EXEMPLAR_TRACE_ID: link[0], c.EXEMPLAR_SPAN_ID: link[1]}

    # -- recording ----------------------------------------------------------------------------
    def _bounder(self, key: str) -> Callable[[str], str]:
        return self._bounds[key]

    def _binder(self, recording: Recording) -> Binder:
        spec = recording.metric
        child_of = self._families[spec.name].child_of
        exemplar = self._exemplar if recording.exemplar and self.exemplars else None
        if spec.kind == "updown_counter":
            exemplar = None
        zero = self._zero_series(spec)

        def bind(values: tuple[str, ...]) -> Recorder:
            if zero is not None:  # the first record of these values creates their zeros
                zero(values)
            return _recorder(child_of(values), spec.kind, exemplar)

        return bind

    # -- series that start at zero --------------------------------------------------------------
    def _first_time(self, key: Hashable) -> bool:
        """True once per ``key``: when its known label combinations must be created."""
        if key in self._known:
            return False
        with self._known_lock:
            if key in self._known:
                return False
            self._known.add(key)
            return True

    def _zero_series(self, spec: c.MetricSpec) -> Callable[[tuple[str, ...]], None] | None:
        """What recording ``spec`` first creates at zero, keyed by the values it brings.

        See :data:`_ZERO_SERIES`: a new agent brings its runs per status, a new
        model (per agent) its stream failures per error type, a new tool (per
        agent) its calls per outcome. The known values do not pass the label
        bounds: they are few and fixed, and a bound would count them as if events
        had brought them. The values they hang on (agent, model, tool) are bounded.
        """
        makers = []
        for trigger, target, varying, known in _ZERO_SERIES:
            if trigger is not spec:
                continue
            # Where each label of the target comes from: the trigger's values, or `known`.
            sources = [
                None if attribute == varying else spec.attributes.index(attribute)
                for attribute in target.attributes
            ]
            makers.append((target.name, sources, known, self._families[target.name].child_of))
        if not makers:
            return None

        def zero(values: tuple[str, ...]) -> None:
            for name, sources, known, child in makers:
                key = tuple(values[i] for i in sources if i is not None)
                if self._first_time((name, *key)):
                    for value in known:
                        child(tuple(value if i is None else values[i] for i in sources))

        return zero

    # -- lifecycle ----------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Count the failures of ``observers`` in ``loopobs_observer_errors_total``."""
        self._observer_errors.watch(observers)

    def reset(self) -> None:
        """Forget the open runs, taking them out of ``loopobs_runs_active``.

        Recorded counters and histograms stay (they are cumulative); a run
        forgotten here that ends later is recorded as one joined halfway.
        """
        active = self._families[c.RUNS_ACTIVE.name].child_of
        for agent in self._forget_agents():
            active((agent,)).dec()

    def sync_observer_errors(self) -> None:
        """Bring ``loopobs_observer_errors_total`` up to date now (scrapes do it themselves)."""
        self._observer_errors.sync()

    def on_run_end(self, ctx: RunEndContext) -> None:
        """As every recorder; in multi-process mode also sync the observer error counts.

        The worker's own registry is never scraped there, so the run's end is
        when its observer errors reach the shared files.
        """
        super().on_run_end(ctx)
        if self.multiprocess:
            self._observer_errors.sync()


ExemplarOf = Callable[[UUID], "dict[str, str] | None"]


def _recorder(child: Any, kind: str, exemplar: ExemplarOf | None) -> Callable[[float, UUID], None]:
    """Records one value on ``child`` through its ``inc``/``observe``, with the run's exemplar."""
    if kind == "histogram":
        observe = child.observe
        if exemplar is None:
            return lambda value, run_id: observe(value)
        return lambda value, run_id: observe(value, exemplar(run_id))
    inc = child.inc
    if exemplar is None:
        return lambda value, run_id: inc(value)
    return lambda value, run_id: inc(value, exemplar(run_id))


_SHARED: dict[str, Any] = {}
_SHARED_LOCK = threading.Lock()


def _metric(spec: c.MetricSpec, registry: CollectorRegistry | None) -> Any:
    """The prometheus-client metric for ``spec``, registered in ``registry``.

    In multi-process mode there is one object per metric in the process, shared
    by every observer (and registered in each one's registry): a multi-process
    value caches its number and writes it whole to the process's file, so two
    objects for one series would overwrite each other's counts.
    """
    if not multiprocess_enabled():
        return _build(spec, registry)
    with _SHARED_LOCK:
        metric = _SHARED.get(spec.prometheus_name)
        if metric is None:
            metric = _SHARED[spec.prometheus_name] = _build(spec, None)
    if registry is not None:
        registry.register(metric)
    return metric


def _build(spec: c.MetricSpec, registry: CollectorRegistry | None) -> Any:
    """The prometheus-client metric for ``spec``, under OTel's Prometheus translation name."""
    if spec.kind == "histogram":
        return Histogram(
            spec.prometheus_name,
            spec.description,
            spec.prometheus_labels,
            registry=registry,
            unit=spec.prometheus_unit,
            buckets=spec.buckets or Histogram.DEFAULT_BUCKETS,
        )
    if spec.kind == "updown_counter":
        # livesum: in multi-process mode the live workers' values add up.
        return Gauge(
            spec.prometheus_name,
            spec.description,
            spec.prometheus_labels,
            registry=registry,
            multiprocess_mode="livesum",
        )
    return Counter(
        spec.prometheus_name,
        spec.description,
        spec.prometheus_labels,
        registry=registry,
        unit=spec.prometheus_unit,
    )
