"""Cost of PrometheusObserver per event, against bare prometheus-client calls in this process.

Run: ``.venv/bin/python bench/bench_prometheus.py`` (``--quick`` for fewer repeats).

Rows give the median ns per operation over several repeats, and the ratio to a
bare ``Counter.inc()`` (no labels) measured in the same run. Every observer row
uses a cached label set (the same model / tool / agent as the warm-up), the
case the ≤ 1 µs target is about. ``updates`` says how many prometheus-client
updates the hook performs, and ``ns/update`` divides by it. The scrape rows time
``generate_latest`` on a registry holding 1,000 and 10,000 series.
"""

from __future__ import annotations

import argparse
import statistics
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from loopobs import (
    LoopDetectedContext,
    RunEndContext,
    RunStartContext,
    StreamSuccessContext,
    ToolPostContext,
    TurnEndContext,
)
from loopobs.contract import trace_links
from loopobs.exporters import PrometheusObserver


@dataclass(frozen=True)
class Row:
    """One benchmark result."""

    name: str
    ns_per_op: float
    updates: int = 1
    baseline_ns: float | None = None

    @property
    def ratio(self) -> float | None:
        """``ns_per_op`` over the bare ``Counter.inc()`` of the same run."""
        return None if self.baseline_ns is None else self.ns_per_op / self.baseline_ns

    @property
    def ns_per_update(self) -> float:
        """Nanoseconds per prometheus-client update the operation makes."""
        return self.ns_per_op / self.updates


def measure(fn: Callable[[], object], number: int, repeats: int) -> float:
    """Median ns per call of ``fn`` over ``repeats`` runs of ``number`` calls."""
    fn()  # warm up (creates label children)
    times = timeit.repeat(fn, number=number, repeat=repeats)
    return statistics.median(times) / number * 1e9


def event_rows(number: int, repeats: int) -> list[Row]:
    """Per-event costs: bare calls first, then the observer's hooks."""
    reg = CollectorRegistry()
    counter = Counter("bare_counter", "bare", registry=reg)
    hist = Histogram("bare_hist_seconds", "bare", registry=reg)
    labelled = Counter("bare_labelled", "bare", ["tool", "outcome"], registry=reg)
    child = labelled.labels("search", "output")
    base = measure(counter.inc, number, repeats)
    rows = [
        Row("bare Counter.inc()", base, baseline_ns=base),
        Row(
            "bare Histogram.observe(0.3)",
            measure(lambda: hist.observe(0.3), number, repeats),
            baseline_ns=base,
        ),
        Row("bare pre-bound child.inc()", measure(child.inc, number, repeats), baseline_ns=base),
        Row(
            "bare Counter.labels(a, b).inc()",
            measure(lambda: labelled.labels("search", "output").inc(), number, repeats),
            baseline_ns=base,
        ),
    ]

    obs = PrometheusObserver(exemplars=False)
    rid = uuid.uuid4()
    obs.on_run_start(RunStartContext(run_id=rid, time_ns=0, session_id=rid, agent="a"))
    turn_end = TurnEndContext(run_id=rid, time_ns=0, turn=0, success=True)
    detected = LoopDetectedContext(
        run_id=rid, time_ns=0, pattern="p", repetitions=3, tool="search", action="warn"
    )
    tool_post = ToolPostContext(
        run_id=rid, time_ns=0, tool_call_id="c", turn=0, tool="search", duration_ms=12.0
    )
    stream = StreamSuccessContext(
        run_id=rid,
        time_ns=0,
        turn=0,
        model="m1",
        provider="p",
        input_tokens=1200,
        output_tokens=300,
        duration_ms=800.0,
        time_to_first_token_ms=150.0,
    )
    rows += [
        Row(
            "observer on_turn_end (1 counter)",
            measure(lambda: obs.on_turn_end(turn_end), number, repeats),
            1,
            base,
        ),
        Row(
            "observer on_loop_detected (1 counter, 2 bounded labels)",
            measure(lambda: obs.on_loop_detected(detected), number, repeats),
            1,
            base,
        ),
        Row(
            "observer on_tool_post (1 counter + 1 histogram)",
            measure(lambda: obs.on_tool_post(tool_post), number, repeats),
            2,
            base,
        ),
        Row(
            "observer on_stream_success (4 histograms + 2 counters)",
            measure(lambda: obs.on_stream_success(stream), number, repeats),
            6,
            base,
        ),
    ]

    traced = PrometheusObserver(exemplars=True)
    trace_links.publish(rid, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    try:
        rows.append(
            Row(
                "observer on_stream_success, traced (6 exemplars)",
                measure(lambda: traced.on_stream_success(stream), number, repeats),
                6,
                base,
            )
        )
    finally:
        trace_links.withdraw(rid)

    start = RunStartContext(run_id=rid, time_ns=0, session_id=rid, agent="a")
    end = RunEndContext(run_id=rid, time_ns=0, success=True, duration_ms=900.0)

    def run_pair() -> None:
        obs.on_run_start(start)
        obs.on_run_end(end)

    rows.append(
        Row(
            "observer on_run_start + on_run_end (gauge ±1, histogram, counter)",
            measure(run_pair, number, repeats),
            4,
            base,
        )
    )
    return rows


def scrape_rows(repeats: int) -> list[Row]:
    """``generate_latest`` time for 1,000 and 10,000 series, observer vs a bare counter."""
    rows: list[Row] = []
    for n in (1_000, 10_000):
        obs = PrometheusObserver(max_label_values=n, exemplars=False)
        rid = uuid.uuid4()
        for i in range(n):
            obs.on_loop_detected(
                LoopDetectedContext(
                    run_id=rid, time_ns=0, pattern="p", repetitions=3, tool=f"tool-{i}"
                )
            )
        reg = CollectorRegistry()
        bare = Counter("bare_detections", "bare", ["tool", "action"], registry=reg)
        for i in range(n):
            bare.labels(f"tool-{i}", "warn").inc()
        bare_ns = measure(lambda r=reg: generate_latest(r), 1, repeats)  # type: ignore[misc]
        ns = measure(lambda o=obs: generate_latest(o.registry), 1, repeats)  # type: ignore[misc]
        rows.append(Row(f"scrape bare Counter, {n:,} series", bare_ns, n, bare_ns))
        rows.append(Row(f"scrape PrometheusObserver, {n:,} series", ns, n, bare_ns))
    return rows


def fmt(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns:,.0f} ns"


def print_table(rows: list[Row]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'benchmark':<{width}}  {'per op':>10}  {'updates':>7}  {'per update':>10}  ratio")
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}x"
        print(
            f"{r.name:<{width}}  {fmt(r.ns_per_op):>10}  {r.updates:>7}  "
            f"{fmt(r.ns_per_update):>10}  {ratio}"
        )
    print("ratio: events vs bare Counter.inc(); scrapes vs a bare Counter with as many series")


def main(argv: list[str] | None = None) -> list[Row]:
    """Run every benchmark, print the table, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args(argv)
    number, repeats = (2_000, 3) if args.quick else (50_000, 7)
    rows = event_rows(number, repeats) + scrape_rows(3 if args.quick else 5)
    print_table(rows)
    return rows


if __name__ == "__main__":
    main()
