"""Load and outage latency: 1,000 concurrent runs with every observer while ``/metrics`` is
scraped every 100 ms, and run latency with the OTLP collector down.

Run: ``.venv/bin/python bench/bench_load.py`` (``--quick``: 200 runs, fewer outage runs).

- Load: ``RUNS`` concurrent runs (3 turns, 1 ms model latency) in one event loop,
  bare and with every observer + detectors + a scraper thread GETting ``/metrics``
  every 100 ms. Reported: p50 / p99 run latency of each and the added p99.
- Outage: sequential 3-turn runs through ``loopobs.configure()`` with OTLP/HTTP to a
  closed port, to a listener that accepts and never answers, and with no exporter
  (``traces_exporter="none"``); mean run latency and the ratio to no exporter.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import print_table
from bench.bench_stack import all_observers, lookup, script
from loopobs import AgentLoop, configure
from loopobs.exporters import start_metrics_server
from loopobs.llm import ScriptedClient

TURNS = 3


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _timed(loop: AgentLoop, i: int) -> float:
    start = time.perf_counter()
    result = await loop.run(f"q{i}")
    assert result.ok, result.error
    return time.perf_counter() - start


async def load(runs: int, observed: bool) -> list[float]:
    """Latencies of ``runs`` concurrent runs, bare or with everything and a scraper."""
    with tempfile.TemporaryDirectory() as directory:
        stack = all_observers(directory) if observed else None
        loop = AgentLoop(
            ScriptedClient(script(TURNS - 1), latency_s=0.001),
            model="m1",
            tools=[lookup],
            observers=stack.observers if stack else [],
            detectors=None if stack else [],
        )
        stop = threading.Event()
        scrapes = [0]
        server = None
        if stack is not None:
            server = start_metrics_server(0, registry=stack.observers[2])  # type: ignore[arg-type]
            url = server.url

            def scrape() -> None:
                while not stop.wait(0.1):
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        resp.read()
                    scrapes[0] += 1

            thread = threading.Thread(target=scrape, daemon=True)
            thread.start()
        try:
            latencies = await asyncio.gather(*(_timed(loop, i) for i in range(runs)))
        finally:
            stop.set()
            if server is not None:
                thread.join(5)
                server.close()
            if stack is not None:
                stack.close()
    return list(latencies)


class Silent:
    """A 127.0.0.1 listener that accepts and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                self.conns.append(self.sock.accept()[0])
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)
        for c in self.conns:
            c.close()
        self.sock.close()


async def outage(endpoint: str | None, runs: int) -> float:
    """Mean seconds per sequential run through configure() with the given OTLP endpoint."""
    if endpoint is None:
        t = configure(traces_exporter="none", metrics_exporter="none")
    else:
        t = configure(
            traces_exporter="otlp",
            metrics_exporter="otlp",
            endpoint=endpoint,
            export_timeout_s=10.0,
            metric_export_interval_s=0.2,
            max_queue_size=512,
        )
        t.force_flush(timeout_s=0.01)  # start an export that fails or hangs
    loop = AgentLoop(
        ScriptedClient(script(TURNS - 1), latency_s=0.001),
        model="m1",
        tools=[lookup],
        observers=t.observers,
    )
    times = [await _timed(loop, i) for i in range(runs)]
    t.shutdown(timeout_s=0.5)
    return statistics.mean(times)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark, print the tables, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="200 runs, fewer outage runs")
    args = parser.parse_args(argv)
    runs, outage_runs = (200, 100) if args.quick else (1_000, 400)

    bare = asyncio.run(load(runs, False))
    full = asyncio.run(load(runs, True))
    rows: list[dict[str, Any]] = [
        {
            "name": f"{runs} concurrent runs, no observers",
            "p50_ms": _pct(bare, 0.5) * 1e3,
            "p99_ms": _pct(bare, 0.99) * 1e3,
        },
        {
            "name": f"{runs} concurrent runs, all observers + scrape/100 ms",
            "p50_ms": _pct(full, 0.5) * 1e3,
            "p99_ms": _pct(full, 0.99) * 1e3,
            "added_p99_ms": (_pct(full, 0.99) - _pct(bare, 0.99)) * 1e3,
        },
    ]
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()
    silent = Silent()
    try:
        none = asyncio.run(outage(None, outage_runs))
        refused = asyncio.run(outage(f"http://127.0.0.1:{closed}", outage_runs))
        hung = asyncio.run(outage(f"http://127.0.0.1:{silent.port}", outage_runs))
    finally:
        silent.close()
    for name, value in (
        ("no exporter", none),
        ("collector refusing connections", refused),
        ("collector accepting, never answering", hung),
    ):
        rows.append(
            {
                "name": f"outage: {TURNS}-turn run, {name}",
                "mean_ms": value * 1e3,
                "ratio": value / none,
            }
        )

    table = []
    for r in rows:
        if "p99_ms" in r:
            extra = f"+{r['added_p99_ms']:.1f} ms p99" if "added_p99_ms" in r else ""
            table.append(
                [r["name"], f"p50 {r['p50_ms']:.1f} ms", f"p99 {r['p99_ms']:.1f} ms", extra]
            )
        else:
            table.append([r["name"], f"mean {r['mean_ms']:.2f} ms", "", f"{r['ratio']:.2f}×"])
    print(f"Load and outage — Python {sys.version.split()[0]}; model latency 1 ms")
    print_table(["case", "latency", "", "vs bare / no exporter"], table)
    return rows


if __name__ == "__main__":
    main()
