"""The loopobs pytest plugin: fixtures, loaded by pytest through the ``pytest11`` entry point.

- ``recorder``: a fresh :class:`~loopobs.testing.RecordingObserver`;
- ``tracer_provider`` / ``span_exporter``: an SDK ``TracerProvider`` with a
  ``SimpleSpanProcessor`` into an ``InMemorySpanExporter``;
- ``meter_provider`` / ``metric_reader``: an SDK ``MeterProvider`` with an
  ``InMemoryMetricReader``.

The providers are passed explicitly to observers; none is ever set as the global one. The
OpenTelemetry SDK is imported only when an OTel fixture is used, so the plugin loads in
environments without ``loopobs[otel]``. This is the only loopobs module that imports pytest;
the recording and checking helpers are in :mod:`loopobs.testing`, usable without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopobs.testing import RecordingObserver

__all__ = ["meter_provider", "metric_reader", "recorder", "span_exporter", "tracer_provider"]


@pytest.fixture
def recorder() -> RecordingObserver:
    """A fresh :class:`~loopobs.testing.RecordingObserver`."""
    # Imported here: loopobs.testing imports this module when pytest loaded it first.
    from loopobs.testing import RecordingObserver

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
