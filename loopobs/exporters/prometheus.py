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
:mod:`loopobs.core.trace_links`), token and duration samples carry the
run's ``trace_id`` and root ``span_id`` (visible in the OpenMetrics format).

Multi-process: with ``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client``
is imported, values go to per-process files that a ``MultiProcessCollector``
sums; ``loopobs_runs_active`` then uses the ``livesum`` gauge mode, and
exemplars are off (prometheus-client does not store them there). See
``docs/prometheus.md``.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from uuid import UUID

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import values as _prom_values

from loopobs.core import trace_links
from loopobs.core.events import RunEndContext
from loopobs.core.observer import ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters.event_metrics import (
    DEFAULT_MAX_LABEL_VALUES,
    MetricRecorder,
    Recording,
    Sink,
)

__all__ = ["BoundedLabel", "PrometheusObserver", "multiprocess_enabled"]

_ABSENT = ""
"""Label value for an attribute that does not apply (Prometheus treats ``""`` as absent)."""


def multiprocess_enabled() -> bool:
    """Whether prometheus-client stores values in ``PROMETHEUS_MULTIPROC_DIR`` files.

    prometheus-client decides this once, when it is first imported.
    """
    return bool(getattr(_prom_values.ValueClass, "_multiprocess", False))


class BoundedLabel:
    """Admits at most ``limit`` distinct values for one label name; later ones become ``_other``.

    ``""`` (attribute absent) is always admitted and not counted. Each value
    folded into ``_other`` increments ``overflow`` (a counter child for this
    label name, bound at the first overflow so that no zero series shows up
    before). Thread-safe; an admitted value costs one set lookup.
    """

    __slots__ = ("_lock", "_overflow", "_overflow_metric", "_values", "limit", "name")

    def __init__(self, name: str, limit: int, overflow: Counter) -> None:
        self.name = name
        self.limit = limit
        self._overflow_metric = overflow
        self._overflow: Any = None
        self._values: set[str] = {_ABSENT}
        self._lock = threading.Lock()

    @property
    def admitted(self) -> frozenset[str]:
        """The values admitted so far (without ``""``)."""
        return frozenset(self._values - {_ABSENT})

    def __call__(self, value: str) -> str:
        """``value`` if admitted (now or before), else ``_other``."""
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
    ) -> None:
        super().__init__(max_label_values, latest_semconv=latest_semconv)
        self.registry = CollectorRegistry() if registry is None else registry
        self.multiprocess = multiprocess_enabled()
        self.exemplars = exemplars and not self.multiprocess
        reg = self.registry

        def count(spec: c.MetricSpec, registry: CollectorRegistry | None = reg) -> Counter:
            return Counter(
                spec.prometheus_name, spec.description, spec.prometheus_labels,
                registry=registry, unit=spec.prometheus_unit,
            )

        overflow = count(c.LABEL_OVERFLOW)
        self._bounds: dict[str, BoundedLabel] = {}
        for spec in self.metric_specs:
            for attribute in spec.attributes:
                if attribute not in self._bounds:
                    self._bounds[attribute] = BoundedLabel(
                        c.prometheus_label(attribute), max_label_values, overflow)
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
        self._compile()

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

    def _sink(self, recording: Recording) -> Sink:
        spec = recording.metric
        child = self._families[spec.name].child_of
        exemplar = self._exemplar if recording.exemplar and self.exemplars else None
        if spec.kind == "histogram":
            if exemplar is None:
                return lambda value, values, run_id: child(values).observe(value)
            return lambda value, values, run_id: child(values).observe(value, exemplar(run_id))
        if exemplar is None or spec.kind == "updown_counter":
            return lambda value, values, run_id: child(values).inc(value)
        return lambda value, values, run_id: child(values).inc(value, exemplar(run_id))

    # -- lifecycle ----------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Count the failures of ``observers`` in ``loopobs_observer_errors_total``."""
        self._observer_errors.watch(observers)

    def reset(self) -> None:
        """Forget the agent names of open runs; recorded metrics stay (they are cumulative)."""
        self._forget_agents()

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


def _metric(spec: c.MetricSpec, registry: CollectorRegistry) -> Any:
    """The prometheus-client metric for ``spec``, under OTel's Prometheus translation name."""
    if spec.kind == "histogram":
        return Histogram(
            spec.prometheus_name, spec.description, spec.prometheus_labels,
            registry=registry, unit=spec.prometheus_unit,
            buckets=spec.buckets or Histogram.DEFAULT_BUCKETS,
        )
    if spec.kind == "updown_counter":
        # livesum: in multi-process mode the live workers' values add up.
        return Gauge(spec.prometheus_name, spec.description, spec.prometheus_labels,
                     registry=registry, multiprocess_mode="livesum")
    return Counter(spec.prometheus_name, spec.description, spec.prometheus_labels,
                   registry=registry, unit=spec.prometheus_unit)
