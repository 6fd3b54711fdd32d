"""The standard ``OTEL_*`` tuning variables :func:`~loopobs.exporters.setup.configure` honours.

Each setting is resolved the way the SDK's own objects resolve it: an explicit
argument wins, then the variable, then the SDK's default. Unlike the SDK, a
value that is not a positive number is an error naming the variable or the
argument (the SDK logs and falls back, or fails much later with an error that
names neither). Header variables are checked before any SDK object parses
them, and an error never quotes a header value: it is usually a credential.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = [
    "ExportSettings",
    "check_endpoint",
    "endpoint_configured",
    "otlp_headers",
    "resolve_settings",
]

# Defaults of the Python SDK (its exporters read the OTLP timeout in seconds, not the
# specification's milliseconds; loopobs follows the SDK it drives).
DEFAULT_EXPORT_TIMEOUT_S = 10.0
DEFAULT_METRIC_EXPORT_INTERVAL_MS = 60_000.0
DEFAULT_METRIC_EXPORT_TIMEOUT_MS = 30_000.0
DEFAULT_BSP_SCHEDULE_DELAY_MS = 5_000.0
DEFAULT_BSP_EXPORT_TIMEOUT_MS = 30_000.0
DEFAULT_BSP_MAX_QUEUE_SIZE = 2048
DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE = 512


@dataclass(frozen=True, slots=True)
class ExportSettings:
    """The resolved export tuning of one :func:`configure` call (seconds and span counts)."""

    traces_timeout_s: float
    """Per-request timeout of the span exporter."""
    metrics_timeout_s: float
    """Per-request timeout of the metric exporter."""
    metric_export_interval_s: float
    metric_export_timeout_s: float
    max_queue_size: int
    """Spans the batch processor holds; more are dropped, never blocking the caller."""
    max_export_batch_size: int
    schedule_delay_s: float
    batch_export_timeout_s: float


def _env(name: str) -> str | None:
    raw = os.environ.get(name, "").strip()
    return raw or None


def _positive_number(value: float, what: str) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what} must be a positive number of seconds, got {value!r}")
    return float(value)


def _seconds(
    arg: float | None, arg_name: str, env: tuple[str, ...], default_s: float, env_unit_s: float
) -> float:
    """``arg`` (seconds), else the first variable set (in ``env_unit_s``), else the default."""
    if arg is not None:
        return _positive_number(arg, arg_name)
    for name in env:
        raw = _env(name)
        if raw is None:
            continue
        try:
            value = float(raw) * env_unit_s
        except ValueError:
            raise ValueError(f"{name} must be a number, got {raw!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number, got {raw!r}")
        return value
    return default_s


def _count(arg: int | None, arg_name: str, env: str, default: int) -> int:
    if arg is not None:
        if isinstance(arg, bool) or not isinstance(arg, int) or arg < 1:
            raise ValueError(f"{arg_name} must be a positive integer, got {arg!r}")
        return arg
    raw = _env(env)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{env} must be an integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"{env} must be a positive integer, got {raw!r}")
    return value


def resolve_settings(
    *,
    export_timeout_s: float | None,
    metric_export_interval_s: float | None,
    metric_export_timeout_s: float | None,
    max_queue_size: int | None,
    max_export_batch_size: int | None,
    schedule_delay_s: float | None,
    batch_export_timeout_s: float | None,
) -> ExportSettings:
    """Arguments, else ``OTEL_*`` variables, else the SDK's defaults; all validated.

    Raises:
        ValueError: a value is not a positive number, or the batch exceeds the queue;
            the message names the argument or variable.
    """
    traces_timeout = _seconds(
        export_timeout_s,
        "export_timeout_s",
        ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
        DEFAULT_EXPORT_TIMEOUT_S,
        1.0,
    )
    metrics_timeout = _seconds(
        export_timeout_s,
        "export_timeout_s",
        ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"),
        DEFAULT_EXPORT_TIMEOUT_S,
        1.0,
    )
    interval = _seconds(
        metric_export_interval_s,
        "metric_export_interval_s",
        ("OTEL_METRIC_EXPORT_INTERVAL",),
        DEFAULT_METRIC_EXPORT_INTERVAL_MS / 1000,
        0.001,
    )
    metric_timeout = _seconds(
        metric_export_timeout_s,
        "metric_export_timeout_s",
        ("OTEL_METRIC_EXPORT_TIMEOUT",),
        DEFAULT_METRIC_EXPORT_TIMEOUT_MS / 1000,
        0.001,
    )
    delay = _seconds(
        schedule_delay_s,
        "schedule_delay_s",
        ("OTEL_BSP_SCHEDULE_DELAY",),
        DEFAULT_BSP_SCHEDULE_DELAY_MS / 1000,
        0.001,
    )
    batch_timeout = _seconds(
        batch_export_timeout_s,
        "batch_export_timeout_s",
        ("OTEL_BSP_EXPORT_TIMEOUT",),
        DEFAULT_BSP_EXPORT_TIMEOUT_MS / 1000,
        0.001,
    )
    queue = _count(
        max_queue_size, "max_queue_size", "OTEL_BSP_MAX_QUEUE_SIZE", DEFAULT_BSP_MAX_QUEUE_SIZE
    )
    batch_given = max_export_batch_size is not None or _env("OTEL_BSP_MAX_EXPORT_BATCH_SIZE")
    batch = _count(
        max_export_batch_size,
        "max_export_batch_size",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
        DEFAULT_BSP_MAX_EXPORT_BATCH_SIZE,
    )
    if batch > queue:
        if batch_given:
            raise ValueError(
                f"the span export batch ({batch}, max_export_batch_size or "
                f"OTEL_BSP_MAX_EXPORT_BATCH_SIZE) exceeds the queue ({queue}, "
                "max_queue_size or OTEL_BSP_MAX_QUEUE_SIZE)"
            )
        batch = queue  # the SDK rejects a batch larger than the queue
    return ExportSettings(
        traces_timeout_s=traces_timeout,
        metrics_timeout_s=metrics_timeout,
        metric_export_interval_s=interval,
        metric_export_timeout_s=metric_timeout,
        max_queue_size=queue,
        max_export_batch_size=batch,
        schedule_delay_s=delay,
        batch_export_timeout_s=batch_timeout,
    )


# The W3C baggage shape the SDK accepts (liberally: spaces allowed in values), one member
# per comma. Anything else the SDK would log verbatim (the value included) and then drop.
_HEADER_NAME = r"[!#-'*+\-.0-9A-Z^-z|~]+"
_HEADER_VALUE = r"[ !#-+\--:<-\[\]-~]*"
_MEMBER = re.compile(rf"[ \t]*({_HEADER_NAME})[ \t]*=[ \t]*({_HEADER_VALUE})[ \t]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _parse_header_variable(name: str, raw: str) -> dict[str, str]:
    members = raw.split(",")
    headers: dict[str, str] = {}
    for index, member in enumerate(members, 1):
        if not member.strip():
            continue
        match = _MEMBER.fullmatch(member)
        if match is None:
            hint = " (separate headers with ',', not ';')" if ";" in member else ""
            raise ValueError(
                f"{name} is malformed: entry {index} of {len(members)} is not name=value with "
                f"URL-encoded characters{hint}; the value is not shown"
            )
        headers[unquote(match.group(1)).strip().lower()] = unquote(match.group(2)).strip()
    return headers


def otlp_headers(headers: Mapping[str, str] | None, signal: str) -> dict[str, str] | None:
    """The headers for ``signal``'s OTLP exporter: ``headers``, else the variable, checked.

    Returns None when neither is set (the exporter then sends none).

    Raises:
        ValueError: a header variable is malformed, or a header holds control characters.
            The message names the variable or header, never the value.
    """
    if headers is not None:
        checked = dict(headers)
        for key, value in checked.items():
            if _CONTROL.search(key):
                raise ValueError("headers: a header name contains control characters")
            if _CONTROL.search(value):
                raise ValueError(f"headers: the value of {key!r} contains control characters")
        return checked
    for name in (f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"):
        raw = os.environ.get(name)
        if raw is not None and raw.strip():
            return _parse_header_variable(name, raw)
    return None


def check_endpoint(endpoint: str | None, signal: str, protocol: str) -> None:
    """Refuse an OTLP/HTTP endpoint without ``http://`` or ``https://``.

    The HTTP exporter would take it and then fail every export; the message names
    the argument or variable the value came from.

    Raises:
        ValueError: the endpoint has no usable scheme.
    """
    if protocol == "grpc":
        return
    sources = (
        [("endpoint", endpoint)]
        if endpoint
        else [
            (name, _env(name))
            for name in (
                f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            )
        ]
    )
    for name, value in sources:
        if value:
            if urlsplit(value).scheme not in ("http", "https"):
                raise ValueError(
                    f"{name} needs a scheme for OTLP/HTTP: http:// or https:// (got {value!r})"
                )
            return


def endpoint_configured(endpoint: str | None, signal: str) -> bool:
    """Whether an OTLP endpoint for ``signal`` is given as an argument or a variable."""
    per_signal = _env(f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return bool(endpoint) or bool(per_signal or _env("OTEL_EXPORTER_OTLP_ENDPOINT"))
