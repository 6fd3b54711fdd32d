"""Soak: one session of 5,000 turns (100 runs of 50) with every observer attached, a bounded
conversation (``context_window`` + the default TruncatingCompactor), spans through a
BatchSpanProcessor and the event log to a file. Python memory (allocated blocks) stays flat
and no per-run state is left behind. The 100,000-turn version with RSS figures is
``bench/bench_soak.py``."""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from loopobs import AgentLoop, Conversation
from loopobs.contract import trace_links
from loopobs.detectors import RepetitionDetector, clear_caches
from loopobs.exporters import (
    JsonlRecorder,
    MetricsObserver,
    PrometheusObserver,
    TracingObserver,
)
from loopobs.llm import ScriptedClient
from loopobs.testing import metric_points
from tests._reliability import lookup, otel_sum, prom_sum, tool_script

TURNS_PER_RUN = 50
RUNS = 100
WINDOW = 4_000
# Growth allowed between the middle and the end of the soak, in Python's allocated memory
# blocks (sys.getallocatedblocks: every live object and buffer): a leak of one object a
# turn would show as 2,500 blocks over the second half.
ALLOWED_BLOCKS = 1_000


class CountingExporter(SpanExporter):
    """Counts exported spans and keeps none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@pytest.mark.slow
async def test_long_session_keeps_memory_flat_and_leaves_no_run_state(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """5,000 turns on one session: flat traced memory, compactions, nothing left per run."""
    exporter = CountingExporter()
    tp = TracerProvider()
    tp.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=4096, schedule_delay_millis=50)
    )
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    tracing, metrics = TracingObserver(tp), MetricsObserver(mp)
    prom = PrometheusObserver(CollectorRegistry())
    jsonl = JsonlRecorder(tmp_path / "soak.jsonl")
    request.addfinalizer(jsonl.shutdown)
    client = ScriptedClient(
        tool_script(TURNS_PER_RUN - 1, fill=30, measured_usage=True), chunk_size=64
    )
    loop = AgentLoop(
        client,
        model="m1",
        tools=[lookup],
        observers=[tracing, metrics, prom, jsonl],
        context_window=WINDOW,
        max_turns=TURNS_PER_RUN + 5,
    )
    session = Conversation()
    # The process's trace links are shared: count only what this soak's runs leave open.
    links_open = trace_links.LINKS.open_runs

    async def runs(n: int) -> None:
        for _ in range(n):
            result = await loop.run("keep going", session=session)
            assert result.ok, result.error
            assert result.turns == TURNS_PER_RUN
            client.requests.clear()  # the test double's own request log, not loopobs state

    await runs(RUNS // 2)  # warm up: caches, label children, compaction steady state
    tp.force_flush()
    # The detectors' process-wide caches are bounded (thousands of entries, emptied at
    # once when full): each call's arguments are new here, so they would still be filling
    # or just emptied at either count, whatever came before in the process.
    clear_caches()
    gc.collect()
    middle = sys.getallocatedblocks()
    await runs(RUNS // 2)
    tp.force_flush()
    clear_caches()
    gc.collect()
    end = sys.getallocatedblocks()
    assert end - middle < ALLOWED_BLOCKS, f"{end - middle} more blocks in the second half"

    turns = RUNS * TURNS_PER_RUN
    assert session.turn == turns
    assert len(session.messages) < 100  # bounded by compaction
    # No per-run state anywhere.
    assert tracing.open_runs == 0
    assert tracing.open_spans() == 0
    assert metrics.open_runs == 0
    assert prom.open_runs == 0
    assert loop._policy.open_runs == 0
    for detector in loop.detectors:
        assert detector._run_sessions == {}  # type: ignore[attr-defined]
        assert detector.sessions <= 1  # type: ignore[attr-defined]
    assert isinstance(loop.detectors[0], RepetitionDetector)
    assert trace_links.LINKS.open_runs == links_open
    # Nothing lost.
    tp.force_flush()
    assert exporter.spans == RUNS * (1 + 2 * TURNS_PER_RUN + TURNS_PER_RUN - 1)
    points = metric_points(reader)
    assert otel_sum(points, "loopobs.turns") == turns
    assert otel_sum(points, "loopobs.compactions") > 0
    assert prom_sum(prom.registry, "loopobs_turns_total") == turns
    assert prom_sum(prom.registry, "loopobs_loop_detections_total") == 0
    jsonl.shutdown()
    lines = (tmp_path / "soak.jsonl").read_text().count("\n")
    assert lines > turns * 8
    tp.shutdown()
    mp.shutdown()
