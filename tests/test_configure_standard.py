"""configure() honours the standard OTEL_* tuning variables as the SDK does, and fails cleanly.

Precedence everywhere: an explicit argument, then the variable, then the SDK's
default. The SDK objects configure() builds are inspected (through
``tests._sdk_internals``, the SDK having no public way to read them back): they
are what decides timeouts, queue sizes and intervals at run time.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs.exporters import setup
from loopobs.exporters.setup import Telemetry, configure
from tests._sdk_internals import (
    BatchSettings,
    batch_settings,
    metric_readers,
    otlp_endpoint,
    otlp_headers,
    otlp_timeout_s,
    reader_interval_ms,
    reader_timeout_ms,
    span_processors,
)

ROOT = Path(__file__).resolve().parent.parent
ENDPOINT = "http://127.0.0.1:9"  # never contacted: nothing is exported in these tests


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def handles() -> Iterator[list[Telemetry]]:
    made: list[Telemetry] = []
    yield made
    for handle in made:
        handle.shutdown(timeout_s=2.0)


def _batch_processors(t: Telemetry) -> list[BatchSettings]:
    return [
        batch_settings(p)
        for p in span_processors(t.tracer_provider)
        if isinstance(p, BatchSpanProcessor)
    ]


def _readers(t: Telemetry) -> list[PeriodicExportingMetricReader]:
    return [
        r for r in metric_readers(t.meter_provider) if isinstance(r, PeriodicExportingMetricReader)
    ]


def _otlp(t: Telemetry, cls: type[Any]) -> Any:
    (found,) = [e for e in t.exporters if isinstance(e, cls)]
    return found


def build(handles: list[Telemetry], **kwargs: Any) -> Telemetry:
    kwargs.setdefault("traces_exporter", "otlp")
    kwargs.setdefault("metrics_exporter", "otlp")
    t = configure(endpoint=ENDPOINT, **kwargs)
    handles.append(t)
    return t


# -- item: each standard variable is honoured, the argument still wins -----------------------
def test_otlp_timeout_variable_sets_both_exporters(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    """OTEL_EXPORTER_OTLP_TIMEOUT (seconds, as the Python SDK reads it) reaches both exporters."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    t = build(handles)
    assert otlp_timeout_s(_otlp(t, OTLPSpanExporter)) == 3.0
    assert otlp_timeout_s(_otlp(t, OTLPMetricExporter)) == 3.0
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "7")
    t = build(handles)
    assert otlp_timeout_s(_otlp(t, OTLPSpanExporter)) == 7.0  # the per-signal variable first
    assert otlp_timeout_s(_otlp(t, OTLPMetricExporter)) == 3.0
    t = build(handles, export_timeout_s=1.5)
    assert otlp_timeout_s(_otlp(t, OTLPSpanExporter)) == 1.5
    assert otlp_timeout_s(_otlp(t, OTLPMetricExporter)) == 1.5


def test_default_otlp_timeout_is_the_sdks(handles: list[Telemetry]) -> None:
    t = build(handles)
    assert otlp_timeout_s(_otlp(t, OTLPSpanExporter)) == 10.0


def test_metric_export_interval_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "1234")
    (reader,) = _readers(build(handles))
    assert reader_interval_ms(reader) == 1234
    (reader,) = _readers(build(handles, metric_export_interval_s=2.0))
    assert reader_interval_ms(reader) == 2000


def test_metric_export_timeout_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_METRIC_EXPORT_TIMEOUT", "4321")
    (reader,) = _readers(build(handles))
    assert reader_timeout_ms(reader) == 4321
    (reader,) = _readers(build(handles, metric_export_timeout_s=1.0))
    assert reader_timeout_ms(reader) == 1000


def test_bsp_max_queue_size_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4096")
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none"))
    assert bsp.max_queue_size == 4096
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none", max_queue_size=100))
    assert bsp.max_queue_size == 100
    assert bsp.max_export_batch_size == 100  # the default batch shrinks to fit the queue


def test_bsp_max_export_batch_size_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64")
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none"))
    assert bsp.max_export_batch_size == 64
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none", max_export_batch_size=32))
    assert bsp.max_export_batch_size == 32


def test_bsp_schedule_delay_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none"))
    assert bsp.schedule_delay_ms == 250
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none", schedule_delay_s=0.5))
    assert bsp.schedule_delay_ms == 500


def test_bsp_export_timeout_variable(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_BSP_EXPORT_TIMEOUT", "1500")
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none"))
    assert bsp.export_timeout_ms == 1500
    (bsp,) = _batch_processors(build(handles, metrics_exporter="none", batch_export_timeout_s=2.0))
    assert bsp.export_timeout_ms == 2000


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "ten"),
        ("OTEL_METRIC_EXPORT_INTERVAL", "-5"),
        ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1.5"),
        ("OTEL_BSP_SCHEDULE_DELAY", "inf"),
    ],
)
def test_bad_variable_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        configure(endpoint=ENDPOINT, traces_exporter="otlp", metrics_exporter="otlp")


def test_batch_larger_than_queue_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "10")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "20")
    with pytest.raises(ValueError, match="OTEL_BSP_MAX_EXPORT_BATCH_SIZE"):
        configure(endpoint=ENDPOINT, metrics_exporter="none")


# -- item: service.name precedence -------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "fallback"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs,team=a"}, "from-attrs"),
        (
            {
                "OTEL_SERVICE_NAME": "from-env",
                "OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs",
            },
            "from-env",
        ),
    ],
)
def test_default_service_name_yields_to_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch,
    handles: list[Telemetry],
    env: dict[str, str],
    expected: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    t = configure(traces_exporter="none", metrics_exporter="none", default_service_name="fallback")
    handles.append(t)
    resource = t.tracer_provider.resource  # type: ignore[attr-defined]
    assert resource.attributes["service.name"] == expected


# -- item: exporter lists follow the SDK -----------------------------------------------------
@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def fake_span(
        kind: str, protocol: str, endpoint: str | None, headers: Any, timeout_s: float
    ) -> InMemorySpanExporter:
        calls.append(kind)
        return InMemorySpanExporter()

    monkeypatch.setattr(setup, "_span_exporter", fake_span)
    return calls


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("otlp,otlp", ["otlp"]),
        ("none,otlp", ["otlp"]),
        ("otlp, console ,OTLP", ["otlp", "console"]),
        ("none", []),
    ],
)
def test_exporter_lists_follow_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
    handles: list[Telemetry],
    made: list[str],
    value: str,
    expected: list[str],
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", value)
    handles.append(configure(endpoint=ENDPOINT, metrics_exporter="none"))
    assert made == expected


async def test_a_repeated_exporter_exports_each_span_once(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    sinks: list[InMemorySpanExporter] = []

    def fresh(*args: Any) -> InMemorySpanExporter:
        sinks.append(InMemorySpanExporter())
        return sinks[-1]

    monkeypatch.setattr(setup, "_span_exporter", fresh)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,otlp")
    t = configure(endpoint=ENDPOINT, metrics_exporter="none")
    handles.append(t)
    t.tracer_provider.get_tracer("t").start_span("one").end()
    assert t.shutdown(timeout_s=5.0)
    assert [s.name for sink in sinks for s in sink.get_finished_spans()] == ["one"]


# -- item: malformed header variables ---------------------------------------------------------
SECRET = "Bearer sk-live-4f9a8b7c6d5e"


@pytest.mark.parametrize(
    "name", ["OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"]
)
def test_malformed_headers_name_the_variable_never_the_value(
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    name: str,
) -> None:
    monkeypatch.setenv(name, f"authorization={SECRET};x-team=agents")
    caplog.set_level(logging.DEBUG)
    before = threading.active_count()
    with pytest.raises(ValueError, match=name) as info:
        configure(endpoint=ENDPOINT, traces_exporter="otlp", metrics_exporter="none")
    assert "';'" in str(info.value)
    out, err = capfd.readouterr()
    seen = "".join([str(info.value), out, err, caplog.text])
    assert "sk-live" not in seen
    assert threading.active_count() == before


def test_well_formed_headers_reach_the_exporter(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20abc , x-team=agents")
    t = build(handles, metrics_exporter="none")
    headers = otlp_headers(_otlp(t, OTLPSpanExporter))
    assert headers["authorization"] == "Bearer abc"
    assert headers["x-team"] == "agents"


def test_header_argument_with_a_line_break_is_refused() -> None:
    with pytest.raises(ValueError, match="authorization") as info:
        configure(
            endpoint=ENDPOINT,
            traces_exporter="otlp",
            metrics_exporter="none",
            headers={"authorization": SECRET + "\n"},
        )
    assert "sk-live" not in str(info.value)


# -- item: arguments validated up front; a failed call leaves nothing running -------------------
@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("export_timeout_s", 0),
        ("export_timeout_s", -1.0),
        ("export_timeout_s", float("nan")),
        ("metric_export_interval_s", 0),
        ("metric_export_timeout_s", -2),
        ("max_queue_size", 0),
        ("max_export_batch_size", -1),
        ("schedule_delay_s", 0),
    ],
)
def test_bad_arguments_are_refused_by_name_and_leave_no_thread(argument: str, value: float) -> None:
    before = set(threading.enumerate())
    kwargs: dict[str, Any] = {argument: value}
    with pytest.raises(ValueError, match=argument):
        configure(endpoint=ENDPOINT, traces_exporter="otlp", metrics_exporter="otlp", **kwargs)
    assert set(threading.enumerate()) - before == set()


def test_failure_while_building_stops_what_was_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("metric exporter unavailable")

    monkeypatch.setattr(setup, "_metric_exporter", broken)
    before = set(threading.enumerate())
    with pytest.raises(RuntimeError, match="unavailable"):
        configure(endpoint=ENDPOINT, traces_exporter="otlp", metrics_exporter="otlp")
    leftover = [t for t in set(threading.enumerate()) - before if t.is_alive()]
    for thread in leftover:
        thread.join(timeout=5.0)
    assert [t.name for t in leftover if t.is_alive()] == []


_SECOND_GLOBAL = """
import warnings
from opentelemetry import trace
from loopobs.exporters.setup import configure
first = configure(traces_exporter="none", metrics_exporter="none", set_global=True)
assert first.is_global and trace.get_tracer_provider() is first.tracer_provider
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    second = configure(traces_exporter="none", metrics_exporter="none", set_global=True)
assert not second.is_global
assert trace.get_tracer_provider() is first.tracer_provider
(warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
print(warning.message)
"""


def test_second_global_configure_says_the_handle_is_not_global() -> None:
    """Global providers can be set once per process, so this runs in its own process."""
    out = subprocess.run(
        [sys.executable, "-c", _SECOND_GLOBAL],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "NOT global" in out.stdout
    assert "tracer and meter provider" in out.stdout


# -- no endpoint anywhere: one line, no retries ---------------------------------------------
def test_no_endpoint_anywhere_says_so_once_and_exports_nothing(
    caplog: pytest.LogCaptureFixture, handles: list[Telemetry]
) -> None:
    caplog.set_level(logging.INFO, logger="loopobs")
    t = configure(service_name="x")
    handles.append(t)
    assert t.exporters == ()
    records = [r for r in caplog.records if r.name == "loopobs"]
    assert len(records) == 1
    assert "no OTLP endpoint configured" in records[0].getMessage()
    assert "traces and metrics" in records[0].getMessage()


def test_explicit_otlp_without_endpoint_uses_the_otlp_default(handles: list[Telemetry]) -> None:
    t = configure(traces_exporter="otlp", metrics_exporter="none")
    handles.append(t)
    assert otlp_endpoint(_otlp(t, OTLPSpanExporter)) == "http://localhost:4318/v1/traces"


@pytest.mark.parametrize(
    ("source", "value"),
    [
        ("endpoint", "127.0.0.1:4318"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "localhost:4318/v1/traces"),
    ],
)
def test_http_endpoint_without_scheme_is_refused(
    monkeypatch: pytest.MonkeyPatch, source: str, value: str
) -> None:
    """The OTLP/HTTP exporter would accept it and fail every export; refuse it up front."""
    kwargs: dict[str, Any] = {}
    if source == "endpoint":
        kwargs["endpoint"] = value
    else:
        monkeypatch.setenv(source, value)
    with pytest.raises(ValueError, match=source):
        configure(traces_exporter="otlp", metrics_exporter="none", **kwargs)


def test_grpc_endpoint_without_scheme_is_accepted(handles: list[Telemetry]) -> None:
    """gRPC's endpoints are ``host:port``; the HTTP refusal above must not apply to them."""
    grpc = pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
    t = configure(
        traces_exporter="otlp",
        metrics_exporter="none",
        protocol="grpc",
        endpoint="127.0.0.1:4317",
    )
    handles.append(t)
    assert [type(e) for e in t.exporters] == [grpc.OTLPSpanExporter]


class Refusing(InMemorySpanExporter):
    """An exporter that refuses every batch."""

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        return SpanExportResult.FAILURE


def test_span_delivery_counts_exported_and_refused_spans(handles: list[Telemetry]) -> None:
    """Every ended span is accounted for per destination: exported, refused, or dropped."""
    kept, refused = InMemorySpanExporter(), Refusing()
    t = configure(traces_exporter="none", metrics_exporter="none", span_exporters=[kept, refused])
    handles.append(t)
    tracer = t.tracer_provider.get_tracer("t")
    for i in range(5):
        tracer.start_span(f"s{i}").end()
    assert t.flush_spans(timeout_s=5.0)
    delivery = t.span_delivery()
    assert (delivery.ended, delivery.destinations) == (5, 2)
    assert (delivery.exported, delivery.failed, delivery.dropped) == (5, 5, 0)
    assert not delivery.complete
    assert len(kept.get_finished_spans()) == 5
