"""PrometheusObserver and /metrics under hostile or unlucky conditions.

Label values that cannot be encoded, known label sets before their first event,
reset() with runs open, HEAD and unknown paths, idle connections, close() with
connections open, several observers per worker process, damaged worker files.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from loopobs import (
    RunEndContext,
    RunStartContext,
    StreamFailureContext,
    StreamSuccessContext,
    ToolPostContext,
)
from loopobs.contract.errors import RateLimited
from loopobs.exporters import MetricsServer, PrometheusObserver, start_metrics_server
from loopobs.exporters.metrics_server import multiprocess_registry
from tests import _prom_events as ev

ROOT = Path(__file__).resolve().parent.parent


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def wait_until(condition: object, timeout_s: float = 30.0) -> None:
    """Poll ``condition`` (a callable) until true; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail("condition not reached")
        time.sleep(0.02)


# -- label values that cannot be encoded --------------------------------------------------------
def test_lone_surrogates_in_labels_are_repaired_and_counted() -> None:
    """A split emoji in an agent or tool name must not turn every later scrape into an error."""
    obs = PrometheusObserver(CollectorRegistry())
    rid = uuid.uuid4()
    obs.on_run_start(
        RunStartContext(run_id=rid, time_ns=1, session_id=uuid.uuid4(), agent="bot-\ud83d")
    )
    obs.on_tool_post(
        ToolPostContext(
            run_id=rid, time_ns=2, tool_call_id="c", turn=0, tool="\ude00search", duration_ms=1.0
        )
    )
    obs.on_run_end(RunEndContext(run_id=rid, time_ns=3, success=True))
    text = generate_latest(obs.registry).decode()
    assert "bot-\ufffd" in text
    assert (
        value(
            obs.registry,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="\ufffdsearch",
            loopobs_tool_outcome="output",
            gen_ai_agent_name="bot-\ufffd",
        )
        == 1
    )
    sanitised = "loopobs_label_sanitised_total"
    assert value(obs.registry, sanitised, loopobs_label="gen_ai_agent_name") == 1
    assert value(obs.registry, sanitised, loopobs_label="gen_ai_tool_name") == 1
    with start_metrics_server(0, registry=obs) as srv:
        assert httpx.get(srv.url).status_code == 200


# -- known label sets start at zero -----------------------------------------------------------
def test_known_label_sets_exist_at_zero_before_their_first_event() -> None:
    """Detections per action, runs per status, failures per error type, tool outcomes: 0."""
    obs = PrometheusObserver(CollectorRegistry())
    reg = obs.registry
    for action in ("stop", "warn", "compact", "ask_user", "switch_phase"):
        assert (
            value(reg, "loopobs_convergence_detections_total", loopobs_detection_action=action) == 0
        )
    for action in ("warn", "stop"):
        assert (
            value(
                reg,
                "loopobs_loop_detections_total",
                gen_ai_tool_name="",
                loopobs_detection_action=action,
            )
            == 0
        )

    rid = uuid.uuid4()
    obs.on_run_start(
        RunStartContext(run_id=rid, time_ns=1, session_id=uuid.uuid4(), agent="support")
    )
    for status in (
        "completed",
        "failed",
        "cancelled",
        "suspended",
        "sleeping",
        "max_turns",
        "loop_detected",
        "converged",
        "budget_exceeded",
    ):
        assert (
            value(reg, "loopobs_runs_total", gen_ai_agent_name="support", loopobs_run_status=status)
            == 0
        )

    obs.on_stream_failure(
        StreamFailureContext(
            run_id=rid,
            time_ns=2,
            turn=0,
            model="m1",
            provider="openai",
            error=RateLimited("slow down"),
        )
    )
    model = {
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": "m1",
        "gen_ai_agent_name": "support",
    }
    assert value(reg, "loopobs_stream_failures_total", **model, error_type="RateLimited") == 1
    for error in ("StreamError", "ModelError"):
        assert value(reg, "loopobs_stream_failures_total", **model, error_type=error) == 0
    obs.on_stream_success(
        StreamSuccessContext(
            run_id=rid, time_ns=2, turn=0, model="m2", provider="openai", input_tokens=5
        )
    )
    succeeding = {**model, "gen_ai_request_model": "m2"}  # a model seen only succeeding
    for error in ("RateLimited", "StreamError", "ModelError"):
        assert value(reg, "loopobs_stream_failures_total", **succeeding, error_type=error) == 0

    obs.on_tool_post(
        ToolPostContext(
            run_id=rid, time_ns=3, tool_call_id="c", turn=0, tool="search", duration_ms=1.0
        )
    )
    tool = {"gen_ai_tool_name": "search", "gen_ai_agent_name": "support"}
    assert value(reg, "loopobs_tool_calls_total", **tool, loopobs_tool_outcome="output") == 1
    for outcome in ("error", "suspend", "sleep"):
        assert value(reg, "loopobs_tool_calls_total", **tool, loopobs_tool_outcome=outcome) == 0


# -- reset() ------------------------------------------------------------------------------------
def test_reset_with_runs_open_takes_them_out_of_runs_active() -> None:
    obs = PrometheusObserver(CollectorRegistry())
    ids = [uuid.uuid4() for _ in range(3)]
    for rid in ids:
        obs.on_run_start(RunStartContext(run_id=rid, time_ns=1, session_id=uuid.uuid4(), agent="a"))
    assert value(obs.registry, "loopobs_runs_active", gen_ai_agent_name="a") == 3
    obs.reset()
    assert obs.open_runs == 0
    assert value(obs.registry, "loopobs_runs_active", gen_ai_agent_name="a") == 0
    # a run forgotten by reset() that ends later does not drive the gauge below zero
    obs.on_run_end(RunEndContext(run_id=ids[0], time_ns=2, success=True))
    assert value(obs.registry, "loopobs_runs_active", gen_ai_agent_name="a") == 0
    assert (
        value(
            obs.registry, "loopobs_runs_total", gen_ai_agent_name="", loopobs_run_status="completed"
        )
        == 1
    )


# -- the /metrics server --------------------------------------------------------------------
@pytest.fixture
def server() -> Iterator[MetricsServer]:
    obs = PrometheusObserver(CollectorRegistry())
    ev.emit_run(obs)
    with start_metrics_server(0, registry=obs, max_connections=4, idle_timeout_s=30.0) as srv:
        yield srv


def test_head_is_answered_and_other_paths_are_404(server: MetricsServer) -> None:
    got = httpx.get(server.url)
    assert got.status_code == 200
    head = httpx.head(server.url)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-type"] == got.headers["content-type"]
    base = server.url.removesuffix("/metrics")
    for path in ("/", "/metricsx", "/other", "/metrics/x"):
        assert httpx.get(base + path).status_code == 404, path
    assert httpx.post(server.url).status_code == 405


def _idle(server: MetricsServer, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection((server.addr, server.port))
        sockets.append(sock)
    return sockets


@pytest.mark.slow  # one of the longest of the suite: `make unit-fast` leaves it out
def test_idle_connections_hold_a_bounded_number_of_threads() -> None:
    """100 idle sockets: never more than max_connections served (one thread each), and every
    one of them is dropped in the end (evicted by a newer one, or timed out)."""
    obs = PrometheusObserver(CollectorRegistry())
    with start_metrics_server(0, registry=obs, max_connections=4, idle_timeout_s=2.0) as srv:
        before = threading.active_count()
        sockets = _idle(srv, 100)
        try:
            peak_open = peak_threads = 0
            seen = False
            deadline = time.monotonic() + 120.0
            while time.monotonic() < deadline:
                now = srv.open_connections
                peak_open = max(peak_open, now)
                peak_threads = max(peak_threads, threading.active_count() - before)
                seen = seen or now > 0
                if seen and now == 0 and all(_dropped(sock) for sock in sockets):
                    break
                time.sleep(0.01)
            else:
                pytest.fail("idle connections were not all dropped")
            assert 1 <= peak_open <= 4
            assert peak_threads <= 4 + 2  # a finishing thread may overlap its successor
        finally:
            for sock in sockets:
                sock.close()


def _dropped(sock: socket.socket) -> bool:
    """True if the server hung up ``sock`` (EOF or reset), without waiting."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_a_scrape_gets_through_idle_sockets_at_the_cap(server: MetricsServer) -> None:
    """At the cap, a new connection hangs up the oldest: idle sockets cannot lock out a scrape."""
    sockets = _idle(server, 10)
    try:
        wait_until(lambda: server.open_connections >= 1)
        assert httpx.get(server.url, timeout=30.0).status_code == 200
        assert server.open_connections <= 4
    finally:
        for sock in sockets:
            sock.close()


def test_connection_accepted_before_close_is_not_answered_after() -> None:
    obs = PrometheusObserver(CollectorRegistry())
    srv = start_metrics_server(0, registry=obs)
    sock = socket.create_connection((srv.addr, srv.port))
    try:
        wait_until(lambda: srv.open_connections == 1)
        srv.close()
        sock.settimeout(10.0)
        try:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.recv(1024)
        except OSError:
            answer = b""
        assert answer == b""
    finally:
        sock.close()


# -- multi-process mode -------------------------------------------------------------------------
TWO_OBSERVERS = """
import sys
from loopobs import ObserverSet
from loopobs.exporters import PrometheusObserver
from tests import _prom_events as ev

first, second = PrometheusObserver(), PrometheusObserver()
assert first.multiprocess
for _ in range(100):
    ev.emit_run(ObserverSet([first]))
    ev.emit_run(ObserverSet([second]))
print("done", flush=True)
"""


@pytest.fixture
def multiproc_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "prom"
    directory.mkdir()
    return directory


def _worker(code: str, directory: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": directory}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _total(registry: CollectorRegistry, name: str) -> float:
    return sum(s.value for fam in registry.collect() for s in fam.samples if s.name == name)


def test_two_observers_in_one_worker_add_up(multiproc_dir: Path) -> None:
    out = _worker(TWO_OBSERVERS, str(multiproc_dir))
    assert out.returncode == 0, out.stderr
    registry = multiprocess_registry(str(multiproc_dir))
    assert _total(registry, "loopobs_runs_total") == 200
    assert _total(registry, "loopobs_runs_active") == 0
    assert _total(registry, "loopobs_tokens_total") == 200 * ev.TOKENS_PER_RUN


def test_damaged_file_is_skipped_named_and_counted(
    multiproc_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    out = _worker(TWO_OBSERVERS, str(multiproc_dir))
    assert out.returncode == 0, out.stderr
    damaged = multiproc_dir / "counter_999999.db"
    damaged.write_bytes((4096).to_bytes(4, "little") + b"\0\0\0\0" + b"\xff" * 64)
    caplog.set_level(logging.WARNING, logger="loopobs")
    registry = multiprocess_registry(str(multiproc_dir))
    assert _total(registry, "loopobs_runs_total") == 200
    assert _total(registry, "loopobs_multiprocess_damaged_files") == 1
    _total(registry, "loopobs_runs_total")  # a second scrape: named once
    named = [r for r in caplog.records if str(damaged) in r.getMessage()]
    assert len(named) == 1
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(multiproc_dir)
    try:
        with start_metrics_server(0) as srv:
            assert httpx.get(srv.url).status_code == 200
    finally:
        del os.environ["PROMETHEUS_MULTIPROC_DIR"]


MISSING_DIR = """
import os, sys
from loopobs.exporters import PrometheusObserver
if sys.argv[1] == "unset":
    import prometheus_client  # multi-process mode is chosen now
    del os.environ["PROMETHEUS_MULTIPROC_DIR"]
try:
    PrometheusObserver()
except ValueError as exc:
    print(exc)
else:
    print("built")
"""


@pytest.mark.parametrize("case", ["missing", "unset"])
def test_missing_multiprocess_directory_is_refused_when_built(tmp_path: Path, case: str) -> None:
    missing = str(tmp_path / "nowhere")
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": missing}
    out = subprocess.run(
        [sys.executable, "-c", MISSING_DIR, case],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "PROMETHEUS_MULTIPROC_DIR" in out.stdout
    assert "built" not in out.stdout


# -- label values that are too long ---------------------------------------------------------------
def test_huge_label_values_are_cut_and_counted() -> None:
    """30 tools with 50,000-character names (model output): each series' label is cut to the
    bound with a marker, the /metrics body stays small, and every cut is counted."""
    obs = PrometheusObserver(CollectorRegistry())
    rid = uuid.uuid4()
    obs.on_run_start(RunStartContext(run_id=rid, time_ns=1, session_id=uuid.uuid4(), agent="bot"))
    for i in range(30):
        obs.on_tool_post(
            ToolPostContext(
                run_id=rid,
                time_ns=2,
                tool_call_id=f"c{i}",
                turn=0,
                tool=f"{i:02d}" + "x" * 50_000,
                duration_ms=1.0,
            )
        )
    obs.on_run_end(RunEndContext(run_id=rid, time_ns=3, success=True))
    body = generate_latest(obs.registry)
    assert len(body) < 30 * 50_000 / 3  # uncut, each name alone would be 1.5 MB in all
    from loopobs.exporters.event_metrics import MAX_LABEL_LENGTH, TRUNCATED_MARKER

    tools = {
        labels["gen_ai_tool_name"]
        for labels in (s.labels for fam in obs.registry.collect() for s in fam.samples)
        if labels.get("gen_ai_tool_name")
    }
    assert len(tools) == 30
    assert {len(t) for t in tools} == {MAX_LABEL_LENGTH}
    assert all(t.endswith(TRUNCATED_MARKER) for t in tools)
    assert (
        value(obs.registry, "loopobs_label_sanitised_total", loopobs_label="gen_ai_tool_name") == 30
    )
