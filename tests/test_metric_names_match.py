"""One dashboard, two paths: PrometheusObserver names equal the OTel → Prometheus translation.

The same scripted runs go through ``MetricsObserver`` into an SDK ``MeterProvider``
read by ``opentelemetry-exporter-prometheus`` (into a fresh registry), and through
``PrometheusObserver``. Every sample name and its label names must be the same,
ignoring the ``otel_scope_*`` labels and ``target_info`` the OTel path adds, and
the ``_created`` series prometheus-client adds.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

# A dev dependency: a plain import, so a missing package fails the suite instead of skipping.
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import CollectorRegistry

from loopobs import LoopObserver, ObserverSet, TurnEndContext
from loopobs.exporters import PrometheusObserver
from loopobs.exporters import catalog as c
from tests import _prom_events as ev


class RaisesOnTurnEnd(LoopObserver):
    def on_turn_end(self, ctx: TurnEndContext) -> None:
        raise RuntimeError("observer bug")


def shape(registry: CollectorRegistry) -> dict[str, frozenset[str]]:
    """Sample name → label names (union over its series), without OTel scope labels.

    An empty label value is dropped: Prometheus stores ``error_type=""`` as no
    label at all, which is what the OTel path sends for a success.
    """
    out: dict[str, set[str]] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "target_info" or sample.name.endswith("_created"):
                continue
            labels = {k for k, v in sample.labels.items() if v and not k.startswith("otel_scope_")}
            out.setdefault(sample.name, set()).update(labels)
    return {name: frozenset(labels) for name, labels in out.items()}


def drive(observer: LoopObserver, runs: int = 3) -> None:
    observers = ObserverSet([RaisesOnTurnEnd(), observer])
    for i in range(runs):
        ev.emit_run(observers, unpriced_first_call=i == 0)
    ev.emit_extras(observers)


def samples_of(names: Iterable[str]) -> set[str]:
    return {n.removesuffix("_bucket") for n in names}


@pytest.mark.parametrize("latest", [False, True], ids=["default", "latest"])
def test_prometheus_observer_matches_the_otel_translation(latest: bool) -> None:
    """Same sample names and label names from both paths after the same scripted runs."""
    from opentelemetry.sdk.metrics import MeterProvider

    from loopobs.exporters.metrics import MetricsObserver

    otel_registry = CollectorRegistry()
    reader = PrometheusMetricReader(disable_target_info=True, registry=otel_registry)
    provider = MeterProvider(metric_readers=[reader])
    try:
        drive(MetricsObserver(meter_provider=provider, latest_semconv=latest))
        otel = shape(otel_registry)
    finally:
        provider.shutdown()

    prom = PrometheusObserver(CollectorRegistry(), latest_semconv=latest)
    drive(prom)
    direct = shape(prom.registry)

    assert direct == otel
    # the run touched every catalog metric but the overflow counter (no label hit its limit)
    expected = {s.prometheus_name for s in c.metrics_for(latest) if s is not c.LABEL_OVERFLOW}
    assert samples_of(n.removesuffix("_count").removesuffix("_sum") for n in direct) == expected
    duration = (
        "gen_ai_client_inference_duration_seconds_bucket"
        if latest
        else "gen_ai_client_operation_duration_seconds_bucket"
    )
    tokens = (
        "gen_ai_client_inference_usage_input_tokens_total"
        if latest
        else "gen_ai_client_token_usage_bucket"
    )
    for example in (
        tokens,
        duration,
        "loopobs_tokens_total",
        "loopobs_tool_calls_total",
        "loopobs_loop_detections_total",
        "loopobs_runs_active",
        "loopobs_observer_errors_total",
    ):
        assert example in direct


def series(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) → value, for every series but OTel's scope labels and buckets.

    Empty label values are dropped (Prometheus reads them as absent), and so are
    ``_created`` samples (prometheus-client only) and histogram buckets (each
    path keeps its own bucket layout; their counts and sums are compared).
    """
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "target_info" or sample.name.endswith(("_created", "_bucket")):
                continue
            labels = frozenset(
                (k, v) for k, v in sample.labels.items() if v and not k.startswith("otel_scope_")
            )
            out[(sample.name, labels)] = sample.value
    return out


@pytest.mark.parametrize("latest", [False, True], ids=["default", "latest"])
def test_both_paths_record_the_same_values(latest: bool) -> None:
    """The same events give every series the same value on both paths: one mapping, no drift.

    Covers label folding too: with a limit of 1 the second model, tool and outcome
    fold into ``_other`` on both paths, and both count the same overflows.
    """
    from opentelemetry.sdk.metrics import MeterProvider

    from loopobs.exporters.metrics import MetricsObserver

    for limit in (100, 1):
        otel_registry = CollectorRegistry()
        reader = PrometheusMetricReader(disable_target_info=True, registry=otel_registry)
        provider = MeterProvider(metric_readers=[reader])
        try:
            drive(
                MetricsObserver(
                    meter_provider=provider, max_label_values=limit, latest_semconv=latest
                )
            )
            otel = series(otel_registry)
        finally:
            provider.shutdown()
        prom = PrometheusObserver(
            CollectorRegistry(), max_label_values=limit, latest_semconv=latest
        )
        drive(prom)
        direct = series(prom.registry)
        # Prometheus also holds known label sets at zero before their first event (runs per
        # status, failures per error type, outcomes per tool, detections per action).
        waiting = {key: value for key, value in direct.items() if key not in otel}
        assert set(waiting.values()) <= {0.0}, waiting
        assert direct.keys() - waiting.keys() == otel.keys()
        for key, value in direct.items():
            if key not in waiting:
                assert otel[key] == pytest.approx(value), key


def test_both_observers_derive_from_the_one_table() -> None:
    """Neither backend maps hooks itself: each hook it handles is the shared recorder's."""
    from loopobs.exporters.event_metrics import (
        EVENT_METRICS,
        EVENT_METRICS_LATEST,
        MetricRecorder,
    )
    from loopobs.exporters.metrics import MetricsObserver

    for backend in (MetricsObserver, PrometheusObserver):
        for hook in EVENT_METRICS:
            if hook == "on_run_end" and backend is PrometheusObserver:
                continue  # it adds the multi-process error sync, then defers to the table
            assert getattr(backend, hook) is getattr(MetricRecorder, hook), (backend, hook)
    # every catalog metric is in the table but those the recorder derives from several
    # events (chunk intervals, calls per run) and the two the backends record themselves
    by_recorder = {
        c.OBSERVER_ERRORS.name,
        c.LABEL_OVERFLOW.name,
        c.TIME_PER_OUTPUT_CHUNK.name,
        c.INFERENCE_TIME_PER_OUTPUT_CHUNK.name,
        c.AGENT_INFERENCE_CALLS.name,
        c.AGENT_TOOL_CALLS.name,
    }
    for latest, table in ((False, EVENT_METRICS), (True, EVENT_METRICS_LATEST)):
        mapped = {r.metric.name for m in table.values() for r in m.recordings}
        assert mapped == {s.name for s in c.metrics_for(latest)} - by_recorder
