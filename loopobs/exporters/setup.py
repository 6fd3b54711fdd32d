"""``loopobs.configure()``: one call that builds OTel providers and the observers that use them.

It honours the standard variables (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_PROTOCOL`` and the per-signal variants,
``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``_HEADERS`` / ``_TIMEOUT`` (read by the
exporters themselves), ``OTEL_TRACES_SAMPLER`` / ``_ARG`` (read by the SDK's
``TracerProvider``), ``OTEL_SDK_DISABLED``); explicit arguments win. It builds
its own providers and installs them globally only with ``set_global=True``.

    telemetry = loopobs.configure(service_name="support-bot")
    loop = AgentLoop(client, observers=[*telemetry.observers])
    ...
    telemetry.shutdown(timeout_s=5)   # returns within 5 s even if the collector is down

Needs ``loopobs[otel]`` (the SDK and the OTLP exporters).
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import _logs as otel_logs
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider as ApiMeterProvider

from loopobs.core.observer import LoopObserver
from loopobs.exporters.content import ContentMode
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.redaction import Redactor
from loopobs.exporters.tracing import TracingObserver

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler

__all__ = ["Telemetry", "configure"]

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "http/protobuf"
"""The specification's default (Python's auto-instrumentation defaults to grpc instead)."""


@dataclass(eq=False)
class Telemetry:
    """What :func:`configure` built: providers, the observers using them, and shutdown.

    Attach :attr:`observers` to a loop (or an ``ObserverSet``). The providers
    belong to this handle: :meth:`shutdown` flushes and closes them.
    """

    tracing: TracingObserver
    metrics: MetricsObserver
    tracer_provider: trace.TracerProvider
    meter_provider: ApiMeterProvider
    enabled: bool = True
    exporters: tuple[Any, ...] = ()
    """The span and metric exporters configure() built (stopped if shutdown runs late)."""
    _closed: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def observers(self) -> tuple[LoopObserver, ...]:
        """The tracing and metrics observers, in that order."""
        return (self.tracing, self.metrics)

    def force_flush(self, timeout_s: float = 5.0) -> bool:
        """Export what is buffered; True if it finished within ``timeout_s``."""
        return _bounded(self._flush, timeout_s)

    def shutdown(self, timeout_s: float = 5.0) -> bool:
        """End open spans, flush and close both providers, within ``timeout_s``.

        Returns True if everything finished in time. When the collector is down
        or hangs, the flush runs on a daemon thread that is abandoned at the
        deadline, so this never blocks longer than the bound; the exporters are
        then shut down, which stops their retries (an export already on the wire
        ends at its own timeout). Calling it again does nothing and returns True.
        """
        with self._lock:
            if self._closed:
                return True
            self._closed = True
        atexit.unregister(self._at_exit)
        self.tracing.reset()
        self.metrics.reset()
        if _bounded(lambda: self._close(timeout_s), timeout_s):
            return True
        for exporter in self.exporters:
            # Sets the exporter's shutdown flag and closes its transport: quick, and it
            # ends the retry loop that would otherwise outlive this handle.
            _bounded(exporter.shutdown, 0.5)
        return False

    def _flush(self) -> None:
        for provider in (self.tracer_provider, self.meter_provider):
            flush = getattr(provider, "force_flush", None)
            if flush is not None:
                flush()

    def _close(self, timeout_s: float) -> None:
        shutdown = getattr(self.tracer_provider, "shutdown", None)
        if shutdown is not None:
            shutdown()
        shutdown = getattr(self.meter_provider, "shutdown", None)
        if shutdown is not None:
            shutdown(timeout_millis=timeout_s * 1000)

    def _at_exit(self) -> None:
        self.shutdown(timeout_s=5.0)


def _bounded(work: Any, timeout_s: float) -> bool:
    done = threading.Event()

    def run() -> None:
        try:
            work()
        finally:
            done.set()

    threading.Thread(target=run, name="loopobs-otel-shutdown", daemon=True).start()
    return done.wait(timeout_s)


def _choice(name: str, value: str | None, env: Sequence[str], default: str,
            allowed: Sequence[str]) -> list[str]:
    raw = value
    if raw is None:
        raw = next((os.environ[e] for e in env if os.environ.get(e, "").strip()), default)
    chosen = [v.strip().lower() for v in raw.split(",") if v.strip()] or [default]
    bad = [v for v in chosen if v not in allowed]
    if bad:
        raise ValueError(f"{name}: unsupported value(s) {bad}; use one of {list(allowed)}")
    if "none" in chosen:
        return []
    return chosen


def _signal_url(endpoint: str, signal: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith(f"/v1/{signal}") else f"{base}/v1/{signal}"


def _span_exporter(kind: str, protocol: str, endpoint: str | None,
                   headers: Mapping[str, str] | None, timeout_s: float) -> SpanExporter:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(endpoint=endpoint, headers=dict(headers) if headers else None,
                                timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=_signal_url(endpoint, "traces") if endpoint else None,
        headers=headers, timeout=timeout_s)


def _metric_exporter(kind: str, protocol: str, endpoint: str | None,
                     headers: Mapping[str, str] | None, timeout_s: float) -> MetricExporter:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(endpoint=endpoint, headers=dict(headers) if headers else None,
                                  timeout=timeout_s)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(
        endpoint=_signal_url(endpoint, "metrics") if endpoint else None,
        headers=headers, timeout=timeout_s)


def _disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def configure(
    service_name: str | None = None,
    *,
    resource_attributes: Mapping[str, str | int | float | bool] | None = None,
    traces_exporter: str | None = None,
    metrics_exporter: str | None = None,
    protocol: str | None = None,
    endpoint: str | None = None,
    headers: Mapping[str, str] | None = None,
    sampler: Sampler | None = None,
    capture_content: ContentMode | bool | str | None = None,
    turn_spans: bool = True,
    propagate_context: bool = True,
    set_global: bool = False,
    export_timeout_s: float = 10.0,
    metric_export_interval_s: float = 60.0,
    max_queue_size: int = 2048,
    span_exporters: Sequence[SpanExporter] = (),
    metric_readers: Sequence[MetricReader] = (),
    redact: Redactor | None = None,
    logger_provider: otel_logs.LoggerProvider | None = None,
) -> Telemetry:
    """Build tracer and meter providers, their exporters, and observers that use them.

    Args:
        service_name: ``service.name``; else ``OTEL_SERVICE_NAME``, else the SDK's default.
        resource_attributes: merged over ``OTEL_RESOURCE_ATTRIBUTES``.
        traces_exporter: ``otlp``, ``console`` or ``none`` (comma-separated for
            several); else ``OTEL_TRACES_EXPORTER``; default ``otlp``.
        metrics_exporter: the same for metrics; else ``OTEL_METRICS_EXPORTER``.
        protocol: ``http/protobuf`` or ``grpc``; else the per-signal or general
            ``OTEL_EXPORTER_OTLP_*PROTOCOL``; default ``http/protobuf``.
        endpoint: OTLP base URL (``/v1/traces`` is appended for HTTP); else the
            exporters read ``OTEL_EXPORTER_OTLP_*ENDPOINT``.
        headers: OTLP headers; else ``OTEL_EXPORTER_OTLP_*HEADERS``.
        sampler: else the SDK reads ``OTEL_TRACES_SAMPLER`` / ``_ARG``.
        capture_content: content capture of the :class:`TracingObserver`.
        turn_spans: whether the :class:`TracingObserver` opens ``turn`` spans.
        propagate_context: whether its spans become current while they are open.
        set_global: also install the providers as OpenTelemetry's global ones.
        export_timeout_s: per-export timeout of the OTLP exporters.
        metric_export_interval_s: how often metrics are pushed.
        max_queue_size: the span queue bound; spans beyond it are dropped, never blocking.
        span_exporters: extra span destinations (e.g. an in-memory exporter in tests).
        metric_readers: extra metric readers (e.g. an in-memory reader in tests).
        redact: applied to captured content before export (see
            :func:`~loopobs.exporters.redaction.redact_common_secrets`).
        logger_provider: where the :class:`TracingObserver`'s log-record events go
            (operation exceptions, inference details); else the global provider.

    With ``OTEL_SDK_DISABLED=true`` no SDK object is built: the observers get
    no-op providers and cost next to nothing.

    Raises:
        ValueError: an exporter or protocol value is not supported.
    """
    if _disabled():
        tp_noop = trace.NoOpTracerProvider()
        mp_noop = metrics.NoOpMeterProvider()
        return Telemetry(TracingObserver(tp_noop, capture_content=capture_content,
                                         turn_spans=turn_spans,
                                         propagate_context=propagate_context,
                                         logger_provider=otel_logs.NoOpLoggerProvider()),
                         MetricsObserver(mp_noop), tp_noop, mp_noop, enabled=False)

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    trace_kinds = _choice("traces_exporter", traces_exporter, ["OTEL_TRACES_EXPORTER"], "otlp",
                          EXPORTERS)
    metric_kinds = _choice("metrics_exporter", metrics_exporter, ["OTEL_METRICS_EXPORTER"],
                           "otlp", EXPORTERS)
    trace_protocol = _choice(
        "protocol", protocol,
        ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
        DEFAULT_PROTOCOL, PROTOCOLS)[0]
    metric_protocol = _choice(
        "protocol", protocol,
        ["OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
        DEFAULT_PROTOCOL, PROTOCOLS)[0]

    attributes: dict[str, Any] = dict(resource_attributes or {})
    if service_name is not None:
        attributes[SERVICE_NAME] = service_name
    resource = Resource.create(attributes)

    tracer_provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
    exporters = [_span_exporter(k, trace_protocol, endpoint, headers, export_timeout_s)
                 for k in trace_kinds]
    for exporter in (*exporters, *span_exporters):
        # The SDK rejects a batch larger than the queue (its default batch is 512 spans).
        tracer_provider.add_span_processor(BatchSpanProcessor(
            exporter, max_queue_size=max_queue_size,
            max_export_batch_size=min(512, max_queue_size),
            export_timeout_millis=export_timeout_s * 1000))

    metric_exporters = [_metric_exporter(k, metric_protocol, endpoint, headers,
                                         export_timeout_s) for k in metric_kinds]
    readers: list[MetricReader] = [
        PeriodicExportingMetricReader(
            exporter,
            export_interval_millis=metric_export_interval_s * 1000,
            export_timeout_millis=export_timeout_s * 1000)
        for exporter in metric_exporters
    ]
    readers.extend(metric_readers)
    meter_provider = MeterProvider(resource=resource, metric_readers=readers,
                                   shutdown_on_exit=False)

    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)

    telemetry = Telemetry(
        TracingObserver(tracer_provider, capture_content=capture_content, turn_spans=turn_spans,
                        propagate_context=propagate_context, redact=redact,
                        logger_provider=logger_provider),
        MetricsObserver(meter_provider), tracer_provider, meter_provider,
        exporters=(*exporters, *metric_exporters))
    # The SDK's own exit hooks would flush without a bound; ours keeps the bound.
    atexit.register(telemetry._at_exit)
    return telemetry
