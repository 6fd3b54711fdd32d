"""Observers that export: JSONL event log, OpenTelemetry tracing and metrics, Prometheus.

``PrometheusObserver``, ``MetricsServer`` and ``start_metrics_server`` need
``prometheus-client`` (``loopobs[prometheus]``); ``configure`` needs the
OpenTelemetry SDK (``loopobs[otel]``) when called. All of them, and the OTel
observers, are imported on first use, so this package imports without either.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loopobs.exporters.jsonl import JsonlRecorder, ReplayError, ReplayStats, replay

if TYPE_CHECKING:
    from loopobs.exporters.metrics import MetricsObserver
    from loopobs.exporters.metrics_server import MetricsServer, start_metrics_server
    from loopobs.exporters.prometheus import PrometheusObserver
    from loopobs.exporters.redaction import redact_common_secrets
    from loopobs.exporters.setup import Telemetry, configure
    from loopobs.exporters.tracing import TracingObserver

__all__ = [
    "JsonlRecorder",
    "MetricsObserver",
    "MetricsServer",
    "PrometheusObserver",
    "ReplayError",
    "ReplayStats",
    "Telemetry",
    "TracingObserver",
    "configure",
    "redact_common_secrets",
    "replay",
    "start_metrics_server",
]

_LAZY = {
    "MetricsObserver": "loopobs.exporters.metrics",
    "MetricsServer": "loopobs.exporters.metrics_server",
    "PrometheusObserver": "loopobs.exporters.prometheus",
    "Telemetry": "loopobs.exporters.setup",
    "TracingObserver": "loopobs.exporters.tracing",
    "configure": "loopobs.exporters.setup",
    "redact_common_secrets": "loopobs.exporters.redaction",
    "start_metrics_server": "loopobs.exporters.metrics_server",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("prometheus_client"):
            raise
        raise ImportError(
            f"loopobs.exporters.{name} needs prometheus-client: pip install 'loopobs[prometheus]'"
        ) from exc
    globals()[name] = value
    return value
