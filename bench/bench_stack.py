"""Whole-stack overhead: every observer on a scripted 1,000-turn run, and the peer anchors.

Run: ``.venv/bin/python bench/bench_stack.py`` (``--quick``: 200 turns, one round).

"Every observer" is TracingObserver (SDK provider, BatchSpanProcessor into an
exporter that discards), MetricsObserver (in-memory reader), PrometheusObserver
(fresh registry), JsonlRecorder (to a temporary file) and the default detectors.
The same 1,000-turn run (each turn one model call and one tool call; the model
answers after a 1 ms latency) is timed with no observers and no detectors, and
with all of them, in interleaved rounds; the overhead is the difference as a
percentage of the bare run's time (wall time: the latency is real). A zero-latency
pair gives the cost per turn, in CPU time of the process (the exporter thread
included; on a shared machine wall time mostly measures the other processes).

Peer anchors, measured in this process:

- LangChain callback dispatch (``langchain-core``, if installed; not a dependency):
  ``run_manager.on_tool_end`` to 3 no-op handlers, against our emit site building
  the tool-post context and delivering it to 3 no-op observers (each side builds
  its own event). ``make bench-peers`` compares both on a real model call.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from bench._util import fmt_ns, print_table, time_stmt
from loopobs import AgentLoop, LoopObserver, ObserverSet, ToolPostContext, Usage, tool
from loopobs.contract.model import ModelRequest, ToolResultMessage
from loopobs.exporters import JsonlRecorder, MetricsObserver, PrometheusObserver, TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall

__all__ = ["Discard", "all_observers", "main", "script"]

MODEL_LATENCY_S = 0.001


class Discard(SpanExporter):
    """Accepts spans, counts them, keeps none."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


@tool
async def lookup(step: int, total: int, n: int) -> str:
    """The tool: cheap and async."""
    return f"step {step} of {total}"


def script(tool_turns: int) -> Any:
    """``tool_turns`` tool turns with distinct arguments, then an answer (reads the last one)."""
    counter = iter(range(1 << 62))

    def step(request: ModelRequest) -> Reply:
        last = request.messages[-1] if request.messages else None
        done = 0
        if isinstance(last, ToolResultMessage) and last.content.startswith("step "):
            done = int(last.content.split()[1])
        if done < tool_turns:
            return Reply(
                text="working on it",
                usage=Usage(input_tokens=100, output_tokens=10),
                tool_calls=(
                    ToolCall("lookup", {"step": done + 1, "total": tool_turns, "n": next(counter)}),
                ),
            )
        return Reply(
            text=f"answer {next(counter)}", usage=Usage(input_tokens=200, output_tokens=20)
        )

    return step


class Stack:
    """All observers with sinks that keep nothing in memory; :meth:`close` releases them."""

    def __init__(self, directory: str) -> None:
        self.exporter = Discard()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(BatchSpanProcessor(self.exporter))
        self.meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
        self.jsonl = JsonlRecorder(Path(directory) / f"{uuid.uuid4().hex}.jsonl")
        self.observers: list[LoopObserver] = [
            TracingObserver(self.tracer_provider),
            MetricsObserver(self.meter_provider),
            PrometheusObserver(CollectorRegistry()),
            self.jsonl,
        ]

    def close(self) -> None:
        self.jsonl.shutdown()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def all_observers(directory: str) -> Stack:
    """A fresh stack of every exporting observer."""
    return Stack(directory)


async def _one_run(turns: int, latency_s: float, directory: str | None) -> float:
    """Seconds for one run of ``turns`` turns, bare (``directory`` None) or with everything."""
    stack = all_observers(directory) if directory is not None else None
    loop = AgentLoop(
        ScriptedClient(script(turns - 1), chunk_size=64, latency_s=latency_s),
        model="m1",
        tools=[lookup],
        max_turns=turns + 1,
        observers=stack.observers if stack else [],
        detectors=None if stack else [],
    )
    clock = time.perf_counter if latency_s else time.process_time
    start = clock()
    result = await loop.run("go")
    elapsed = clock() - start
    assert result.ok, result.error
    assert result.turns == turns
    if stack is not None:
        stack.close()
    return elapsed


async def stack_overhead(turns: int, rounds: int, latency_s: float) -> dict[str, float]:
    """Best (min) and median seconds per run, bare and with all observers, interleaved."""
    with tempfile.TemporaryDirectory(prefix="loopobs-bench-") as directory:
        await _one_run(min(turns, 50), latency_s, None)
        await _one_run(min(turns, 50), latency_s, directory)
        bare: list[float] = []
        full: list[float] = []
        for _ in range(rounds):
            bare.append(await _one_run(turns, latency_s, None))
            full.append(await _one_run(turns, latency_s, directory))
    return {
        "bare_s": min(bare),
        "full_s": min(full),
        "bare_median_s": statistics.median(bare),
        "full_median_s": statistics.median(full),
    }


def langchain_rows(opts: dict[str, Any]) -> list[dict[str, Any]]:
    """LangChain callback dispatch to 3 no-op handlers vs ObserverSet to 3 observers."""

    class NoOp(LoopObserver):
        def on_tool_post(self, ctx: ToolPostContext) -> None:
            pass

    run_id = uuid.uuid4()
    # The same workload on both sides: LangChain builds its event inside on_tool_end, so
    # ours builds the context at the emit site, as the loop does, then dispatches it.
    ours = time_stmt(
        "ObserverSet: build a tool-post event, dispatch to 3 no-op observers",
        "observers.on_tool_post(ToolPostContext(run_id=run_id, time_ns=now(), "
        "tool_call_id='c', turn=0, tool='search', result='out'))",
        {
            "observers": ObserverSet([NoOp() for _ in range(3)]),
            "ToolPostContext": ToolPostContext,
            "run_id": run_id,
            "now": time.time_ns,
        },
        **opts,
    )
    rows = [
        {
            "name": ours.name,
            "best_ns": ours.best_ns,
            "median_ns": ours.median_ns,
            "baseline_ns": None,
        }
    ]
    try:
        from langchain_core.callbacks import BaseCallbackHandler, CallbackManagerForToolRun
    except ImportError as exc:
        rows.append(
            {
                "name": "LangChain callback dispatch",
                "skipped": f"langchain-core not installed ({exc.name}); "
                "`.venv/bin/pip install langchain-core` for this row",
            }
        )
        return rows

    class Handler(BaseCallbackHandler):
        def on_tool_end(self, output: Any, **kwargs: Any) -> None:
            pass

    handlers: list[BaseCallbackHandler] = [Handler() for _ in range(3)]
    manager = CallbackManagerForToolRun(
        run_id=uuid.uuid4(), handlers=handlers, inheritable_handlers=handlers
    )
    lc = time_stmt(
        "LangChain run_manager.on_tool_end to 3 no-op handlers",
        "manager.on_tool_end('out')",
        {"manager": manager},
        **opts,
    )
    rows.append(
        {"name": lc.name, "best_ns": lc.best_ns, "median_ns": lc.median_ns, "baseline_ns": None}
    )
    rows[0]["baseline_ns"] = lc.best_ns
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark, print the tables, return the rows (for bench/run_all.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 turns, one round")
    args = parser.parse_args(argv)
    turns, rounds = (200, 1) if args.quick else (1_000, 5)
    opts: dict[str, Any] = {"repeats": 3, "target_s": 0.03} if args.quick else {}

    slow = asyncio.run(stack_overhead(turns, rounds, MODEL_LATENCY_S))
    fast = asyncio.run(stack_overhead(turns, rounds, 0.0))
    pct = (slow["full_s"] - slow["bare_s"]) / slow["bare_s"] * 100
    per_turn = (fast["full_s"] - fast["bare_s"]) / turns * 1e9
    rows: list[dict[str, Any]] = [
        {
            "name": f"{turns}-turn run, 1 ms model latency, no observers",
            "best_ns": slow["bare_s"] * 1e9,
            "median_ns": slow["bare_median_s"] * 1e9,
        },
        {
            "name": f"{turns}-turn run, 1 ms model latency, all observers + detectors",
            "best_ns": slow["full_s"] * 1e9,
            "median_ns": slow["full_median_s"] * 1e9,
            "overhead_pct": pct,
        },
        {
            "name": "all observers + detectors, added time per turn (zero-latency model)",
            "best_ns": per_turn,
            "median_ns": (fast["full_median_s"] - fast["bare_median_s"]) / turns * 1e9,
            "bare_turn_ns": fast["bare_s"] / turns * 1e9,
        },
    ]
    rows += langchain_rows(opts)
    table = []
    for r in rows:
        if "skipped" in r:
            table.append([r["name"], "skipped", "", r["skipped"]])
            continue
        note = ""
        if "overhead_pct" in r:
            note = f"overhead {r['overhead_pct']:.1f} % of the run"
        elif "bare_turn_ns" in r:
            note = f"bare turn {fmt_ns(r['bare_turn_ns'])}"
        elif r.get("baseline_ns"):
            note = f"{r['best_ns'] / r['baseline_ns']:.2f}× LangChain"
        table.append([r["name"], fmt_ns(r["best_ns"]), fmt_ns(r["median_ns"]), note])
    print(f"Whole stack — Python {sys.version.split()[0]}; best and median of {rounds} round(s)")
    print_table(["benchmark", "best", "median", "note"], table)
    return rows


if __name__ == "__main__":
    main()
