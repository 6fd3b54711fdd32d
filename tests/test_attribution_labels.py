"""Attribution as labels of the cost metrics: only through an allow-list, each name bounded."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry

from loopobs import AgentLoop, Conversation, ModelRates, Usage
from loopobs.exporters import PrometheusObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.metrics import MetricsObserver
from loopobs.llm import Reply, ScriptedClient
from loopobs.testing import metric_points

PRICES = {"m": ModelRates(input_per_mtok=1.0, output_per_mtok=2.0)}
TENANT = c.LOOPOBS_ATTRIBUTION_PREFIX + "tenant"
USER = c.LOOPOBS_ATTRIBUTION_PREFIX + "user"


async def _runs(*observers: Any, tenants: list[str]) -> None:
    replies = [
        Reply(text="ok", usage=Usage(input_tokens=1_000, output_tokens=100)) for _ in tenants
    ]
    loop = AgentLoop(
        ScriptedClient(replies),
        model="m",
        detectors=[],
        prices=PRICES,
        observers=observers,
        agent_name="billing",
    )
    for i, tenant in enumerate(tenants):
        session = Conversation(attribution={"tenant": tenant, "user": f"u-{i}"})
        assert (await loop.run("q", session=session)).ok


def _prom_labels(prom: PrometheusObserver, name: str) -> list[dict[str, str]]:
    return [
        dict(sample.labels)
        for family in prom.registry.collect()
        for sample in family.samples
        if sample.name == name
    ]


def _value(point: Any) -> float:
    """A counter's or gauge's value, a histogram's sum."""
    value = getattr(point, "value", None)
    return float(value if value is not None else getattr(point, "sum", 0.0))


def _otel(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    return [(dict(p.attributes or {}), _value(p)) for p in metric_points(reader).get(name, [])]


async def test_allow_listed_attribution_labels_the_cost_metrics_on_both_paths() -> None:
    reader = InMemoryMetricReader()
    otel = MetricsObserver(MeterProvider(metric_readers=[reader]), attribution_labels={"tenant": 2})
    prom = PrometheusObserver(CollectorRegistry(), attribution_labels={"tenant": 2})
    await _runs(otel, prom, tenants=["acme", "globex", "acme", "initech", "umbrella"])
    cost_usd = 1_000 / 1e6 + 100 * 2 / 1e6
    prom_label = c.prometheus_label(TENANT)
    # The first two tenants keep their names; the later ones fold into _other.
    cost = {
        s.labels[prom_label]: s.value
        for family in prom.registry.collect()
        for s in family.samples
        if s.name == "loopobs_cost_usd_total"
    }
    assert cost == pytest.approx({"acme": 2 * cost_usd, "globex": cost_usd, "_other": 2 * cost_usd})
    runs = {
        s.labels[prom_label]: s.value
        for family in prom.registry.collect()
        for s in family.samples
        if s.name == "loopobs_run_cost_usd_count"
    }
    assert runs == {"acme": 2, "globex": 1, "_other": 2}
    overflow = prom.registry.get_sample_value(
        "loopobs_label_overflow_total", {"loopobs_label": prom_label}
    )
    assert overflow is not None
    assert overflow >= 2
    otel_cost: dict[str, float] = {}
    for attrs, value in _otel(reader, c.COST.name):
        otel_cost[attrs[TENANT]] = otel_cost.get(attrs[TENANT], 0.0) + value
    assert otel_cost == pytest.approx(cost)
    otel_runs = {attrs[TENANT] for attrs, _ in _otel(reader, c.RUN_COST.name)}
    assert otel_runs == {"acme", "globex", "_other"}
    # Only the cost metrics carry it, and never a name outside the allow-list.
    for family in prom.registry.collect():
        for sample in family.samples:
            assert c.prometheus_label(USER) not in sample.labels
            if not sample.name.startswith(("loopobs_cost_usd", "loopobs_run_cost_usd")):
                assert prom_label not in sample.labels, sample.name
    for name, points in metric_points(reader).items():
        for point in points:
            attrs = dict(point.attributes or {})
            assert USER not in attrs
            if name not in (c.COST.name, c.RUN_COST.name):
                assert TENANT not in attrs, name


async def test_by_default_no_attribution_reaches_a_label() -> None:
    reader = InMemoryMetricReader()
    otel = MetricsObserver(MeterProvider(metric_readers=[reader]))
    prom = PrometheusObserver(CollectorRegistry())
    await _runs(otel, prom, tenants=["acme", "globex"])
    for family in prom.registry.collect():
        for sample in family.samples:
            assert not any(k.startswith("loopobs_attribution_") for k in sample.labels)
    for points in metric_points(reader).values():
        for point in points:
            assert not any(k.startswith(c.LOOPOBS_ATTRIBUTION_PREFIX) for k in point.attributes)


async def test_a_run_without_the_allow_listed_name_leaves_its_label_empty() -> None:
    prom = PrometheusObserver(CollectorRegistry(), attribution_labels={"team": 5})
    await _runs(prom, tenants=["acme"])
    (labels,) = _prom_labels(prom, "loopobs_cost_usd_total")
    assert labels[c.prometheus_label(c.LOOPOBS_ATTRIBUTION_PREFIX + "team")] == ""
    assert prom.open_runs == 0


@pytest.mark.parametrize(
    "bad", [{"Tenant": 5}, {"tenant": 0}, {"tenant": True}, {"a:b": 3}, {"tenant": 2.5}]
)
def test_a_bad_allow_list_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="attribution_labels"):
        PrometheusObserver(CollectorRegistry(), attribution_labels=bad)
    with pytest.raises(ValueError, match="attribution_labels"):
        MetricsObserver(MeterProvider(), attribution_labels=bad)


async def test_configure_passes_the_allow_list_and_the_label_cap_to_its_metrics_observer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from loopobs.exporters.setup import configure

    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    reader = InMemoryMetricReader()
    telemetry = configure(
        traces_exporter="none",
        metrics_exporter="none",
        metric_readers=[reader],
        attribution_labels={"tenant": 1},
        max_label_values=7,
    )
    try:
        assert telemetry.metrics.max_label_values == 7
        await _runs(telemetry.metrics, tenants=["acme", "globex", "acme"])
        tenants = {attrs[TENANT] for attrs, _ in _otel(reader, c.COST.name)}
        assert tenants == {"acme", "_other"}
    finally:
        assert telemetry.shutdown(timeout_s=5.0)
    for bad in ({"Tenant": 5}, {"tenant": 0}):
        with pytest.raises(ValueError, match="attribution_labels"):
            configure(traces_exporter="none", metrics_exporter="none", attribution_labels=bad)
    with pytest.raises(ValueError, match="max_label_values"):
        configure(traces_exporter="none", metrics_exporter="none", max_label_values=0)
