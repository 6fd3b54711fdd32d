"""start_metrics_server: /metrics in text format or OpenMetrics, free ports, a real close()."""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from loopobs.contract import trace_links
from loopobs.exporters import MetricsServer, PrometheusObserver, start_metrics_server
from tests import _prom_events as ev

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


@pytest.fixture
def observed() -> PrometheusObserver:
    obs = PrometheusObserver()
    rid = uuid.uuid4()
    trace_links.publish(rid, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    try:
        ev.emit_run(obs, run_id=rid)
    finally:
        trace_links.withdraw(rid)
    return obs


@pytest.fixture
def server(observed: PrometheusObserver) -> Iterator[MetricsServer]:
    with start_metrics_server(0, registry=observed) as srv:
        yield srv


def test_port_zero_binds_a_free_loopback_port(server: MetricsServer) -> None:
    """Port 0 picks a free port on 127.0.0.1, reported by the handle."""
    assert server.addr == "127.0.0.1"
    assert server.port > 0
    assert server.url == f"http://127.0.0.1:{server.port}/metrics"


def test_serves_text_format_by_default(server: MetricsServer) -> None:
    """A plain GET gets the Prometheus text format with our figures and no exemplars."""
    response = httpx.get(server.url)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    body = response.text
    assert (
        'loopobs_tokens_total{gen_ai_agent_name="researcher",gen_ai_provider_name="scripted",'
        'gen_ai_request_model="m2",gen_ai_token_type="input"} 300.0'
    ) in body
    assert "trace_id" not in body
    assert "# EOF" not in body


def test_serves_openmetrics_with_exemplars_when_asked(server: MetricsServer) -> None:
    """An OpenMetrics Accept header gets OpenMetrics, with the trace-id exemplars."""
    response = httpx.get(server.url, headers={"Accept": OPENMETRICS})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    body = response.text
    assert body.endswith("# EOF\n")
    assert '# {span_id="00f067aa0ba902b7",trace_id="4bf92f3577b34da6a3ce929d0e0e4736"}' in body
    assert "# UNIT gen_ai_client_operation_duration_seconds seconds" in body


def test_accepts_a_plain_registry(observed: PrometheusObserver) -> None:
    """A registry (not only an observer) can be served."""
    with start_metrics_server(0, registry=observed.registry) as srv:
        assert srv.registry is observed.registry
        assert "loopobs_turns_total" in httpx.get(srv.url).text


def test_close_really_closes_the_socket(observed: PrometheusObserver) -> None:
    """After close() nothing listens and the port can be bound again; a second close is a no-op."""
    srv = start_metrics_server(0, registry=observed)
    port = srv.port
    assert httpx.get(srv.url).status_code == 200
    srv.close()
    assert "closed" in repr(srv)
    with pytest.raises(httpx.ConnectError):
        httpx.get(srv.url, timeout=2.0)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    srv.close()


def test_busy_port_raises(server: MetricsServer, observed: PrometheusObserver) -> None:
    """A port already in use is an OSError, not a silent second server."""
    with pytest.raises(OSError):
        start_metrics_server(server.port, registry=observed)


def test_registry_required_outside_multiprocess_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a registry and without PROMETHEUS_MULTIPROC_DIR there is nothing to serve."""
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    with pytest.raises(ValueError, match="PROMETHEUS_MULTIPROC_DIR"):
        start_metrics_server(0)


def test_multiprocess_dir_serves_a_multiprocess_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With PROMETHEUS_MULTIPROC_DIR set and no registry, the workers' files are served."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    worker = "from prometheus_client import Counter\nCounter('worker_jobs', 'jobs').inc(3)\n"
    subprocess.run([sys.executable, "-c", worker], check=True, timeout=60)
    with start_metrics_server(0) as srv:
        assert isinstance(srv.registry, CollectorRegistry)
        response = httpx.get(srv.url)
        assert response.status_code == 200
        assert "worker_jobs_total 3.0" in response.text
