"""What an MCP round trip through the loop adds on top of the server's own time.

Run: ``.venv/bin/python bench/bench_mcp.py`` (``--quick`` for a smoke run).

One stdio server process (the demo's ``travel-facts`` server, written with the
``mcp`` SDK), one connection, kept open (``async with loop``). Rows, per call of
its ``visa_rules`` tool, best of several interleaved rounds:

- baseline: ``ClientSession.call_tool`` — the SDK called directly on the same
  connection: the server's own time plus the SDK's client and the pipe;
- ``McpTool.invoke``: our client path on top (trace context in ``_meta``, the
  request id read off the wire, the result turned into text, the call's
  ``McpCallInfo``);
- a whole tool attempt in a run (``on_tool_pre``/``on_tool_post``, the
  ``execute_tool`` span with the MCP attributes through an SDK tracer, the
  tool and MCP duration metrics through an SDK meter): a run whose one response
  asks for N calls one after the other, minus a run without calls, over N.

The server's process competes for the same cores as this one, so single rounds
vary a lot on a shared machine; read the best figures, and the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from bench._util import fmt_ns, fmt_ratio, print_table
from loopobs import AgentLoop, ToolCallScope
from loopobs.contract.tools import enter_tool_call
from loopobs.exporters import MetricsObserver, TracingObserver
from loopobs.llm.scripted import Reply, ScriptedClient, ToolCall
from loopobs.mcp import McpStdio, McpTool, McpToolSource

ROOT = Path(__file__).resolve().parents[1]
ARGS = {"country": "japan"}


class _Discard(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _server() -> McpStdio:
    inherited = os.environ.get("PYTHONPATH")
    path = os.pathsep.join([str(ROOT), inherited] if inherited else [str(ROOT)])
    return McpStdio(
        sys.executable,
        ["-m", "loopobs.demo.mcp_server"],
        name="travel-facts",
        env={"PYTHONPATH": path},
    )


async def _per_call(fn: Callable[[], Awaitable[Any]], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        await fn()
    return (time.perf_counter() - started) / calls * 1e9


def _loop(calls: int, observers: Sequence[Any]) -> AgentLoop:
    steps = (
        [
            Reply(tool_calls=tuple(ToolCall("visa_rules", ARGS) for _ in range(calls))),
            Reply(text="done"),
        ]
        if calls
        else [Reply(text="done")]
    )
    return AgentLoop(
        ScriptedClient(steps),
        model="m",
        observers=observers,
        parallel_tool_calls=False,
        detectors=[],
        tool_sources=[_server()],
    )


async def _measure(calls: int, rounds: int) -> dict[str, list[float]]:
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(_Discard()))
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    observers = [TracingObserver(tracer), MetricsObserver(meter)]
    times: dict[str, list[float]] = {"raw": [], "invoke": [], "attempt": []}
    try:
        holder = _loop(0, observers)
        async with holder:
            source = holder.open_sources[0]
            assert isinstance(source, McpToolSource)
            conn = source.connection
            assert conn is not None
            assert conn.session is not None
            session = conn.session
            found = source.tools()["visa_rules"]
            assert isinstance(found, McpTool)
            enter_tool_call(ToolCallScope("visa_rules", "bench"))
            for _ in range(3):  # warm-up
                await session.call_tool("visa_rules", ARGS)
                await found.invoke(ARGS)
            for _ in range(rounds):
                times["raw"].append(
                    await _per_call(lambda: session.call_tool("visa_rules", ARGS), calls)
                )
                times["invoke"].append(await _per_call(lambda: found.invoke(ARGS), calls))
        for _ in range(rounds):
            # Runs on their own kept-open loops, so connecting is outside the timing.
            with_calls, without = _loop(calls, observers), _loop(0, observers)
            async with with_calls, without:
                await without.run("warm-up")
                started = time.perf_counter()
                result = await with_calls.run("q")
                full = time.perf_counter() - started
                assert result.ok
                without.client = ScriptedClient([Reply(text="done")])
                started = time.perf_counter()
                await without.run("q")
                empty = time.perf_counter() - started
            times["attempt"].append((full - empty) / calls * 1e9)
    finally:
        tracer.shutdown()
        meter.shutdown()
    return times


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Print and return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds")
    args = parser.parse_args(argv)
    calls, rounds = (30, 3) if args.quick else (100, 12)
    times = asyncio.run(_measure(calls, rounds))
    raw = min(times["raw"])
    rows: list[dict[str, Any]] = []
    for key, name in (
        ("raw", "SDK ClientSession.call_tool (the baseline)"),
        ("invoke", "McpTool.invoke (our client path)"),
        ("attempt", "tool attempt in a run, traced + metered"),
    ):
        best, median = min(times[key]), statistics.median(times[key])
        rows.append(
            {
                "name": name,
                "best_ns": best,
                "median_ns": median,
                "baseline_ns": raw,
                "added_ns": best - raw,
            }
        )
    print_table(
        ["per call", "best", "median", "vs SDK", "added"],
        [
            [
                r["name"],
                fmt_ns(r["best_ns"]),
                fmt_ns(r["median_ns"]),
                fmt_ratio(r["best_ns"], raw),
                fmt_ns(max(0.0, r["added_ns"])),
            ]
            for r in rows
        ],
    )
    return rows


if __name__ == "__main__":
    main()
