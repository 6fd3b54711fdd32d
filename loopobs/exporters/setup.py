"""``loopobs.configure()``: one call that builds OTel providers and the observers that use them.

It honours the standard variables as the SDK's own objects do (an explicit
argument wins, then the variable, then the SDK's default): ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
``OTEL_EXPORTER_OTLP_PROTOCOL`` / ``_ENDPOINT`` / ``_HEADERS`` / ``_TIMEOUT`` and
their per-signal variants, ``OTEL_BSP_MAX_QUEUE_SIZE`` / ``_MAX_EXPORT_BATCH_SIZE``
/ ``_SCHEDULE_DELAY`` / ``_EXPORT_TIMEOUT``, ``OTEL_METRIC_EXPORT_INTERVAL`` /
``_TIMEOUT``, ``OTEL_TRACES_SAMPLER`` / ``_ARG`` (read by the SDK's
``TracerProvider``) and ``OTEL_SDK_DISABLED``. Every value is checked before
anything is built, so a failed call leaves no thread behind; an error names the
argument or variable, never a header's value. It builds its own providers and
installs them globally only with ``set_global=True``. With no OTLP endpoint
configured anywhere it says so once and exports nothing.

    telemetry = loopobs.configure(service_name="support-bot")
    loop = AgentLoop(client, observers=[*telemetry.observers])
    ...
    telemetry.shutdown(timeout_s=5)   # returns within 5 s even if the collector is down

Needs ``loopobs[otel]`` (the SDK and the OTLP exporters).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import logging
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import _logs as otel_logs
from opentelemetry import metrics, trace
from opentelemetry.metrics import MeterProvider as ApiMeterProvider

from loopobs.contract.observer import LoopObserver
from loopobs.exporters._otel_env import (
    ExportSettings,
    check_endpoint,
    endpoint_configured,
    otlp_headers,
    resolve_settings,
)
from loopobs.exporters.content import ContentMode
from loopobs.exporters.event_metrics import (
    DEFAULT_MAX_LABEL_VALUES,
    attribution_limits,
    label_values_limit,
)
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.redaction import Redactor
from loopobs.exporters.tracing import TracingObserver

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricReader
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.sdk.trace.sampling import Sampler

    from loopobs.exporters._delivery import CountingSpanExporter, EndedSpans

__all__ = ["ExportSettings", "SpanDelivery", "Telemetry", "configure"]

_logger = logging.getLogger("loopobs")

EXPORTERS = ("otlp", "console", "none")
PROTOCOLS = ("grpc", "http/protobuf")
DEFAULT_PROTOCOL = "http/protobuf"
"""The specification's default (Python's auto-instrumentation defaults to grpc instead)."""


@dataclass(frozen=True, slots=True)
class SpanDelivery:
    """What became of the spans a :class:`Telemetry` handle ended, summed over its exporters.

    Every sampled span that ends should reach each of the ``destinations``
    (span exporters); ``exported`` were accepted, ``failed`` were refused or
    errored, and the rest (:attr:`dropped`) were lost in the queue or are still
    waiting in it (none after :meth:`Telemetry.shutdown` returned True).
    """

    ended: int
    destinations: int
    exported: int
    failed: int

    @property
    def expected(self) -> int:
        """Span deliveries due: ``ended`` times ``destinations``."""
        return self.ended * self.destinations

    @property
    def dropped(self) -> int:
        """Deliveries neither exported nor failed: dropped at the full queue, or pending."""
        return max(0, self.expected - self.exported - self.failed)

    @property
    def complete(self) -> bool:
        """True if every span reached every destination."""
        return self.exported == self.expected


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
    settings: ExportSettings | None = None
    """The resolved export tuning (None when the SDK is disabled)."""
    is_global: bool = False
    """True if ``set_global=True`` installed both providers as OpenTelemetry's global ones."""
    _ended: EndedSpans | None = field(default=None, repr=False)
    _counted: tuple[CountingSpanExporter, ...] = field(default=(), repr=False)
    _closed: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def observers(self) -> tuple[LoopObserver, ...]:
        """The tracing and metrics observers, in that order."""
        return (self.tracing, self.metrics)

    def span_delivery(self) -> SpanDelivery:
        """Spans ended so far, and how many each exporter accepted or refused."""
        return SpanDelivery(
            ended=0 if self._ended is None else self._ended.count,
            destinations=len(self._counted),
            exported=sum(c.exported for c in self._counted),
            failed=sum(c.failed for c in self._counted),
        )

    def flush_spans(self, timeout_s: float = 5.0) -> bool:
        """Export the queued spans now and wait for it; True if done within ``timeout_s``.

        A caller that ends spans faster than the exporters take them (a replay)
        calls this every half queue, so nothing is dropped.
        """
        flush = getattr(self.tracer_provider, "force_flush", None)
        return True if flush is None else _bounded(flush, timeout_s)

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
    """Run ``work`` on a daemon thread; True if it finished, without raising, in ``timeout_s``."""
    done = threading.Event()
    succeeded: list[bool] = []

    def run() -> None:
        try:
            work()
            succeeded.append(True)
        except Exception as exc:  # e.g. a reader past the deadline: logged, never a crash
            _logger.warning("loopobs: flushing or shutting down telemetry failed: %s", exc)
        finally:
            done.set()

    threading.Thread(target=run, name="loopobs-otel-shutdown", daemon=True).start()
    return done.wait(timeout_s) and bool(succeeded)


def _choice(
    name: str, value: str | None, env: Sequence[str], default: str, allowed: Sequence[str]
) -> tuple[list[str], bool]:
    """The chosen values (deduplicated, in order) and whether anything chose them explicitly.

    As the SDK does: ``none`` alone means no exporter; ``none`` next to other
    values is ignored, with a warning.
    """
    raw = value
    explicit = value is not None
    if raw is None:
        raw = next((os.environ[e] for e in env if os.environ.get(e, "").strip()), None)
        explicit = raw is not None
        if raw is None:
            raw = default
    chosen: list[str] = []
    for part in raw.split(","):
        item = part.strip().lower()
        if item and item not in chosen:
            chosen.append(item)
    chosen = chosen or [default]
    bad = [v for v in chosen if v not in allowed]
    if bad:
        raise ValueError(f"{name}: unsupported value(s) {bad}; use one of {list(allowed)}")
    if "none" in chosen:
        if len(chosen) == 1:
            return [], explicit
        _logger.warning(
            "loopobs.configure: %s lists 'none' with other exporters; 'none' is ignored", name
        )
        chosen.remove("none")
    return chosen, explicit


def _signal_url(endpoint: str, signal: str) -> str:
    base = endpoint.rstrip("/")
    return base if base.endswith(f"/v1/{signal}") else f"{base}/v1/{signal}"


def _span_exporter(
    kind: str,
    protocol: str,
    endpoint: str | None,
    headers: Mapping[str, str] | None,
    timeout_s: float,
) -> SpanExporter:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        return GrpcSpanExporter(
            endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(
        endpoint=_signal_url(endpoint, "traces") if endpoint else None,
        headers=headers,
        timeout=timeout_s,
    )


def _metric_exporter(
    kind: str,
    protocol: str,
    endpoint: str | None,
    headers: Mapping[str, str] | None,
    timeout_s: float,
) -> MetricExporter:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter()
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
            OTLPMetricExporter as GrpcMetricExporter,
        )

        return GrpcMetricExporter(
            endpoint=endpoint, headers=dict(headers) if headers else None, timeout=timeout_s
        )
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(
        endpoint=_signal_url(endpoint, "metrics") if endpoint else None,
        headers=headers,
        timeout=timeout_s,
    )


def _require_otel(exports: Sequence[tuple[str, str, str]]) -> None:
    """Import what ``exports`` (signal, exporter kind, protocol) need, before anything is built.

    Raises:
        ImportError: a package of the ``otel`` extra is missing; the message says
            what to install.
    """
    modules = ["opentelemetry.sdk.trace", "opentelemetry.sdk.metrics"]
    for signal, kind, protocol in exports:
        if kind == "otlp":
            transport = "grpc" if protocol == "grpc" else "http"
            name = "trace" if signal == "traces" else "metric"
            modules.append(f"opentelemetry.exporter.otlp.proto.{transport}.{name}_exporter")
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            raise ImportError(
                f"loopobs.configure() needs the OpenTelemetry SDK and OTLP exporters "
                f"({exc.name} is not installed): pip install 'loopobs[otel]'",
                name=exc.name,
            ) from exc


def _disabled() -> bool:
    return os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _install_globals(
    tracer_provider: trace.TracerProvider, meter_provider: ApiMeterProvider
) -> bool:
    """Install both providers globally; warn (naming which) when one was already there."""
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    refused = [
        what
        for what, now, mine in (
            ("tracer", trace.get_tracer_provider(), tracer_provider),
            ("meter", metrics.get_meter_provider(), meter_provider),
        )
        if now is not mine
    ]
    if refused:
        warnings.warn(
            f"configure(set_global=True): a global {' and '.join(refused)} provider was already "
            "installed and OpenTelemetry allows one per process, so this handle's providers "
            "are NOT global (Telemetry.is_global is False); use them through its observers",
            RuntimeWarning,
            stacklevel=3,
        )
    return not refused


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
    export_timeout_s: float | None = None,
    metric_export_interval_s: float | None = None,
    metric_export_timeout_s: float | None = None,
    max_queue_size: int | None = None,
    max_export_batch_size: int | None = None,
    schedule_delay_s: float | None = None,
    batch_export_timeout_s: float | None = None,
    span_exporters: Sequence[SpanExporter] = (),
    metric_readers: Sequence[MetricReader] = (),
    redact: Redactor | None = None,
    logger_provider: otel_logs.LoggerProvider | None = None,
    default_service_name: str | None = None,
    max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
    attribution_labels: Mapping[str, int] | None = None,
) -> Telemetry:
    """Build tracer and meter providers, their exporters, and observers that use them.

    Every tuning value is resolved as the SDK resolves it: the argument, else
    the standard variable, else the SDK's default.

    Args:
        service_name: ``service.name``; else ``OTEL_SERVICE_NAME``, else
            ``service.name`` in ``OTEL_RESOURCE_ATTRIBUTES``, else
            ``default_service_name``, else the SDK's ``unknown_service``.
        resource_attributes: merged over ``OTEL_RESOURCE_ATTRIBUTES``.
        traces_exporter: ``otlp``, ``console`` or ``none`` (comma-separated for
            several; repeats count once; ``none`` next to other values is
            ignored); else ``OTEL_TRACES_EXPORTER``; default ``otlp`` when an
            OTLP endpoint is configured, else none (said once in a log line).
        metrics_exporter: the same for metrics; else ``OTEL_METRICS_EXPORTER``.
        protocol: ``http/protobuf`` or ``grpc``; else the per-signal or general
            ``OTEL_EXPORTER_OTLP_*PROTOCOL``; default ``http/protobuf``.
        endpoint: OTLP base URL (``/v1/traces`` is appended for HTTP); else the
            exporters read ``OTEL_EXPORTER_OTLP_*ENDPOINT``.
        headers: OTLP headers; else ``OTEL_EXPORTER_OTLP_*HEADERS``, checked first.
        sampler: else the SDK reads ``OTEL_TRACES_SAMPLER`` / ``_ARG``.
        capture_content: content capture of the :class:`TracingObserver`.
        turn_spans: whether the :class:`TracingObserver` opens ``turn`` spans.
        propagate_context: whether its spans become current while they are open.
        set_global: also install the providers as OpenTelemetry's global ones
            (a warning says so when a global provider already exists).
        export_timeout_s: per-request timeout of the OTLP exporters; else
            ``OTEL_EXPORTER_OTLP_[TRACES_|METRICS_]TIMEOUT`` (seconds, as the
            Python SDK reads it); default 10.
        metric_export_interval_s: how often metrics are pushed; else
            ``OTEL_METRIC_EXPORT_INTERVAL`` (ms); default 60 s.
        metric_export_timeout_s: else ``OTEL_METRIC_EXPORT_TIMEOUT`` (ms); default 30 s.
        max_queue_size: the span queue bound; else ``OTEL_BSP_MAX_QUEUE_SIZE``;
            default 2048. Spans beyond it are dropped, never blocking;
            :meth:`Telemetry.span_delivery` counts them.
        max_export_batch_size: else ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``; default 512.
        schedule_delay_s: else ``OTEL_BSP_SCHEDULE_DELAY`` (ms); default 5 s.
        batch_export_timeout_s: else ``OTEL_BSP_EXPORT_TIMEOUT`` (ms); default 30 s.
        span_exporters: extra span destinations (e.g. an in-memory exporter in tests).
        metric_readers: extra metric readers (e.g. an in-memory reader in tests).
        redact: applied to captured content before export (see
            :func:`~loopobs.exporters.redaction.redact_common_secrets`).
        logger_provider: where the :class:`TracingObserver`'s log-record events go
            (operation exceptions, inference details); else the global provider.
        default_service_name: ``service.name`` when nothing else names one.
        max_label_values: the :class:`MetricsObserver`'s cap on distinct values per
            label key (later values fold into ``_other``).
        attribution_labels: attribution names the :class:`MetricsObserver` records as
            labels of the cost metrics, each with its own cap: ``{"tenant": 50}``.
            Default: none.

    With ``OTEL_SDK_DISABLED=true`` no SDK object is built: the observers get
    no-op providers and cost next to nothing.

    Raises:
        ValueError: an exporter, protocol or tuning value is not supported, or a
            header variable is malformed; the message names the argument or the
            variable. Nothing is left running after an error.
        ImportError: the ``otel`` extra is not installed (the message says so).
    """
    # Checked before anything is built, as the MetricsObserver will check them.
    label_values_limit(max_label_values)
    attribution = attribution_limits(attribution_labels)
    if _disabled():
        tp_noop = trace.NoOpTracerProvider()
        mp_noop = metrics.NoOpMeterProvider()
        return Telemetry(
            TracingObserver(
                tp_noop,
                capture_content=capture_content,
                turn_spans=turn_spans,
                propagate_context=propagate_context,
                logger_provider=otel_logs.NoOpLoggerProvider(),
            ),
            MetricsObserver(
                mp_noop, max_label_values=max_label_values, attribution_labels=attribution
            ),
            tp_noop,
            mp_noop,
            enabled=False,
        )

    # Everything that can be wrong is checked before any object (or thread) exists.
    settings = resolve_settings(
        export_timeout_s=export_timeout_s,
        metric_export_interval_s=metric_export_interval_s,
        metric_export_timeout_s=metric_export_timeout_s,
        max_queue_size=max_queue_size,
        max_export_batch_size=max_export_batch_size,
        schedule_delay_s=schedule_delay_s,
        batch_export_timeout_s=batch_export_timeout_s,
    )
    trace_kinds, trace_explicit = _choice(
        "traces_exporter", traces_exporter, ["OTEL_TRACES_EXPORTER"], "otlp", EXPORTERS
    )
    metric_kinds, metric_explicit = _choice(
        "metrics_exporter", metrics_exporter, ["OTEL_METRICS_EXPORTER"], "otlp", EXPORTERS
    )
    trace_protocol = _choice(
        "protocol",
        protocol,
        ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
        DEFAULT_PROTOCOL,
        PROTOCOLS,
    )[0][0]
    metric_protocol = _choice(
        "protocol",
        protocol,
        ["OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"],
        DEFAULT_PROTOCOL,
        PROTOCOLS,
    )[0][0]
    if "otlp" in trace_kinds:
        check_endpoint(endpoint, "traces", trace_protocol)
    if "otlp" in metric_kinds:
        check_endpoint(endpoint, "metrics", metric_protocol)
    trace_headers = otlp_headers(headers, "traces") if "otlp" in trace_kinds else None
    metric_headers = otlp_headers(headers, "metrics") if "otlp" in metric_kinds else None
    unset = [
        signal
        for signal, kinds, explicit in (
            ("traces", trace_kinds, trace_explicit),
            ("metrics", metric_kinds, metric_explicit),
        )
        if kinds == ["otlp"] and not explicit and not endpoint_configured(endpoint, signal)
    ]
    if unset:
        trace_kinds = [] if "traces" in unset else trace_kinds
        metric_kinds = [] if "metrics" in unset else metric_kinds
        _logger.warning(
            "loopobs.configure: no OTLP endpoint configured, so %s are not exported (set "
            "OTEL_EXPORTER_OTLP_ENDPOINT or pass endpoint=; OTEL_TRACES_EXPORTER=otlp "
            "sends to the OTLP default, localhost:4318)",
            " and ".join(unset),
        )

    _require_otel(
        [("traces", k, trace_protocol) for k in trace_kinds]
        + [("metrics", k, metric_protocol) for k in metric_kinds]
    )
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from loopobs.exporters._delivery import CountingSpanExporter, EndedSpans

    attributes: dict[str, Any] = dict(resource_attributes or {})
    if service_name is not None:
        attributes[SERVICE_NAME] = service_name
    resource = Resource.create(attributes)
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if default_service_name and (
        named == "unknown_service" or named.startswith("unknown_service:")
    ):
        resource = resource.merge(Resource({SERVICE_NAME: default_service_name}))

    built: list[Any] = []
    own_readers: list[MetricReader] = []
    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    try:
        tracer_provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
        ended = EndedSpans()
        tracer_provider.add_span_processor(ended)
        for kind in trace_kinds:
            built.append(
                _span_exporter(
                    kind, trace_protocol, endpoint, trace_headers, settings.traces_timeout_s
                )
            )
        counted = [CountingSpanExporter(e) for e in (*built, *span_exporters)]
        for exporter in counted:
            tracer_provider.add_span_processor(
                BatchSpanProcessor(
                    exporter,
                    max_queue_size=settings.max_queue_size,
                    max_export_batch_size=settings.max_export_batch_size,
                    schedule_delay_millis=settings.schedule_delay_s * 1000,
                    export_timeout_millis=settings.batch_export_timeout_s * 1000,
                )
            )

        metric_exporters = [
            _metric_exporter(
                k, metric_protocol, endpoint, metric_headers, settings.metrics_timeout_s
            )
            for k in metric_kinds
        ]
        built.extend(metric_exporters)
        for metric_exporter in metric_exporters:
            own_readers.append(
                PeriodicExportingMetricReader(
                    metric_exporter,
                    export_interval_millis=settings.metric_export_interval_s * 1000,
                    export_timeout_millis=settings.metric_export_timeout_s * 1000,
                )
            )
        meter_provider = MeterProvider(
            resource=resource,
            metric_readers=[*own_readers, *metric_readers],
            shutdown_on_exit=False,
        )
        telemetry = Telemetry(
            TracingObserver(
                tracer_provider,
                capture_content=capture_content,
                turn_spans=turn_spans,
                propagate_context=propagate_context,
                redact=redact,
                logger_provider=logger_provider,
            ),
            MetricsObserver(
                meter_provider, max_label_values=max_label_values, attribution_labels=attribution
            ),
            tracer_provider,
            meter_provider,
            exporters=tuple(built),
            settings=settings,
            _ended=ended,
            _counted=tuple(counted),
        )
    except BaseException:
        _abandon(tracer_provider, meter_provider, own_readers, built)
        raise
    if set_global:
        telemetry.is_global = _install_globals(tracer_provider, meter_provider)
    # The SDK's own exit hooks would flush without a bound; ours keeps the bound.
    atexit.register(telemetry._at_exit)
    return telemetry


def _abandon(
    tracer_provider: Any, meter_provider: Any, readers: Sequence[Any], exporters: Sequence[Any]
) -> None:
    """Stop whatever a failed configure() had built, so no thread or socket outlives it."""
    stoppable = (
        [tracer_provider, meter_provider]
        if meter_provider is not None
        else [tracer_provider, *readers]
    )
    for item in stoppable:
        if item is not None:
            with contextlib.suppress(Exception):
                item.shutdown()
    for exporter in exporters:
        with contextlib.suppress(Exception):
            exporter.shutdown()
