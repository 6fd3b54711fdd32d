"""What each observer adds per streamed chunk: the cost that grows with a response's length.

Run: ``.venv/bin/python bench/bench_chunks.py`` (``--quick``: fewer runs).

A real model streams a response in hundreds of chunks, and every chunk is an
``on_text_delta`` event: what an observer does per chunk can outweigh all it
does per call. The workload: one scripted reply of 2,000 characters, streamed
as 1 chunk or as 200 chunks (10 characters each), with one observer at a time,
alternated with bare runs in the same process. The cost per chunk is the added
CPU time of the 200-chunk run minus that of the 1-chunk run, over 199; the
baseline is what the loop itself spends per chunk with no observer. Metrics
alone record no exemplars (no span is current); with tracing, each chunk gap
samples one linking to its chat span, as in a traced deployment.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from bench._util import fmt_ns, print_table
from loopobs import AgentLoop, LoopObserver
from loopobs.exporters import JsonlRecorder, MetricsObserver, PrometheusObserver, TracingObserver
from loopobs.llm import Reply, ScriptedClient

__all__ = ["main"]

TEXT = "x" * 2_000
CHUNKS = 200


def _observers() -> dict[str, Callable[[], list[LoopObserver]]]:
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    tracing, metrics = TracingObserver(tracer), MetricsObserver(meter)
    prometheus = PrometheusObserver(CollectorRegistry())
    jsonl = JsonlRecorder(io.StringIO(), flush_interval_s=None)

    def clear(observers: list[LoopObserver]) -> Callable[[], list[LoopObserver]]:
        def make() -> list[LoopObserver]:
            spans.clear()
            return observers

        return make

    traced_metrics = MetricsObserver(meter)
    return {
        "none": clear([]),
        "TracingObserver": clear([tracing]),
        "MetricsObserver": clear([metrics]),
        "TracingObserver + MetricsObserver": clear([tracing, traced_metrics]),
        "PrometheusObserver": clear([prometheus]),
        "JsonlRecorder": clear([jsonl]),
    }


async def _run(observers: list[LoopObserver], chunk_size: int) -> float:
    loop = AgentLoop(
        ScriptedClient([Reply(text=TEXT)], chunk_size=chunk_size),
        model="m",
        observers=observers,
        detectors=[],
    )
    started = time.process_time()
    result = await loop.run("go")
    elapsed = time.process_time() - started
    assert result.ok, result.error
    return elapsed


async def measure(runs: int) -> list[dict[str, Any]]:
    """Per observer: CPU ns per chunk (median), and the bare loop's own per chunk."""
    stacks = _observers()
    times: dict[tuple[str, int], list[float]] = {}
    sizes = (len(TEXT), len(TEXT) // CHUNKS)
    for round_ in range(runs + 3):
        for name, make in stacks.items():
            for size in sizes:
                elapsed = await _run(make(), size)
                if round_ >= 3:  # three warm-up rounds
                    times.setdefault((name, size), []).append(elapsed)
    med = {key: statistics.median(v) for key, v in times.items()}

    def per_chunk(name: str) -> float:
        return (med[(name, sizes[1])] - med[(name, sizes[0])]) / (CHUNKS - 1) * 1e9

    bare = per_chunk("none")
    return [
        {"name": name, "ns_per_chunk": per_chunk(name) - bare, "baseline_ns": bare}
        for name in stacks
        if name != "none"
    ]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Measure and print the table; return the rows (for bench/run_all.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 runs each, not 30")
    args = parser.parse_args(argv)
    rows = asyncio.run(measure(5 if args.quick else 30))
    print(
        f"Per streamed chunk — Python {sys.version.split()[0]}; a {len(TEXT):,}-character "
        f"reply in 1 vs {CHUNKS} chunks, medians"
    )
    print_table(
        ["observer", "added per chunk", "the loop's own per chunk", "ratio"],
        [
            [
                r["name"],
                fmt_ns(r["ns_per_chunk"]),
                fmt_ns(r["baseline_ns"]),
                f"{r['ns_per_chunk'] / r['baseline_ns']:.2f}×",
            ]
            for r in rows
        ],
    )
    return rows


if __name__ == "__main__":
    main()
