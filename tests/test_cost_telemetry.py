"""Cost and budget verdicts in telemetry: spans, both metric paths, the JSONL log and its replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from loopobs import AgentLoop, Budget, RunResult, Usage
from loopobs.exporters import PrometheusObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.console import render_run
from loopobs.exporters.jsonl import JsonlRecorder, replay
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.tracing import TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, metric_points
from tests._loop_support import search

AGENT = "spender"


def runaway() -> list[Reply]:
    return [
        Reply(
            tool_calls=(ToolCall("search", {"query": f"q{i}"}),),
            usage=Usage(
                input_tokens=1000 * (i + 1), output_tokens=50, cache_read_input_tokens=500 * i
            ),
        )
        for i in range(20)
    ]


async def spend(*observers: Any, model: str = "gpt-4o") -> RunResult:
    """A runaway loop stopped by Budget(usd=0.01, warn_at=0.5), priced as OpenAI's model."""
    client = ScriptedClient(runaway())
    client.provider = "openai"
    loop = AgentLoop(
        client,
        model=model,
        tools=[search],
        observers=observers,
        detectors=[],
        budget=Budget(usd=0.01, warn_at=0.5),
        agent_name=AGENT,
    )
    return await loop.run("go")


def span_attrs(exporter: InMemorySpanExporter, name: str) -> list[dict[str, Any]]:
    return [
        dict(s.attributes or {})
        for s in exporter.get_finished_spans()
        if s.name.split(" ")[0] == name
    ]


async def test_spans_carry_the_cost_and_the_budget_verdicts() -> None:
    """chat, turn and invoke_agent spans have loopobs.cost.usd; verdicts are span events."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rec = RecordingObserver()
    result = await spend(TracingObserver(provider), rec)
    calls = [e.cost_usd for e in rec.of("on_stream_success")]
    assert all(cost is not None for cost in calls)
    assert [a[c.LOOPOBS_COST_USD] for a in span_attrs(exporter, "chat")] == calls
    assert [a[c.LOOPOBS_COST_USD] for a in span_attrs(exporter, "turn")] == calls
    (run,) = span_attrs(exporter, "invoke_agent")
    assert run[c.LOOPOBS_COST_USD] == result.cost_usd
    events = [
        (e.name, dict(e.attributes or {}))
        for s in exporter.get_finished_spans()
        for e in s.events
        if e.name == c.EVENT_BUDGET_EXCEEDED
    ]
    assert [(a[c.LOOPOBS_BUDGET_ACTION], a[c.LOOPOBS_BUDGET_LIMIT]) for _, a in events] == [
        ("warn", "usd"),
        ("stop", "usd"),
    ]
    stop = events[-1][1]
    assert stop[c.LOOPOBS_BUDGET_ALLOWED] == 0.01
    value = stop[c.LOOPOBS_BUDGET_VALUE]
    assert isinstance(value, float)
    assert value > 0.01
    assert stop[c.LOOPOBS_BUDGET_SCOPE] == "run"


async def test_unpriced_calls_leave_the_cost_attribute_out() -> None:
    """A model with no price: no loopobs.cost.usd on its spans (unknown is not 0)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    loop = AgentLoop(
        ScriptedClient([Reply(text="hi", usage=Usage(input_tokens=5, output_tokens=1))]),
        model="house-model-7b",
        observers=[TracingObserver(provider)],
        detectors=[],
    )
    await loop.run("q")
    for name in ("chat", "turn", "invoke_agent"):
        (attrs,) = span_attrs(exporter, name)
        assert c.LOOPOBS_COST_USD not in attrs, name


async def test_both_metric_paths_count_spend_unpriced_calls_and_budget_verdicts() -> None:
    """loopobs_cost_usd_total, unpriced calls, run cost and budget verdicts: same in both paths."""
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    prom = PrometheusObserver(CollectorRegistry())
    try:
        priced = await spend(MetricsObserver(meter_provider), prom)
        await spend(MetricsObserver(meter_provider), prom, model="house-model-7b")
        points = metric_points(reader)
    finally:
        meter_provider.shutdown()
    assert priced.cost_usd is not None
    get = prom.registry.get_sample_value
    model = {"gen_ai_provider_name": "openai", "gen_ai_request_model": "gpt-4o"}
    assert get("loopobs_cost_usd_total", model) == pytest.approx(priced.cost_usd)
    assert get("loopobs_cost_unpriced_calls_total", model) is None
    house = {"gen_ai_provider_name": "openai", "gen_ai_request_model": "house-model-7b"}
    # no known dollars, so the USD budget never stops it: all 20 scripted calls are made
    assert get("loopobs_cost_unpriced_calls_total", house) == 20
    assert get("loopobs_cost_usd_total", house) is None
    agent = {"gen_ai_agent_name": AGENT}
    assert get("loopobs_run_cost_usd_count", agent) == 1  # the unpriced run has no known cost
    assert get("loopobs_run_cost_usd_sum", agent) == pytest.approx(priced.cost_usd)
    verdict = {**agent, "loopobs_budget_limit": "usd", "loopobs_budget_scope": "run"}
    assert get("loopobs_budget_exceeded_total", {**verdict, "loopobs_budget_action": "stop"}) == 1
    assert get("loopobs_budget_exceeded_total", {**verdict, "loopobs_budget_action": "warn"}) == 1

    def otel(name: str) -> dict[frozenset[tuple[str, Any]], Any]:
        return {
            frozenset((p.attributes or {}).items()): getattr(p, "value", None) or p.sum
            for p in points.get(name, [])
        }

    key = frozenset({c.GEN_AI_PROVIDER_NAME: "openai", c.GEN_AI_REQUEST_MODEL: "gpt-4o"}.items())
    assert otel(c.COST.name) == {key: pytest.approx(priced.cost_usd)}
    house_key = frozenset(
        {c.GEN_AI_PROVIDER_NAME: "openai", c.GEN_AI_REQUEST_MODEL: "house-model-7b"}.items()
    )
    assert otel(c.UNPRICED_CALLS.name) == {house_key: 20}
    assert otel(c.RUN_COST.name) == {
        frozenset({c.GEN_AI_AGENT_NAME: AGENT}.items()): pytest.approx(priced.cost_usd)
    }
    assert sorted(dict(k)[c.LOOPOBS_BUDGET_ACTION] for k in otel(c.BUDGET_EXCEEDED.name)) == [
        "stop",
        "warn",
    ]


async def test_costs_survive_the_jsonl_round_trip_and_replay(tmp_path: Path) -> None:
    """Recorded and replayed events are equal, costs and verdicts included; inspect shows them."""
    log = tmp_path / "spend.jsonl"
    live = RecordingObserver()
    recorder = JsonlRecorder(log)
    result = await spend(live, recorder)
    recorder.shutdown()

    again = RecordingObserver()
    stats = replay(log, again)
    assert stats.skipped == 0
    assert again.events == live.events
    ends = again.of("on_run_end")
    assert ends[0].cost_usd == result.cost_usd
    assert [e.action for e in again.of("on_budget_exceeded")] == ["warn", "stop"]

    text, summary = render_run([ctx for _, ctx in again.events])
    assert summary.cost == pytest.approx(result.cost_usd)
    assert summary.budget_stops == 1
    first_call = again.of("on_stream_success")[0].cost_usd
    assert "turn 0  ok" in text
    assert f"cost ${first_call:.4f}" in text.splitlines()[1]
    assert "⛔ run budget exceeded: usd" in text
