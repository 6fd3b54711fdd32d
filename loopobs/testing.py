"""Test helpers, and a pytest plugin (registered through the ``pytest11`` entry point).

- :class:`RecordingObserver` records every ``(hook, context)`` in order.
- Fixtures ``recorder``, ``tracer_provider`` / ``span_exporter`` (an SDK
  ``TracerProvider`` with a ``SimpleSpanProcessor`` into an
  ``InMemorySpanExporter``), and ``meter_provider`` / ``metric_reader`` (an SDK
  ``MeterProvider`` with an ``InMemoryMetricReader``). The providers are passed
  explicitly to observers; none is ever set as the global one.

The OpenTelemetry SDK is imported only when an OTel fixture is used, so this
plugin loads in environments without ``loopobs[otel]``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from uuid import UUID

import pytest

from loopobs.core.events import HOOKS, EventContext, HookName
from loopobs.core.observer import LoopObserver

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = ["RecordingObserver", "metric_points", "spans_by_name"]


class RecordingObserver(LoopObserver):
    """Records every event it receives, in order; thread-safe.

    ``events`` is the list of ``(hook, context)`` pairs. Helpers filter by hook
    and by run.
    """

    def __init__(self) -> None:
        self.events: list[tuple[HookName, EventContext]] = []
        self._lock = threading.Lock()

    def _record(self, ctx: EventContext) -> None:
        with self._lock:
            self.events.append((ctx.hook, ctx))

    def reset(self) -> None:
        """Forget everything recorded."""
        with self._lock:
            self.events.clear()

    def hooks(self, run_id: UUID | None = None) -> list[HookName]:
        """The hook names recorded, in order (of one run when ``run_id`` is given)."""
        return [h for h, c in self.events if run_id is None or c.run_id == run_id]

    def of(self, hook: HookName, run_id: UUID | None = None) -> list[Any]:
        """The contexts recorded for ``hook`` (of one run when ``run_id`` is given)."""
        return [c for h, c in self.events if h == hook and (run_id is None or c.run_id == run_id)]

    def for_run(self, run_id: UUID) -> list[tuple[HookName, EventContext]]:
        """The ``(hook, context)`` pairs of one run, in order."""
        return [(h, c) for h, c in self.events if c.run_id == run_id]

    def run_ids(self) -> list[UUID]:
        """The run ids seen, in order of first appearance."""
        seen: dict[UUID, None] = {}
        for _, c in self.events:
            seen.setdefault(c.run_id, None)
        return list(seen)

    on_run_start = on_run_end = on_turn_start = on_turn_end = _record
    on_stream_start = on_stream_success = on_stream_failure = on_response = _record
    on_text_delta = on_thinking_delta = _record
    on_tool_call_received = on_tool_pre = on_tool_post = _record
    on_compaction = on_fallback = on_model_switched = _record
    on_loop_detected = on_convergence_detected = on_suspended = on_sleep = _record


assert {h for h in HOOKS if getattr(RecordingObserver, h) is getattr(LoopObserver, h)} == set()


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    """Finished spans grouped by name."""
    out: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Collect now, and return the data points of every metric by metric name."""
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


@pytest.fixture
def recorder() -> RecordingObserver:
    """A fresh :class:`RecordingObserver`."""
    return RecordingObserver()


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    """An in-memory span exporter (pair it with ``tracer_provider``)."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """An SDK tracer provider exporting synchronously into ``span_exporter``; never global."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """An in-memory metric reader (pair it with ``meter_provider``)."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    return InMemoryMetricReader()


@pytest.fixture
def meter_provider(metric_reader: InMemoryMetricReader) -> Iterator[MeterProvider]:
    """An SDK meter provider read by ``metric_reader``; never global."""
    from opentelemetry.sdk.metrics import MeterProvider

    provider = MeterProvider(metric_readers=[metric_reader])
    yield provider
    provider.shutdown()
