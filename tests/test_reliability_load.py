"""Load: 1,000 concurrent runs in one event loop with every observer attached, while a
Prometheus scraper reads ``/metrics`` every 100 ms. Every run's telemetry is complete:
span counts and metric sums are exact. (Latency figures: ``bench/bench_load.py``.)"""

from __future__ import annotations

import asyncio
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopobs.exporters import start_metrics_server
from loopobs.testing import assert_contract, spans_by_name
from tests._reliability import (
    ANSWER_USAGE,
    STEP_USAGE,
    collect,
    make_loop,
    make_stack,
    otel_count,
    otel_sum,
    prom_sum,
)

RUNS = 1_000
TOOL_TURNS = 2


class Scraper:
    """GETs a ``/metrics`` URL every ``interval_s`` on a thread; keeps what it read."""

    def __init__(self, url: str, interval_s: float = 0.1) -> None:
        self.url = url
        self.interval_s = interval_s
        self.active: list[float] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    body = resp.read().decode()
                families = {f.name: f for f in text_string_to_metric_families(body)}
                self.active.append(sum(s.value for s in families["loopobs_runs_active"].samples))
            except Exception as exc:
                self.errors.append(exc)


@pytest.mark.slow
async def test_thousand_concurrent_runs_with_scrapes_lose_nothing() -> None:
    """1,000 concurrent runs + a scrape every 100 ms: exact span counts and metric sums."""
    stack = make_stack()
    loop = make_loop(stack, TOOL_TURNS)
    server = start_metrics_server(0, registry=stack.prometheus)
    try:
        with Scraper(server.url) as scraper:
            results = await asyncio.gather(*(loop.run(f"question {i}") for i in range(RUNS)))
            await asyncio.sleep(0.25)  # one more scrape after the last run
    finally:
        server.close()

    turns = TOOL_TURNS + 1
    assert all(r.ok and r.turns == turns for r in results)
    assert len({r.run_id for r in results}) == RUNS
    assert scraper.errors == []
    assert len(scraper.active) >= 2
    assert all(0 <= a <= RUNS for a in scraper.active)
    assert scraper.active[-1] == 0

    assert_contract(stack.recorder.events)
    open_runs = peak = 0
    for hook, _ in stack.recorder.events:
        open_runs += {"on_run_start": 1, "on_run_end": -1}.get(hook, 0)
        peak = max(peak, open_runs)
    assert peak == RUNS  # every run was in flight at once
    spans = spans_by_name(stack.span_exporter)
    assert len(spans["invoke_agent agent"]) == RUNS
    assert len(spans["turn"]) == RUNS * turns
    assert len(spans["chat m1"]) == RUNS * turns
    assert len(spans["execute_tool lookup"]) == RUNS * TOOL_TURNS
    # Each run's spans form one trace under its own root.
    roots = {s.context.trace_id: s.context.span_id for s in spans["invoke_agent agent"]}
    assert len(roots) == RUNS
    for s in spans["turn"]:
        assert s.parent is not None
        assert s.parent.span_id == roots[s.context.trace_id]
    assert stack.tracing.open_spans() == 0

    inputs = RUNS * (TOOL_TURNS * STEP_USAGE.input_tokens + ANSWER_USAGE.input_tokens)
    outputs = RUNS * (TOOL_TURNS * STEP_USAGE.output_tokens + ANSWER_USAGE.output_tokens)
    points = collect(stack)
    assert otel_sum(points, "loopobs.runs") == RUNS
    assert otel_sum(points, "loopobs.runs.active") == 0
    assert otel_sum(points, "loopobs.turns") == RUNS * turns
    assert otel_sum(points, "loopobs.tool.calls") == RUNS * TOOL_TURNS
    assert otel_count(points, "gen_ai.client.operation.duration") == RUNS * turns
    assert otel_sum(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": "input"}) == inputs
    assert (
        otel_sum(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": "output"}) == outputs
    )
    reg = stack.prometheus.registry
    assert prom_sum(reg, "loopobs_runs_total") == RUNS
    assert prom_sum(reg, "loopobs_runs_active") == 0
    assert prom_sum(reg, "loopobs_turns_total") == RUNS * turns
    assert prom_sum(reg, "loopobs_tool_calls_total") == RUNS * TOOL_TURNS
    assert prom_sum(reg, "gen_ai_client_token_usage_sum", gen_ai_token_type="input") == inputs
    assert prom_sum(reg, "gen_ai_client_token_usage_sum", gen_ai_token_type="output") == outputs
    assert prom_sum(reg, "gen_ai_client_operation_duration_seconds_count") == RUNS * turns
    assert len(stack.jsonl_lines()) == len(stack.recorder.events)
    # Nothing per-run left behind.
    assert stack.tracing.open_runs == stack.metrics.open_runs == stack.prometheus.open_runs == 0
    assert loop.observers.failure_count == 0
    stack.close()
