"""In-memory OpenTelemetry providers (traces, metrics, logs) for one test, never global."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs.contract.observer import LoopObserver
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.redaction import Redactor
from loopobs.exporters.tracing import TracingObserver
from loopobs.testing import metric_points


def exported_metrics(reader: InMemoryMetricReader) -> dict[str, Any]:
    """Collect now, and return every exported metric (its data, unit, …) by name."""
    data = reader.get_metrics_data()
    if data is None:
        return {}
    return {
        metric.name: metric
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for metric in sm.metrics
    }


@dataclass
class Capture:
    """The three providers and what they exported."""

    spans_out: InMemorySpanExporter = field(default_factory=InMemorySpanExporter)
    logs_out: InMemoryLogRecordExporter = field(default_factory=InMemoryLogRecordExporter)
    reader: InMemoryMetricReader = field(default_factory=InMemoryMetricReader)

    def __post_init__(self) -> None:
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans_out))
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs_out))
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def observers(
        self,
        *,
        capture_content: str | bool = False,
        latest: bool = False,
        redact: Redactor | None = None,
    ) -> list[LoopObserver]:
        """A tracing and a metrics observer on these providers."""
        return [
            TracingObserver(
                self.tracer_provider,
                capture_content=capture_content,
                logger_provider=self.logger_provider,
                redact=redact,
                latest_semconv=latest,
            ),
            MetricsObserver(self.meter_provider, latest_semconv=latest),
        ]

    def spans(self) -> dict[str, ReadableSpan]:
        """Finished spans by name (the last of a name wins)."""
        return {s.name: s for s in self.spans_out.get_finished_spans()}

    def all_spans(self) -> tuple[ReadableSpan, ...]:
        return self.spans_out.get_finished_spans()

    def logs(self, event_name: str | None = None) -> list[ReadableLogRecord]:
        """Exported log records (of ``event_name`` when given)."""
        return [
            r
            for r in self.logs_out.get_finished_logs()
            if event_name is None or r.log_record.event_name == event_name
        ]

    def metrics(self) -> dict[str, list[Any]]:
        """Metric name → its data points."""
        return metric_points(self.reader)

    def metric_kinds(self) -> dict[str, Any]:
        """Metric name → the exported metric (for its data type)."""
        return exported_metrics(self.reader)

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.logger_provider.shutdown()
        self.meter_provider.shutdown()
