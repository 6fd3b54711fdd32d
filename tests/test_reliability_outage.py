"""Exporter outage: OTLP to a closed port and to a listener that accepts and never answers.

Runs complete and never wait on the exporter, and ``shutdown()`` returns
(``False`` when an export is stuck). The span queue's bound is checked with an
exporter that blocks until released: the spans it receives after the stuck batch
are exactly the queue's ``max_queue_size``, the rest were dropped, and
:meth:`Telemetry.span_delivery` accounts for every span. The tests read only
public interfaces (the handle's delivery counts, a metric reader, an exporter of
their own) and never the SDK's internals or its log messages; every wait has a
deadline that is a hang guard, never a timing. The latency figure (outage vs no
exporter) is in ``bench/bench_load.py``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator, Sequence

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from loopobs import AgentLoop
from loopobs.exporters import configure
from loopobs.exporters.setup import Telemetry
from loopobs.llm import ScriptedClient
from loopobs.testing import metric_points
from tests._reliability import lookup, tool_script

QUEUE = 64
TOOL_TURNS = 3
SPANS_PER_RUN = 1 + 2 * (TOOL_TURNS + 1) + TOOL_TURNS  # run, turns, chats, tools
HANG_GUARD_S = 30.0


class SilentListener:
    """Accepts TCP connections on 127.0.0.1 and never reads or answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.accepted = threading.Event()
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.conns:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentListener]:
    listener = SilentListener()
    yield listener
    listener.close()


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (connections are refused)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


class GatedExporter(SpanExporter):
    """Records each batch; while ``release`` is unset, its exports block (up to the hang guard)."""

    def __init__(self, *, blocked: bool) -> None:
        self.release = threading.Event()
        if not blocked:
            self.release.set()
        self.entered = threading.Event()
        self.batches: list[int] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.entered.set()
        self.release.wait(HANG_GUARD_S)
        with self._changed:
            self.batches.append(len(spans))
            self._changed.notify_all()
        return SpanExportResult.SUCCESS

    def wait_for(self, spans: int) -> None:
        """Until ``spans`` spans were exported in all (a hang guard, not a timing)."""
        with self._changed:
            assert self._changed.wait_for(lambda: sum(self.batches) >= spans, HANG_GUARD_S), (
                f"only {sum(self.batches)} of {spans} spans were exported"
            )

    def shutdown(self) -> None:
        self.release.set()


async def _runs(t: Telemetry, n: int) -> None:
    loop = AgentLoop(
        ScriptedClient(tool_script(TOOL_TURNS)), model="m1", tools=[lookup], observers=t.observers
    )
    for i in range(n):
        result = await loop.run(f"q{i}")
        assert result.ok
        assert result.turns == TOOL_TURNS + 1


def _bounded_shutdown(t: Telemetry, timeout_s: float) -> bool:
    """``t.shutdown(timeout_s)``, which must return (the guard is far past its bound)."""
    returned: list[bool] = []
    thread = threading.Thread(
        target=lambda: returned.append(t.shutdown(timeout_s=timeout_s)), daemon=True
    )
    thread.start()
    thread.join(HANG_GUARD_S)
    assert not thread.is_alive(), "shutdown() never returned"
    return returned[0]


@pytest.mark.slow
async def test_silent_collector_never_blocks_runs_and_the_queue_stays_bounded(
    silent: SilentListener,
) -> None:
    """While the exporter hangs on a silent collector, 40 runs complete and nothing waits."""
    t = configure(
        traces_exporter="otlp",
        metrics_exporter="otlp",
        protocol="http/protobuf",
        endpoint=f"http://127.0.0.1:{silent.port}",
        export_timeout_s=30.0,
        max_queue_size=QUEUE,
    )
    await _runs(t, 1)
    # Push the first batch to the collector; the export now hangs for up to 30 s.
    t.force_flush(timeout_s=0.05)
    assert silent.accepted.wait(HANG_GUARD_S), "the exporter never connected"
    runs = 40
    await _runs(t, runs)
    # The runs finished while the only export is still stuck on the silent socket.
    assert all(conn.fileno() != -1 for conn in silent.conns)
    delivery = t.span_delivery()
    assert delivery.ended == (runs + 1) * SPANS_PER_RUN
    assert (delivery.exported, delivery.failed) == (0, 0)
    assert delivery.dropped == delivery.ended  # queued or dropped: none is claimed delivered
    assert t.tracing.open_spans() == 0
    assert t.tracing.open_runs == 0
    assert _bounded_shutdown(t, 1.0) is False  # the stuck export could not finish


@pytest.mark.slow
async def test_a_stuck_exporter_keeps_the_queue_at_its_bound() -> None:
    """Spans beyond max_queue_size are dropped, never held: after the stuck batch, exactly
    the queue's worth reaches the exporter once it is free again."""
    gate = GatedExporter(blocked=True)
    t = configure(
        traces_exporter="none", metrics_exporter="none", span_exporters=[gate], max_queue_size=QUEUE
    )
    await _runs(t, 1)
    t.flush_spans(timeout_s=0.05)  # hands the queued spans to the gate, which holds them
    assert gate.entered.wait(HANG_GUARD_S)
    runs = 40
    await _runs(t, runs)  # the gate is still closed: every run's spans queue or drop
    gate.release.set()
    gate.wait_for(1)  # the stuck batch is through
    assert t.flush_spans(timeout_s=HANG_GUARD_S)
    first, *after = gate.batches
    assert sum(after) == QUEUE  # what the queue held while the exporter was stuck
    delivery = t.span_delivery()
    assert delivery.ended == (runs + 1) * SPANS_PER_RUN
    assert delivery.exported == first + QUEUE
    assert delivery.dropped == delivery.ended - delivery.exported
    assert t.tracing.open_spans() == 0
    assert _bounded_shutdown(t, 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_refused_collector_never_blocks_runs(protocol: str) -> None:
    """Connection refused: runs complete, nothing is claimed delivered, shutdown returns."""
    t = configure(
        traces_exporter="otlp",
        metrics_exporter="otlp",
        protocol=protocol,
        endpoint=f"http://127.0.0.1:{closed_port()}",
        export_timeout_s=30.0,
        max_queue_size=QUEUE,
    )
    runs = 30
    await _runs(t, runs)
    delivery = t.span_delivery()
    assert delivery.ended == runs * SPANS_PER_RUN
    assert delivery.exported == 0
    assert delivery.failed + delivery.dropped == delivery.ended
    assert t.tracing.open_spans() == 0
    _bounded_shutdown(t, 1.0)


def _series(reader: InMemoryMetricReader) -> int:
    """Data points (one per metric and attribute set) the reader collects now."""
    return sum(len(points) for points in metric_points(reader).values())


@pytest.mark.slow
async def test_metrics_exporter_down_keeps_bounded_state(silent: SilentListener) -> None:
    """Metrics aggregate in place: 200 more runs add no series while the push hangs."""
    reader = InMemoryMetricReader()
    t = configure(
        traces_exporter="none",
        metrics_exporter="otlp",
        protocol="http/protobuf",
        endpoint=f"http://127.0.0.1:{silent.port}",
        export_timeout_s=30.0,
        metric_export_interval_s=0.05,
        metric_readers=[reader],
    )
    await _runs(t, 5)
    assert silent.accepted.wait(HANG_GUARD_S), "the metric exporter never connected"
    before = _series(reader)
    assert before > 0
    await _runs(t, 200)
    assert _series(reader) == before
    assert t.metrics.open_runs == 0
    _bounded_shutdown(t, 1.0)


def test_configure_accepts_a_queue_smaller_than_the_default_batch() -> None:
    """max_queue_size below 512 used to raise (the SDK's default batch exceeded the queue);
    now the batches shrink to fit the queue."""
    gate = GatedExporter(blocked=False)
    t = configure(
        traces_exporter="none", metrics_exporter="none", span_exporters=[gate], max_queue_size=8
    )
    asyncio.run(_runs(t, 1))
    assert t.flush_spans(timeout_s=HANG_GUARD_S)
    assert sum(gate.batches) <= SPANS_PER_RUN
    assert max(gate.batches) <= 8
    assert _bounded_shutdown(t, 5.0)
