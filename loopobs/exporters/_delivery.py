"""Span accounting for :func:`~loopobs.exporters.setup.configure`: ended, exported, failed.

Imported only when the SDK is installed (its classes subclass the SDK's).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

__all__ = ["CountingSpanExporter", "EndedSpans"]


class EndedSpans(SpanProcessor):
    """Counts the sampled spans that ended: what every exporter should receive."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        """Nothing to do at span start."""

    def on_end(self, span: ReadableSpan) -> None:
        """Count ``span`` if it is sampled (the batch processor drops the others too)."""
        if span.context is not None and span.context.trace_flags.sampled:
            with self._lock:
                self.count += 1


class CountingSpanExporter(SpanExporter):
    """Forwards to ``inner`` and counts the spans it accepted and those it refused.

    An exception from ``inner`` counts as a refusal and is raised again (the
    batch processor logs it).
    """

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export through ``inner``; count the batch as exported or failed."""
        try:
            result = self.inner.export(spans)
        except Exception:
            with self._lock:
                self.failed += len(spans)
            raise
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        """Shut ``inner`` down."""
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush ``inner``."""
        return self.inner.force_flush(timeout_millis)
