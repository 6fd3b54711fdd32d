"""Exporter outage: OTLP to a closed port and to a listener that accepts and never answers.

Runs complete and never wait on the exporter; the span queue stays at its bound
(``max_queue_size``), spans beyond it are dropped and counted (the SDK logs one
"Queue full, dropping span" warning per dropped span, which we count); and
``shutdown()`` returns within its timeout. The SDK reports drops to its
processor metrics (``drop_items``; exported as ``otel.sdk.processor.span.processed``
with ``error.type=queue_full`` when ``OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED``
is set) and logs the first "Queue full" warning; the tests count ``drop_items``.
The latency figure (outage vs no exporter) is in ``bench/bench_load.py``.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from loopobs import AgentLoop
from loopobs.exporters import configure
from loopobs.exporters.setup import Telemetry
from loopobs.llm import ScriptedClient
from tests._reliability import lookup, tool_script

QUEUE = 64
TOOL_TURNS = 3
SPANS_PER_RUN = 1 + 2 * (TOOL_TURNS + 1) + TOOL_TURNS  # run, turns, chats, tools
SDK_LOGGER = "opentelemetry.sdk._shared_internal"


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


class Counts:
    """Stands in for the SDK's processor metrics: counts dropped and submitted spans."""

    def __init__(self) -> None:
        self.dropped = 0
        self.submitted = 0

    def register_queue_size(self, get_queue_size: Any) -> None:
        """Unused here."""

    def drop_items(self, count: int, error_type: str = "queue_full") -> None:
        """The processor dropped ``count`` spans."""
        self.dropped += count

    def finish_items(self, count: int) -> None:
        """The processor handed ``count`` spans to the exporter."""
        self.submitted += count


def _processor(t: Telemetry) -> Any:
    """The BatchSpanProcessor's internal batch processor (SDK private; for the bound check)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    processors = t.tracer_provider._active_span_processor._span_processors  # type: ignore[attr-defined]
    (batch,) = [p for p in processors if isinstance(p, BatchSpanProcessor)]
    return batch._batch_processor


def _count_drops(t: Telemetry) -> Counts:
    counts = Counts()
    _processor(t)._metrics = counts
    return counts


async def _runs(t: Telemetry, n: int) -> None:
    loop = AgentLoop(ScriptedClient(tool_script(TOOL_TURNS)), model="m1", tools=[lookup],
                     observers=t.observers)
    for i in range(n):
        result = await loop.run(f"q{i}")
        assert result.ok
        assert result.turns == TOOL_TURNS + 1


def _bounded_shutdown(t: Telemetry, timeout_s: float) -> None:
    start = time.monotonic()
    t.shutdown(timeout_s=timeout_s)
    assert time.monotonic() - start < timeout_s + 2.0


@pytest.mark.slow
async def test_silent_collector_never_blocks_runs_and_the_queue_stays_bounded(
        silent: SilentListener, caplog: pytest.LogCaptureFixture) -> None:
    """While the exporter hangs on a silent collector, 40 runs complete; drops are counted."""
    t = configure(traces_exporter="otlp", metrics_exporter="otlp", protocol="http/protobuf",
                  endpoint=f"http://127.0.0.1:{silent.port}", export_timeout_s=30.0,
                  max_queue_size=QUEUE)
    await _runs(t, 1)
    # Push the first batch to the collector; the export now hangs for up to 30 s.
    t.force_flush(timeout_s=0.05)
    assert silent.accepted.wait(10), "the exporter never connected"
    counts = _count_drops(t)
    runs = 40
    with caplog.at_level(logging.WARNING, logger=SDK_LOGGER):
        await _runs(t, runs)
    # The runs finished while the only export is still stuck on the silent socket.
    assert all(conn.fileno() != -1 for conn in silent.conns)
    queue = _processor(t)._queue
    assert len(queue) == QUEUE
    assert queue.maxlen == QUEUE
    # Every span the runs produced is in the queue or counted as dropped; none was exported.
    assert counts.submitted == 0
    assert counts.dropped == runs * SPANS_PER_RUN - QUEUE
    # The SDK logs the drop, once (its DuplicateFilter): no flood.
    full = [r for r in caplog.records if "Queue full" in r.getMessage()]
    assert len(full) == 1
    assert t.tracing.open_spans() == 0
    assert t.tracing.open_runs == 0
    _bounded_shutdown(t, 1.0)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
async def test_refused_collector_never_blocks_runs(
        protocol: str, caplog: pytest.LogCaptureFixture) -> None:
    """Connection refused: runs complete, the queue never exceeds its bound, shutdown is bounded."""
    t = configure(traces_exporter="otlp", metrics_exporter="otlp", protocol=protocol,
                  endpoint=f"http://127.0.0.1:{closed_port()}", export_timeout_s=30.0,
                  max_queue_size=QUEUE)
    counts = _count_drops(t)
    runs = 30
    with caplog.at_level(logging.WARNING, logger=SDK_LOGGER):
        await _runs(t, runs)
    queue = _processor(t)._queue
    assert len(queue) <= QUEUE
    # Every span is accounted for: queued, handed to the (failing) exporter, or dropped.
    assert counts.dropped + counts.submitted + len(queue) == runs * SPANS_PER_RUN
    assert counts.dropped > 0
    assert t.tracing.open_spans() == 0
    _bounded_shutdown(t, 1.0)


@pytest.mark.slow
async def test_metrics_exporter_down_keeps_bounded_state(silent: SilentListener) -> None:
    """Metrics aggregate in place: 200 more runs add no series while the push hangs."""
    t = configure(traces_exporter="none", metrics_exporter="otlp", protocol="http/protobuf",
                  endpoint=f"http://127.0.0.1:{silent.port}", export_timeout_s=30.0,
                  metric_export_interval_s=0.05)
    await _runs(t, 5)
    assert silent.accepted.wait(10), "the metric exporter never connected"
    storage = t.meter_provider._measurement_consumer  # type: ignore[attr-defined]
    before = _series(storage)
    await _runs(t, 200)
    assert _series(storage) == before
    assert t.metrics.open_runs == 0
    _bounded_shutdown(t, 1.0)


def _series(consumer: Any) -> int:
    """Attribute sets held by every view storage of the SDK's measurement consumer."""
    total = 0
    for reader_storage in consumer._reader_storages.values():
        for storages in reader_storage._instrument_view_instrument_matches.values():
            for match in storages:
                total += len(match._attributes_aggregation)
    return total


def test_configure_accepts_a_queue_smaller_than_the_default_batch() -> None:
    """max_queue_size below 512 used to raise (the SDK's default batch exceeded the queue)."""
    t = configure(traces_exporter="otlp", metrics_exporter="none",
                  endpoint=f"http://127.0.0.1:{closed_port()}", max_queue_size=8)
    processor = _processor(t)
    assert processor._queue.maxlen == 8
    assert processor._max_export_batch_size == 8
    _bounded_shutdown(t, 1.0)
