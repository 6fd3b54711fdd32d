"""The OpenTelemetry SDK internals that tests read, named in one place.

The SDK has no public way to read back how a provider, a span processor, a metric reader
or an OTLP exporter was configured (timeouts, queue sizes, intervals, headers, endpoint),
and that configuration is what ``configure()`` promises. The tests that check it read the
SDK's private attributes through these functions only, so an SDK release that renames one
breaks one function here, not the tests.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from opentelemetry.sdk.trace.export import BatchSpanProcessor


class BatchSettings(NamedTuple):
    """What a ``BatchSpanProcessor`` was built with."""

    max_queue_size: int
    max_export_batch_size: int
    schedule_delay_ms: float
    export_timeout_ms: float


def span_processors(provider: Any) -> tuple[Any, ...]:
    """The span processors added to ``provider`` (an SDK ``TracerProvider``), in order."""
    return tuple(provider._active_span_processor._span_processors)


def batch_settings(processor: BatchSpanProcessor) -> BatchSettings:
    """The queue, batch, delay and timeout ``processor`` was built with."""
    batch = processor._batch_processor
    return BatchSettings(
        batch._max_queue_size,
        batch._max_export_batch_size,
        batch._schedule_delay_millis,
        batch._export_timeout_millis,
    )


def metric_readers(provider: Any) -> tuple[Any, ...]:
    """The metric readers of ``provider`` (an SDK ``MeterProvider``).

    1.45 keeps them on the provider, 1.42 (the lowest release admitted, run by
    ``make test-adapters-min``) in its configuration.
    """
    readers = getattr(provider, "_metric_readers", None)
    if readers is None:
        readers = provider._sdk_config.metric_readers
    return tuple(readers)


def _transport(exporter: Any) -> Any:
    """Where an OTLP/HTTP exporter keeps its timeout and headers: its client (1.45) or itself."""
    return getattr(exporter, "_client", exporter)


def reader_interval_ms(reader: Any) -> float:
    """A ``PeriodicExportingMetricReader``'s export interval."""
    return float(reader._export_interval_millis)


def reader_timeout_ms(reader: Any) -> float:
    """A ``PeriodicExportingMetricReader``'s export timeout."""
    return float(reader._export_timeout_millis)


def otlp_timeout_s(exporter: Any) -> float:
    """An OTLP/HTTP exporter's request timeout."""
    return float(_transport(exporter)._timeout)


def otlp_headers(exporter: Any) -> Any:
    """The headers an OTLP/HTTP exporter sends."""
    return _transport(exporter)._headers


def otlp_endpoint(exporter: Any) -> str:
    """The URL an OTLP/HTTP exporter posts to."""
    return str(exporter._endpoint)
