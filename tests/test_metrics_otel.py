"""MetricsObserver: instruments from the catalog, values equal to the scripted sums."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from loopobs.contract.events import ToolPreContext
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters.metrics import MetricsObserver
from loopobs.testing import metric_points
from tests._emit import Script, failed_run, full_run, parked_run
from tests._otel_capture import exported_metrics
from tests._prom_events import emit_extras


def collect(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    return metric_points(reader)


def values(points: list[Any]) -> dict[frozenset[tuple[str, Any]], Any]:
    """Attribute set → value (sum for counters, (count, sum) for histograms)."""
    out: dict[frozenset[tuple[str, Any]], Any] = {}
    for p in points:
        key = frozenset(dict(p.attributes).items())
        out[key] = (p.count, p.sum) if isinstance(p, HistogramDataPoint) else p.value
    return out


OP = c.GEN_AI_OPERATION_NAME
PROV = c.GEN_AI_PROVIDER_NAME
MODEL = c.GEN_AI_REQUEST_MODEL
TT = c.GEN_AI_TOKEN_TYPE


def k(**kw: Any) -> frozenset[tuple[str, Any]]:
    """Attribute key set from catalog constants passed as a dict."""
    return frozenset(kw.items())


async def test_metric_values_equal_the_scripted_sums(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    obs = MetricsObserver(meter_provider)
    await full_run(obs, agent="calc")
    await full_run(obs, agent="calc")
    await failed_run(obs, agent="calc")
    await parked_run(obs)
    pts = collect(metric_reader)

    m2 = {OP: "chat", PROV: "scripted", MODEL: "m2", c.GEN_AI_RESPONSE_MODEL: "m2-2026"}
    m1 = {OP: "chat", PROV: "scripted", MODEL: "m1", c.GEN_AI_RESPONSE_MODEL: "m1-2026"}
    m1_failed = {OP: "chat", PROV: "scripted", MODEL: "m1"}  # no response: no response model
    usage = values(pts[c.TOKEN_USAGE.name])
    assert usage[frozenset({**m2, TT: "input"}.items())] == (4, 300)
    assert usage[frozenset({**m2, TT: "output"}.items())] == (4, 60)
    assert usage[frozenset({**m1, TT: "input"}.items())] == (1, 100)  # the parked run

    duration = values(pts[c.OPERATION_DURATION.name])
    assert duration[frozenset(m2.items())] == (4, pytest.approx(1.2))
    assert duration[frozenset({**m1_failed, c.ERROR_TYPE: "RateLimited"}.items())] == (
        3,
        pytest.approx(0.36),
    )
    assert values(pts[c.TIME_TO_FIRST_CHUNK.name])[frozenset(m2.items())] == (4, pytest.approx(0.6))

    tokens = values(pts[c.TOKENS.name])
    calc = {c.GEN_AI_AGENT_NAME: "calc"}
    base = {PROV: "scripted", MODEL: "m2", **calc}
    parked = {PROV: "scripted", MODEL: "m1", c.GEN_AI_AGENT_NAME: "agent"}
    assert tokens == {
        frozenset({**base, TT: "input"}.items()): 300,
        frozenset({**base, TT: "output"}.items()): 60,
        frozenset({**base, TT: "cache_read"}.items()): 20,
        frozenset({**base, TT: "reasoning"}.items()): 10,
        frozenset({**parked, TT: "input"}.items()): 100,
        frozenset({**parked, TT: "output"}.items()): 20,
    }

    runs = values(pts[c.RUNS.name])
    assert runs == {
        k(**{c.GEN_AI_AGENT_NAME: "calc", c.LOOPOBS_RUN_STATUS: "completed"}): 2,
        k(**{c.GEN_AI_AGENT_NAME: "calc", c.LOOPOBS_RUN_STATUS: "failed"}): 1,
        k(**{c.GEN_AI_AGENT_NAME: "agent", c.LOOPOBS_RUN_STATUS: "suspended"}): 1,
    }
    assert values(pts[c.RUNS_ACTIVE.name]) == {
        k(**{c.GEN_AI_AGENT_NAME: "calc"}): 0,
        k(**{c.GEN_AI_AGENT_NAME: "agent"}): 0,
    }
    assert values(pts[c.TURNS.name]) == {
        k(**{c.GEN_AI_AGENT_NAME: "calc"}): 5,
        k(**{c.GEN_AI_AGENT_NAME: "agent"}): 1,
    }
    agent_duration = values(pts[c.AGENT_DURATION.name])
    calc_run = {OP: "invoke_agent", c.GEN_AI_AGENT_NAME: "calc", MODEL: "m1"}
    assert agent_duration[k(**calc_run)] == (2, pytest.approx(5.0))
    assert agent_duration[k(**calc_run, **{c.ERROR_TYPE: "FallbackExhausted"})] == (
        1,
        pytest.approx(2.5),
    )

    assert values(pts[c.TOOL_CALLS.name]) == {
        k(**{c.GEN_AI_TOOL_NAME: "add", c.LOOPOBS_TOOL_OUTCOME: "output", **calc}): 2,
        k(**{c.GEN_AI_TOOL_NAME: "div", c.LOOPOBS_TOOL_OUTCOME: "error", **calc}): 2,
        k(
            **{
                c.GEN_AI_TOOL_NAME: "approve",
                c.LOOPOBS_TOOL_OUTCOME: "suspend",
                c.GEN_AI_AGENT_NAME: "agent",
            }
        ): 1,
    }
    tool_duration = values(pts[c.TOOL_DURATION.name])
    assert tool_duration[
        k(
            **{
                OP: "execute_tool",
                c.GEN_AI_TOOL_NAME: "div",
                c.GEN_AI_TOOL_TYPE: "function",
                c.GEN_AI_AGENT_NAME: "calc",
                c.ERROR_TYPE: "ToolExecutionError",
            }
        )
    ] == (2, pytest.approx(0.01))
    assert values(pts[c.STREAM_FAILURES.name]) == {
        k(**{PROV: "scripted", MODEL: "m1", c.ERROR_TYPE: "RateLimited", **calc}): 3
    }
    assert values(pts[c.FALLBACKS.name]) == {
        k(**{c.LOOPOBS_MODEL_FROM: "m1", c.LOOPOBS_MODEL_TO: "m2"}): 2
    }
    assert values(pts[c.MODEL_SWITCHES.name]) == {
        k(**{c.LOOPOBS_MODEL_FROM: "m1", c.LOOPOBS_MODEL_TO: "m2"}): 2
    }
    assert values(pts[c.COMPACTIONS.name]) == {k(**{c.LOOPOBS_COMPACTION_REASON: "threshold"}): 2}
    assert values(pts[c.COMPACTION_TOKENS_SAVED.name]) == {
        k(**{c.LOOPOBS_COMPACTION_REASON: "threshold"}): 12000
    }
    assert values(pts[c.LOOP_DETECTIONS.name]) == {
        k(**{c.GEN_AI_TOOL_NAME: "add", c.LOOPOBS_DETECTION_ACTION: "warn"}): 2
    }
    assert values(pts[c.CONVERGENCE_DETECTIONS.name]) == {
        k(**{c.LOOPOBS_DETECTION_ACTION: "stop"}): 2
    }
    assert obs.open_runs == 0


async def test_instruments_follow_the_catalog(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    obs = MetricsObserver(meter_provider)
    await full_run(ObserverSet([obs]))
    emit_extras(obs)
    found = exported_metrics(metric_reader)
    assert found
    for spec in c.METRICS:
        if spec.name not in found:
            continue  # instruments with no data yet are not exported
        metric = found[spec.name]
        assert metric.unit == spec.unit, spec.name
        if spec.buckets is not None:
            for point in metric.data.data_points:
                assert isinstance(point, HistogramDataPoint)
                assert tuple(point.explicit_bounds) == spec.buckets, spec.name
        for point in metric.data.data_points:
            assert set(point.attributes or {}) <= set(spec.attributes), spec.name
    # the hand-emitted run prices nothing (its calls count as unpriced) and has no budget
    assert {s.name for s in c.METRICS} - set(found) <= {
        c.OBSERVER_ERRORS.name,
        c.LABEL_OVERFLOW.name,
        c.COST.name,
        c.RUN_COST.name,
        c.BUDGET_EXCEEDED.name,
    }


async def test_no_ids_or_content_in_metric_attributes(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    s = await full_run(MetricsObserver(meter_provider))
    text = repr(collect(metric_reader))
    for forbidden in (str(s.run_id), str(s.session_id), "call-a", "resp-", "2+2", "It is 4"):
        assert forbidden not in text


class Flaky(LoopObserver):
    def on_tool_pre(self, ctx: ToolPreContext) -> None:
        raise ValueError("flaky")


async def test_observer_errors_are_read_from_the_sets(
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    obs = MetricsObserver(meter_provider)
    observers = ObserverSet([Flaky(), obs])
    with caplog.at_level(logging.CRITICAL, logger="loopobs.observer"):
        await full_run(observers)
        await full_run(observers)
    errors = values(collect(metric_reader)[c.OBSERVER_ERRORS.name])
    assert errors == {
        k(**{c.LOOPOBS_OBSERVER_NAME: "Flaky", c.LOOPOBS_OBSERVER_HOOK: "on_tool_pre"}): 4
    }
    observers.remove(obs)
    assert (
        c.OBSERVER_ERRORS.name not in collect(metric_reader)
        or values(collect(metric_reader)[c.OBSERVER_ERRORS.name]) == {}
    )


async def test_runs_active_counts_open_runs_and_state_is_dropped(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    obs = MetricsObserver(meter_provider)
    scripts = [Script(obs, agent="a") for _ in range(3)]
    for s in scripts:
        s.run_start()
    active = values(collect(metric_reader)[c.RUNS_ACTIVE.name])
    assert active == {k(**{c.GEN_AI_AGENT_NAME: "a"}): 3}
    assert obs.open_runs == 3
    for s in scripts:
        s.run_end()
    assert values(collect(metric_reader)[c.RUNS_ACTIVE.name]) == {
        k(**{c.GEN_AI_AGENT_NAME: "a"}): 0
    }
    assert obs.open_runs == 0
    scripts[0].run_end()  # a duplicate end never drives the gauge negative
    assert values(collect(metric_reader)[c.RUNS_ACTIVE.name]) == {
        k(**{c.GEN_AI_AGENT_NAME: "a"}): 0
    }


async def test_fifty_concurrent_runs(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    obs = MetricsObserver(meter_provider)
    await asyncio.gather(*(full_run(obs, agent=f"a{i % 5}") for i in range(50)))
    pts = collect(metric_reader)
    assert sum(values(pts[c.RUNS.name]).values()) == 50
    assert sum(values(pts[c.TURNS.name]).values()) == 100
    assert (
        sum(v for key, v in values(pts[c.TOKENS.name]).items() if (TT, "input") in key) == 50 * 150
    )
    assert obs.open_runs == 0


async def test_label_values_are_capped(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    obs = MetricsObserver(meter_provider, max_label_values=3)
    for i in range(5):
        s = Script(obs, agent=f"agent-{i}")
        s.run_start()
        s.run_end()
    runs = values(collect(metric_reader)[c.RUNS.name])
    agents = sorted(dict(key)[c.GEN_AI_AGENT_NAME] for key in runs)
    assert agents == ["_other", "agent-0", "agent-1", "agent-2"]
    assert runs[k(**{c.GEN_AI_AGENT_NAME: "_other", c.LOOPOBS_RUN_STATUS: "completed"})] == 2
    assert values(collect(metric_reader)[c.LABEL_OVERFLOW.name]) == {
        k(**{c.LOOPOBS_LABEL: c.prometheus_label(c.GEN_AI_AGENT_NAME)}): 2
    }


async def test_api_only_meter_provider() -> None:
    obs = MetricsObserver(metrics.NoOpMeterProvider())
    await full_run(ObserverSet([obs], strict=True))
    assert obs.open_runs == 0


def test_runs_ending_while_other_runs_stream_on_another_thread() -> None:
    """A run's end touches only its own open attempts, never another thread's."""
    import sys
    import threading
    import uuid

    from loopobs.contract import events as ev

    obs = MetricsObserver(MeterProvider(metric_readers=[InMemoryMetricReader()]))
    for _ in range(500):  # attempts left open by other runs
        obs.on_stream_start(
            ev.StreamStartContext(run_id=uuid.uuid4(), time_ns=0, turn=0, model="m", provider="p")
        )
    stop = threading.Event()
    errors: list[BaseException] = []

    def stream() -> None:
        while not stop.is_set():
            runs = [uuid.uuid4() for _ in range(50)]
            for run_id in runs:
                obs.on_stream_start(
                    ev.StreamStartContext(run_id=run_id, time_ns=0, turn=0, model="m", provider="p")
                )
            for run_id in runs:
                obs.on_stream_success(
                    ev.StreamSuccessContext(
                        run_id=run_id, time_ns=1, turn=0, model="m", provider="p"
                    )
                )

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    worker = threading.Thread(target=stream)
    worker.start()
    try:
        for _ in range(2_000):
            try:
                obs.on_run_end(ev.RunEndContext(run_id=uuid.uuid4(), time_ns=2, success=True))
            except RuntimeError as exc:
                errors.append(exc)
    finally:
        stop.set()
        worker.join()
        sys.setswitchinterval(interval)
    assert errors == []


async def test_huge_label_values_are_cut_and_counted(
    meter_provider: MeterProvider, metric_reader: InMemoryMetricReader
) -> None:
    """The OTel path bounds label length as the Prometheus path does, and counts each cut
    (once per run: the agent name is bounded at the run's start)."""
    obs = MetricsObserver(meter_provider)
    for i in range(3):
        s = Script(obs, agent=f"{i}" + "a" * 50_000)
        s.run_start()
        s.run_end()
    runs = values(collect(metric_reader)[c.RUNS.name])
    agents = {dict(key)[c.GEN_AI_AGENT_NAME] for key in runs}
    assert len(agents) == 3
    assert max(len(a) for a in agents) <= 256
    from loopobs.exporters.event_metrics import MAX_LABEL_LENGTH, TRUNCATED_MARKER

    assert {len(a) for a in agents} == {MAX_LABEL_LENGTH}
    assert all(a.endswith(TRUNCATED_MARKER) for a in agents)
    sanitised = values(collect(metric_reader)[c.LABEL_SANITISED.name])
    assert sanitised == {k(**{c.LOOPOBS_LABEL: c.prometheus_label(c.GEN_AI_AGENT_NAME)}): 3}
