"""``MetricsObserver``: loop events → OpenTelemetry metrics, named by the catalog.

Instruments are created once, from :data:`loopobs.exporters.catalog.METRICS`
(name, kind, unit, description, advisory buckets); what each event records
comes from :data:`loopobs.exporters.event_metrics.EVENT_METRICS`, the table the
Prometheus observer records too. Attributes are the spec's
low-cardinality keys only — model, provider, tool, agent, status, error type,
token type — never ids or content. A label that sees more than
``max_label_values`` distinct values folds the rest into ``_other`` and counts
the fold in ``loopobs.label_overflow`` (by the label's Prometheus name), so a
misbehaving caller cannot mint unbounded series; a value longer than
:data:`~loopobs.exporters.event_metrics.MAX_LABEL_LENGTH` is cut and counted in
``loopobs.label_sanitised``, as on the Prometheus path.

``loopobs.observer.errors`` is an observable counter: its callback reads the
failure counts of every :class:`~loopobs.contract.observer.ObserverSet` this
observer was attached to.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

from loopobs.contract.observer import ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters.catalog import MetricSpec
from loopobs.exporters.event_metrics import (
    DEFAULT_MAX_LABEL_VALUES,
    Binder,
    MetricRecorder,
    Recorder,
    Recording,
    truncated_label,
)
from loopobs.exporters.providers import flush_provider

__all__ = ["DEFAULT_MAX_LABEL_VALUES", "MetricsObserver"]


class MetricsObserver(MetricRecorder):
    """Records GenAI client metrics and loop lifecycle metrics; safe across concurrent runs.

    What each event records is :data:`~loopobs.exporters.event_metrics.EVENT_METRICS`,
    the table ``PrometheusObserver`` records too.

    Args:
        meter_provider: where metrics go; ``None`` uses the global provider (a
            no-op until the application installs an SDK). Never installed globally.
        max_label_values: cap on distinct values per label key.
        attribution_labels: attribution names recorded as labels of the cost metrics
            (``loopobs.cost.usd``, ``loopobs.run.cost.usd``) as ``loopobs.attribution.<name>``,
            each with its own cap of distinct values (later ones fold into ``_other``):
            ``{"tenant": 50}``. Default: none (attribution values are unbounded ids).
        latest_semconv: record the newest GenAI metric names; ``None`` reads
            ``OTEL_SEMCONV_STABILITY_OPT_IN`` (``gen_ai_latest_experimental``).
        bound_instruments: deprecated, ignored: values are always recorded through the
            instruments' public ``record``/``add`` (passing it warns).

    Per-run state is the agent name of each open run, dropped at ``on_run_end``.
    """

    def __init__(
        self,
        meter_provider: metrics.MeterProvider | None = None,
        *,
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
        latest_semconv: bool | None = None,
        bound_instruments: bool | None = None,
        attribution_labels: Mapping[str, int] | None = None,
    ) -> None:
        from loopobs._version import __version__

        if bound_instruments is not None:
            warnings.warn(
                "MetricsObserver(bound_instruments=...) has no effect and will be "
                "removed in 0.3: values always go through the public OpenTelemetry API",
                DeprecationWarning,
                stacklevel=2,
            )
        super().__init__(
            max_label_values, latest_semconv=latest_semconv, attribution_labels=attribution_labels
        )
        self._provider = meter_provider
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter(c.SCOPE_NAME, __version__, schema_url=c.SCHEMA_URL)
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()
        self._sets: weakref.WeakSet[ObserverSet] = weakref.WeakSet()
        self._instruments: dict[str, Any] = {}
        for spec in self.metric_specs:
            if spec is c.OBSERVER_ERRORS:
                self._instruments[spec.name] = meter.create_observable_counter(
                    spec.name, [self._observe_errors], unit=spec.unit, description=spec.description
                )
            else:
                self._instruments[spec.name] = _create(meter, spec)
        self._runs_active = self._instruments[c.RUNS_ACTIVE.name]
        self._label_overflow = self._instruments[c.LABEL_OVERFLOW.name]
        self._label_sanitised = _create(meter, c.LABEL_SANITISED)
        self._compile()

    # -- recording ------------------------------------------------------------------------
    def _bound(self, key: str, value: str) -> str:
        """``value`` for label ``key``, or ``_other`` once the key has its fill of values."""
        seen = self._seen.get(key)
        if seen is not None and value in seen:
            return value
        cut = truncated_label(value)
        if cut is not None:
            self._label_sanitised.add(1, {c.LOOPOBS_LABEL: c.prometheus_label(key)})
            value = cut
        with self._lock:
            seen = self._seen.setdefault(key, set())
            if value in seen:
                return value
            if len(seen) < self.label_limit(key):
                seen.add(value)
                return value
        # Named as Prometheus spells the label, as PrometheusObserver counts it, so one
        # dashboard reads both paths.
        self._label_overflow.add(1, {c.LOOPOBS_LABEL: c.prometheus_label(key)})
        return c.OVERFLOW_VALUE

    def _bounder(self, key: str) -> Callable[[str], str]:
        return functools.partial(self._bound, key)

    def _binder(self, recording: Recording) -> Binder:
        spec = recording.metric
        instrument = self._instruments[spec.name]
        attributes = spec.attributes
        histogram = spec.kind == "histogram"

        def bind(values: tuple[str, ...]) -> Recorder:
            # The label row is strings; OTel attributes keep the convention's int type. Built
            # once per label set: each record hands the SDK the same dict.
            labels = {
                key: int(v) if key in c.INT_ATTRIBUTES else v
                for key, v in zip(attributes, values, strict=True)
                if v
            }
            if histogram:
                return lambda value, run_id: instrument.record(value, labels)
            return lambda value, run_id: instrument.add(value, labels)

        return bind

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
            Observation(
                count,
                {
                    c.LOOPOBS_OBSERVER_NAME: self._bound(c.LOOPOBS_OBSERVER_NAME, name),
                    c.LOOPOBS_OBSERVER_HOOK: self._bound(c.LOOPOBS_OBSERVER_HOOK, hook),
                },
            )
            for (name, hook), count in totals.items()
        ]

    # -- lifecycle ------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget open runs (their ``runs.active`` contribution is withdrawn) and seen labels."""
        for agent in self._forget_agents():
            self._runs_active.add(-1, {c.GEN_AI_AGENT_NAME: agent} if agent else {})
        with self._lock:
            self._seen.clear()

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Flush the meter provider this observer was given; False if it could not in time."""
        return flush_provider(self._provider, timeout_s)


def _create(meter: metrics.Meter, spec: MetricSpec) -> Any:
    if spec.kind == "histogram":
        return meter.create_histogram(
            spec.name,
            unit=spec.unit,
            description=spec.description,
            explicit_bucket_boundaries_advisory=list(spec.buckets) if spec.buckets else None,
        )
    if spec.kind == "updown_counter":
        return meter.create_up_down_counter(spec.name, unit=spec.unit, description=spec.description)
    return meter.create_counter(spec.name, unit=spec.unit, description=spec.description)
