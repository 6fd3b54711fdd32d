"""How much of what traces + OTel metrics add per turn is the OpenTelemetry SDK's own work.

Run: ``.venv/bin/python bench/bench_sdk_share.py`` (``--quick``: fewer runs).

The workload is ``bench/peers.py``'s: 20-turn runs of ``AgentLoop`` + ``OpenAIClient``
on the same streamed response (text, one tool call, usage) through an in-process
transport, with ``TracingObserver`` + ``MetricsObserver`` on SDK providers
(SimpleSpanProcessor → in-memory exporter, in-memory metric reader), alternated
with bare runs. "Added" is the median time per turn instrumented minus bare.
"Inside the SDK" is the time spent in the SDK's entry points the observers call
(``start_span``, ``Span.end``/``set_attribute(s)``/``set_status``/``add_event``,
the instruments' ``record``/``add``, context
attach/detach), summed per turn with a clock around each call (about 0.1 µs of
timing per call is included). The rest is loopobs: building and delivering
events, the observers' own work, and whatever the run pays for the SDK's work
(caches it evicts). Both are wall time of this single-threaded work (the SDK
calls cannot be timed in CPU time without a system call each), so run it on a
quiet machine. Instrument methods the observers bound before the timing was
installed (``runs.active``'s ``add``, once per run) count as loopobs's.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import print_table

# bench/peers.py (a directory bench/peers/ holds the peers' requirements, which type
# checkers take for the package).
peers: Any = importlib.import_module("bench.peers")

__all__ = ["main", "measure"]


class _Clock:
    """Sums the time spent in wrapped callables; nested calls count once (the outermost)."""

    def __init__(self) -> None:
        self.ns = 0
        self.calls = 0
        self._depth = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        clock = time.perf_counter_ns

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:
                return fn(*args, **kwargs)
            self._depth = 1
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns += clock() - started
                self.calls += 1
                self._depth = 0

        return timed


@contextmanager
def _sdk_timed(clock: _Clock) -> Iterator[None]:
    """Wrap the SDK entry points the observers call; restore them on exit."""
    from opentelemetry import context as otel_context
    from opentelemetry.sdk import trace as sdk_trace
    from opentelemetry.sdk.metrics._internal import instrument

    targets: list[tuple[Any, str]] = [
        (sdk_trace.Tracer, "start_span"),
        *(
            (sdk_trace.Span, name)
            for name in (
                "end",
                "set_attribute",
                "set_attributes",
                "set_status",
                "add_event",
                "record_exception",
            )
        ),
        (instrument.Histogram, "record"),
        (instrument.Counter, "add"),
        (instrument.UpDownCounter, "add"),
        (otel_context, "attach"),
        (otel_context, "detach"),
    ]
    saved = [
        (owner, name, owner.__dict__[name] if name in vars(owner) else None)
        for owner, name in targets
    ]
    try:
        for owner, name in targets:
            setattr(owner, name, clock.wrap(getattr(owner, name)))
        yield
    finally:
        for owner, name, original in saved:
            if original is None:
                delattr(owner, name)
            else:
                setattr(owner, name, original)


def measure(runs: int) -> dict[str, float]:
    """Per turn: added CPU time, time inside the SDK, and the SDK calls made (medians)."""
    tel = peers.Telemetry()
    one, switch = peers._loopobs_stack("loopobs", tel)
    clock = _Clock()

    async def timed(on: bool) -> float:
        switch(on)
        started = time.perf_counter()
        await one()
        elapsed = (time.perf_counter() - started) / peers.TURNS
        tel.exporter.clear()
        return float(elapsed)

    async def rounds() -> dict[str, list[float]]:
        for on in (False, True, False, True):  # warm-up: imports, first-call paths
            await timed(on)
        out: dict[str, list[float]] = {"bare": [], "full": [], "sdk": [], "calls": []}
        for _ in range(runs):
            out["bare"].append(await timed(False))
            out["full"].append(await timed(True))
            clock.ns = clock.calls = 0
            with _sdk_timed(clock):
                await timed(True)
            out["sdk"].append(clock.ns / 1e9 / peers.TURNS)
            out["calls"].append(clock.calls / peers.TURNS)
        return out

    out = asyncio.run(rounds())
    added = statistics.median(out["full"]) - statistics.median(out["bare"])
    return {
        "added_us": added * 1e6,
        "sdk_us": statistics.median(out["sdk"]) * 1e6,
        "sdk_calls": statistics.median(out["calls"]),
        "bare_us": statistics.median(out["bare"]) * 1e6,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Measure and print the table; return the row (for bench/run_all.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 runs of each, not 40")
    args = parser.parse_args(argv)
    result = measure(10 if args.quick else 40)
    own = result["added_us"] - result["sdk_us"]
    print(
        f"Traces + OTel metrics per turn, and the SDK's share — Python "
        f"{sys.version.split()[0]}; {peers.TURNS}-turn runs, medians"
    )
    print_table(
        ["per turn", "time", "share"],
        [
            ["added by TracingObserver + MetricsObserver", f"{result['added_us']:.0f} µs", "100 %"],
            [
                f"inside the OpenTelemetry SDK ({result['sdk_calls']:.0f} calls)",
                f"{result['sdk_us']:.0f} µs",
                f"{result['sdk_us'] / result['added_us'] * 100:.0f} %",
            ],
            [
                "loopobs (events, observers, and the rest)",
                f"{own:.0f} µs",
                f"{own / result['added_us'] * 100:.0f} %",
            ],
            ["a bare turn (no observers)", f"{result['bare_us']:.0f} µs", ""],
        ],
    )
    return [result]


if __name__ == "__main__":
    main()
