"""loopobs.configure(): providers from arguments and OTEL_* variables, bounded shutdown."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import loopobs
from loopobs.contract.observer import ObserverSet
from loopobs.exporters import catalog as c
from loopobs.exporters import setup
from loopobs.exporters.setup import Telemetry, configure
from loopobs.testing import metric_points
from tests._emit import full_run
from tests._sdk_internals import otlp_endpoint
from tests.e2e._backends import free_port

OTEL_VARS = [
    "OTEL_SERVICE_NAME",
    "OTEL_RESOURCE_ATTRIBUTES",
    "OTEL_TRACES_EXPORTER",
    "OTEL_METRICS_EXPORTER",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def handles() -> Iterator[list[Telemetry]]:
    made: list[Telemetry] = []
    yield made
    for handle in made:
        handle.shutdown(timeout_s=2.0)


async def test_env_configures_resource_and_in_memory_destinations(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test,team=agents")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    t = configure(span_exporters=[spans], metric_readers=[reader])
    handles.append(t)
    await full_run(ObserverSet(t.observers, strict=True))
    assert metric_points(reader)[c.RUNS.name][0].value == 1
    assert t.shutdown(timeout_s=5.0)
    finished = spans.get_finished_spans()
    assert len(finished) == 8
    resource = dict(finished[0].resource.attributes)
    assert resource["service.name"] == "from-env"
    assert resource["deployment.environment"] == "test"
    assert resource["team"] == "agents"
    assert t.shutdown(timeout_s=0.1)  # idempotent


def test_arguments_win_over_env(monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]) -> None:
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    spans = InMemorySpanExporter()
    t = configure(
        "from-arg",
        resource_attributes={"team": "x"},
        traces_exporter="none",
        metrics_exporter="none",
        span_exporters=[spans],
    )
    handles.append(t)
    t.tracer_provider.get_tracer("t").start_span("s").end()
    t.shutdown()
    assert dict(spans.get_finished_spans()[0].resource.attributes)["service.name"] == "from-arg"


def test_never_installs_global_providers_unless_asked(handles: list[Telemetry]) -> None:
    before_tp, before_mp = trace.get_tracer_provider(), metrics.get_meter_provider()
    t = configure(traces_exporter="none", metrics_exporter="none")
    handles.append(t)
    assert trace.get_tracer_provider() is before_tp
    assert metrics.get_meter_provider() is before_mp
    assert t.tracer_provider is not before_tp


async def test_sdk_disabled_gives_no_op_observers(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_SDK_DISABLED", "TRUE")
    t = configure(traces_exporter="otlp")
    handles.append(t)
    assert not t.enabled
    assert isinstance(t.tracer_provider, trace.NoOpTracerProvider)
    assert isinstance(t.meter_provider, metrics.NoOpMeterProvider)
    await full_run(ObserverSet(t.observers, strict=True))
    assert t.tracing.open_runs == 0


async def test_sampler_comes_from_env(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    spans = InMemorySpanExporter()
    t = configure(traces_exporter="none", metrics_exporter="none", span_exporters=[spans])
    handles.append(t)
    await full_run(ObserverSet(t.observers, strict=True))
    t.shutdown()
    assert spans.get_finished_spans() == ()


def test_unsupported_values_are_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="traces_exporter"):
        configure(traces_exporter="jaeger")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="protocol"):
        configure(traces_exporter="none", metrics_exporter="none")


def test_exporter_choice_follows_protocol_env(
    monkeypatch: pytest.MonkeyPatch, handles: list[Telemetry]
) -> None:
    made: list[tuple[str, str, str, str | None]] = []

    def fake_span(
        kind: str, protocol: str, endpoint: str | None, headers: Any, timeout_s: float
    ) -> InMemorySpanExporter:
        made.append(("span", kind, protocol, endpoint))
        return InMemorySpanExporter()

    def fake_metric(
        kind: str, protocol: str, endpoint: str | None, headers: Any, timeout_s: float
    ) -> Any:
        made.append(("metric", kind, protocol, endpoint))
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=open(os.devnull, "w"))

    monkeypatch.setattr(setup, "_span_exporter", fake_span)
    monkeypatch.setattr(setup, "_metric_exporter", fake_metric)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp,console")
    handles.append(configure(endpoint="http://collector:4318"))
    assert made == [
        ("span", "otlp", "grpc", "http://collector:4318"),
        ("span", "console", "grpc", "http://collector:4318"),
        ("metric", "otlp", "http/protobuf", "http://collector:4318"),
    ]


def test_real_exporters_are_built_per_protocol() -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    http = setup._span_exporter("otlp", "http/protobuf", "http://h:4318/", None, 1.0)
    assert isinstance(http, OTLPSpanExporter)
    assert otlp_endpoint(http) == "http://h:4318/v1/traces"
    grpc = setup._span_exporter("otlp", "grpc", "http://h:4317", {"k": "v"}, 1.0)
    assert isinstance(grpc, GrpcExporter)
    http.shutdown()  # type: ignore[no-untyped-call]
    grpc.shutdown()


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A TCP port that completes handshakes (kernel backlog) but never reads or answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield server.getsockname()[1]
    server.close()


_OUTAGE = """
import asyncio, logging, sys, time
from loopobs.contract.observer import ObserverSet
from loopobs.exporters.setup import configure
from tests._emit import full_run

retries = []
class Retries(logging.Handler):
    def emit(self, record):
        if "retrying in" in record.getMessage():
            retries.append(time.monotonic())
logging.getLogger("opentelemetry.exporter").addHandler(Retries())

t = configure(traces_exporter="otlp", metrics_exporter="otlp", protocol=sys.argv[1],
              endpoint=sys.argv[2], export_timeout_s=60.0)
asyncio.run(full_run(ObserverSet(t.observers, strict=True)))
import threading
outcome = []
closer = threading.Thread(target=lambda: outcome.append(t.shutdown(timeout_s=1.0)), daemon=True)
closer.start()
# A hang guard at half the exporters' 60 s timeout: a shutdown that waited for an export
# (instead of its own bound) is caught, whatever the machine's speed.
closer.join(30.0)
returned = time.monotonic()
time.sleep(4.0)  # a live retry loop would back off 1-2 s and retry again in this time
late = [r for r in retries if r > returned + 0.6]
print(f"{'returned' if outcome else 'hung'} {outcome[0] if outcome else None} {len(late)}")
"""


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
@pytest.mark.parametrize("collector", ["closed", "blackhole"])
def test_shutdown_is_bounded_when_the_collector_is_down(
    blackhole: int, protocol: str, collector: str
) -> None:
    """shutdown(timeout_s=1) returns while the exporters would retry a minute (checked by a
    hang guard, not timed), and stops them: no retry after it returns.

    It runs in a subprocess: the exporters' retry threads outlive the handle, and
    their jittered backoff must not touch this process's random state.
    """
    port = free_port() if collector == "closed" else blackhole
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", _OUTAGE, protocol, f"http://127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    returned, in_time, late_retries = out.stdout.strip().splitlines()[-1].split()
    assert returned == "returned"
    if in_time == "False":
        # the handle gave up on the flush: it stopped the exporters, so nothing retries on
        assert late_retries == "0"


def test_import_without_the_sdk_or_prometheus_client() -> None:
    code = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("opentelemetry.sdk", "opentelemetry.exporter", "prometheus_client")):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Block())
import loopobs, loopobs.exporters
from loopobs.exporters import TracingObserver, MetricsObserver
assert callable(loopobs.configure)
assert not any(m.startswith("opentelemetry.sdk") for m in sys.modules)
TracingObserver(); MetricsObserver()
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.stdout.strip() == "ok", out.stderr
    assert loopobs.configure is configure


@pytest.mark.parametrize(
    ("hidden", "kwargs"),
    [
        ("opentelemetry.sdk", {"traces_exporter": "console", "metrics_exporter": "none"}),
        (
            "opentelemetry.exporter",
            {
                "traces_exporter": "otlp",
                "metrics_exporter": "none",
                "endpoint": "http://127.0.0.1:4318",
            },
        ),
    ],
)
def test_configure_without_the_otel_extra_says_what_to_install(
    clean_env: None, monkeypatch: pytest.MonkeyPatch, hidden: str, kwargs: dict[str, Any]
) -> None:
    """As if the SDK or the OTLP exporters were not installed: an error naming the extra."""
    for name in [n for n in sys.modules if n == hidden or n.startswith(hidden + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, hidden, None)
    with pytest.raises(ImportError, match=r"pip install 'loopobs\[otel\]'") as caught:
        configure(**kwargs)
    assert not isinstance(caught.value, ModuleNotFoundError)
    assert caught.value.name is not None
    assert caught.value.name.startswith(hidden)
