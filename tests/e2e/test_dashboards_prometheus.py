"""The dashboard and the alert rules against a real Prometheus scraping a real ``loopobs demo``.

``loopobs demo --forever`` serves ``/metrics``; Prometheus 2.42 scrapes it every second with
``grafana/prometheus/alerts.yml`` loaded. Then every panel query of every dashboard (Grafana's
variables filled in) must evaluate without error and return at least one series, every
template variable must offer values, every alert rule must evaluate with health "ok", and the
panels with exemplars on must get exemplars carrying a ``trace_id`` (the label the Prometheus
data source's ``exemplarTraceIdDestinations`` links to Jaeger). Prometheus serves the runbooks
console page the alerts' ``runbook_url`` points at, with a section for every alert. The demo
traces over OTLP/HTTP to a minimal local sink, as it would to the Collector. Finally SIGINT must
stop the demo with exit code 0.
"""

from __future__ import annotations

import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests import _runbooks as runbooks
from tests._grafana_queries import (
    ALERTS,
    DASHBOARDS,
    alert_rules,
    load_dashboard,
    panel_queries,
    substitute,
)
from tests.e2e._backends import free_port, require_binary, wait_http_ok

pytestmark = pytest.mark.e2e

SCRAPE_S = 1
RATE_WINDOW = "15s"
"""``$__rate_interval`` here: 15 one-second scrapes, comfortably over rate()'s two samples."""
VARIABLES = {"__rate_interval": RATE_WINDOW, "__interval": "5s", "__range": "1m"}
DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))


class _OtlpSink(http.server.ThreadingHTTPServer):
    """Accepts OTLP/HTTP exports (answers 200) and remembers the paths posted to."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _OtlpHandler)
        self.posts: list[str] = []


class _OtlpHandler(http.server.BaseHTTPRequestHandler):
    server: _OtlpSink

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.posts.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture(scope="module")
def otlp_sink() -> Iterator[_OtlpSink]:
    sink = _OtlpSink()
    thread = threading.Thread(target=sink.serve_forever, daemon=True)
    thread.start()
    try:
        yield sink
    finally:
        sink.shutdown()
        sink.server_close()
        thread.join(timeout=5)


@dataclass
class Demo:
    """The running ``loopobs demo`` process and its ``/metrics`` port."""

    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


@dataclass
class Prometheus:
    """The running Prometheus and its HTTP API base URL."""

    proc: subprocess.Popen[bytes]
    url: str

    def api(self, path: str, **params: str) -> Any:
        response = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10.0)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": result}]
        return result


def _loopobs_command() -> list[str]:
    script = Path(sys.executable).with_name("loopobs")
    if script.is_file():
        return [str(script)]
    found = shutil.which("loopobs")
    return [found] if found else [sys.executable, "-m", "loopobs.cli"]


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int | None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
    return proc.returncode


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory, otlp_sink: _OtlpSink) -> Iterator[Demo]:
    workdir = tmp_path_factory.mktemp("demo")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{otlp_sink.server_address[1]}"
    env["OTEL_EXPORTER_OTLP_PROTOCOL"] = "http/protobuf"
    env["OTEL_METRICS_EXPORTER"] = "none"  # as in docker-compose.yml: metrics are scraped
    log = workdir / "demo.log"
    command = [
        *_loopobs_command(),
        "demo",
        "--forever",
        "--seed",
        "1",
        "--metrics-port",
        str(port),
        "--no-live",
        "--quiet",
    ]
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir
        )
    running = Demo(proc, port, log)
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail(f"demo did not serve /metrics (rc={proc.poll()}):\n{running.output()}")
        yield running
    finally:
        _stop(proc, signal.SIGINT)


@pytest.fixture(scope="module")
def prometheus(demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    binary = require_binary("LOOPOBS_PROMETHEUS_BIN", "prometheus", "/usr/bin/prometheus")
    workdir = tmp_path_factory.mktemp("prometheus")
    shutil.copy(ALERTS, workdir / "alerts.yml")
    config = {
        "global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": f"{SCRAPE_S}s"},
        "rule_files": ["alerts.yml"],
        "scrape_configs": [
            {
                "job_name": "loopobs",
                "scrape_interval": f"{SCRAPE_S}s",
                "scrape_timeout": f"{SCRAPE_S}s",
                "static_configs": [{"targets": [f"127.0.0.1:{demo.port}"]}],
            }
        ],
    }
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    (workdir / "console_libraries").mkdir()
    port = free_port()
    with (workdir / "prometheus.log").open("wb") as sink:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
                "--enable-feature=exemplar-storage",
                f"--web.console.templates={runbooks.CONSOLE_PAGE.parent}",
                f"--web.console.libraries={workdir / 'console_libraries'}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    server = Prometheus(proc, f"http://127.0.0.1:{port}")
    try:
        wait_http_ok(f"{server.url}/-/ready", 20)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            up = server.query('up{job="loopobs"}')
            if up and up[0]["value"][1] == "1":
                break
            time.sleep(0.5)
        else:
            pytest.fail(
                "Prometheus never scraped the demo:\n"
                + (workdir / "prometheus.log").read_text()[-3000:]
            )
        yield server
    finally:
        _stop(proc)


def _all_queries() -> list[Any]:
    return [q for path in DASHBOARD_FILES for q in panel_queries(path)]


def test_every_panel_query_returns_series(prometheus: Prometheus) -> None:
    queries = _all_queries()
    assert len(queries) >= 25
    empty: list[str] = []
    # rate() over RATE_WINDOW needs two samples of each series; rare events need a little longer.
    deadline = time.monotonic() + 60
    while True:
        empty = [
            q.name + ": " + substitute(q.expr, VARIABLES)
            for q in queries
            if not prometheus.query(substitute(q.expr, VARIABLES))
        ]
        if not empty or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert empty == []


def test_panel_queries_see_real_values(prometheus: Prometheus) -> None:
    """Not only series: the demo's traffic shows up as positive rates and finite latencies."""

    def value(expr: str) -> float:
        result = prometheus.query(substitute(expr, VARIABLES))
        assert result, expr
        return max(float(series["value"][1]) for series in result)

    total = 'loopobs_tokens_total{gen_ai_token_type=~"input|output"}'
    assert value(f"sum(rate({total}[{RATE_WINDOW}]))") > 0
    assert value(f"sum(rate(loopobs_runs_total[{RATE_WINDOW}]))") > 0
    p95 = value(
        "histogram_quantile(0.95, sum by (le) "
        f"(rate(gen_ai_client_operation_duration_seconds_bucket[{RATE_WINDOW}])))"
    )
    assert 0 < p95 < 100


def test_template_variables_offer_values(prometheus: Prometheus) -> None:
    for path in DASHBOARD_FILES:
        for variable in load_dashboard(path)["templating"]["list"]:
            if variable["type"] != "query":
                continue
            query = str(variable["query"])
            assert query.startswith("label_values(")
            selector, label = (x.strip() for x in query[len("label_values(") : -1].rsplit(",", 1))
            values = prometheus.api(
                f"label/{label}/values", **{"match[]": substitute(selector, VARIABLES)}
            )
            assert [v for v in values if v], f"${variable['name']}: {query} has no values"


def test_operator_panels_see_the_demos_traffic(prometheus: Prometheus) -> None:
    """The new panels measure what the demo does: some runs stop on the loop detector, half
    the calls read the prompt cache, and the agent name reaches tokens, tools and failures."""

    def values(expr: str) -> list[float]:
        return [float(s["value"][1]) for s in prometheus.query(expr)]

    window = f"[{RATE_WINDOW}]"
    deadline = time.monotonic() + 60
    while True:
        failed = values('sum(increase(loopobs_runs_total{loopobs_run_status="loop_detected"}[1m]))')
        agents = {
            metric: {s["metric"].get("gen_ai_agent_name", "") for s in prometheus.query(metric)}
            for metric in (
                "loopobs_tokens_total",
                "loopobs_tool_calls_total",
                "loopobs_stream_failures_total",
            )
        }
        if (failed and failed[0] > 0 and all(agents.values())) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert failed
    assert failed[0] > 0
    assert agents == {metric: {"travel-assistant"} for metric in agents}
    cache_hit = values(
        f'sum(rate(loopobs_tokens_total{{gen_ai_token_type="cache_read"}}{window}))'
        f' / sum(rate(loopobs_tokens_total{{gen_ai_token_type="input"}}{window}))'
    )
    assert cache_hit
    assert 0 < cache_hit[0] < 1
    # input + output is the total; the extra types are parts of those two
    by_type = {
        s["metric"]["gen_ai_token_type"]: float(s["value"][1])
        for s in prometheus.query("sum by (gen_ai_token_type) (loopobs_tokens_total)")
    }
    assert by_type["cache_read"] < by_type["input"]
    assert by_type["reasoning"] < by_type["output"]
    assert values("loopobs:threshold_ttft_p95_seconds") == [5.0]
    spend_by_agent = values("sum by (gen_ai_agent_name) (loopobs_run_cost_usd_sum)")
    assert spend_by_agent
    assert spend_by_agent[0] > 0


def test_prometheus_serves_the_runbooks(prometheus: Prometheus) -> None:
    response = httpx.get(f"{prometheus.url}/consoles/{runbooks.CONSOLE_PAGE.name}", timeout=10.0)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    for rule in alert_rules():
        assert f'id="{runbooks.anchor(rule["alert"])}"' in response.text, rule["alert"]


def test_every_alert_rule_evaluates(prometheus: Prometheus) -> None:
    recorded = {
        rule["record"]
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    expected = {rule["alert"] for rule in alert_rules()} | recorded
    deadline = time.monotonic() + 20
    while True:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        evaluated = {
            r["name"]: r for r in rules if not r.get("lastEvaluation", "0001").startswith("0001")
        }
        if set(evaluated) >= expected or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert {r["name"] for r in rules} == expected
    assert set(evaluated) == expected
    unhealthy = {
        name: (r["health"], r.get("lastError"))
        for name, r in evaluated.items()
        if r["health"] != "ok" or r.get("lastError")
    }
    assert unhealthy == {}
    # Meta-monitoring against the real scrape: the demo's job exists and is up, and this
    # Prometheus scrapes no Collector, so only the Collector-absent alert is on its way.
    states = {name: r["state"] for name, r in evaluated.items() if r["type"] == "alerting"}
    assert states["LoopobsCollectorAbsent"] == "pending"
    for name in ("LoopobsMetricsTargetDown", "LoopobsMetricsTargetAbsent", "LoopobsCollectorDown"):
        assert states[name] == "inactive", name


def test_exemplar_panels_get_trace_ids(prometheus: Prometheus, otlp_sink: _OtlpSink) -> None:
    queries = [q for q in _all_queries() if q.exemplar]
    assert queries
    now = time.time()
    missing = []
    for q in queries:
        data = prometheus.api(
            "query_exemplars",
            query=substitute(q.expr, VARIABLES),
            start=str(now - 300),
            end=str(now + 60),
        )
        trace_ids = [
            e["labels"].get("trace_id", "") for series in data for e in series["exemplars"]
        ]
        if not any(re.fullmatch(r"[0-9a-f]{32}", t) for t in trace_ids):
            missing.append(q.name)
    assert missing == []
    assert "/v1/traces" in otlp_sink.posts


def test_demo_stops_cleanly_on_sigint(demo: Demo, prometheus: Prometheus) -> None:
    assert demo.proc.poll() is None, demo.output()
    returncode = _stop(demo.proc, signal.SIGINT)
    assert returncode == 0, demo.output()
