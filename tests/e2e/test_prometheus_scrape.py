"""End to end: a real Prometheus scrapes our /metrics; PromQL returns the scripted figures."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from loopobs.exporters import MetricsServer, PrometheusObserver, start_metrics_server
from tests import _prom_events as ev
from tests.e2e._backends import free_port, require_binary, wait_http_ok

pytestmark = pytest.mark.e2e

JOB = "loopobs"
RUNS = 20
CONFIG = """\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: {job}
    scrape_interval: 1s
    scrape_timeout: 1s
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
"""


@pytest.fixture
def observer() -> PrometheusObserver:
    return PrometheusObserver()


@pytest.fixture
def metrics_server(observer: PrometheusObserver) -> Iterator[MetricsServer]:
    with start_metrics_server(0, registry=observer) as server:
        yield server


@pytest.fixture
def prometheus(metrics_server: MetricsServer, tmp_path: Path) -> Iterator[str]:
    """A real Prometheus scraping ``metrics_server`` every second; yields its base URL."""
    binary = require_binary("LOOPOBS_PROMETHEUS_BIN", "prometheus")
    config = tmp_path / "prometheus.yml"
    config.write_text(CONFIG.format(job=JOB, port=metrics_server.port))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http_ok(f"{base}/-/ready", timeout_s=30)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


def query(base: str, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=5.0)
    response.raise_for_status()
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def scalar(base: str, promql: str) -> float | None:
    result = query(base, promql)
    return float(result[0]["value"][1]) if result else None


def wait_for(base: str, promql: str, expected: float, timeout_s: float = 30.0) -> None:
    """Poll ``promql`` until it equals ``expected`` (Prometheus scrapes once a second)."""
    deadline = time.monotonic() + timeout_s
    got: float | None = None
    while time.monotonic() < deadline:
        got = scalar(base, promql)
        if got == expected:
            return
        time.sleep(0.5)
    pytest.fail(f"{promql} = {got}, expected {expected} within {timeout_s}s")


def test_prometheus_scrapes_the_scripted_figures(
    observer: PrometheusObserver, metrics_server: MetricsServer, prometheus: str
) -> None:
    """PromQL over a real scrape returns exactly what the runs recorded."""
    wait_for(prometheus, f'up{{job="{JOB}"}}', 1.0)

    loop = ev.make_loop(observer)

    async def runs() -> list[Any]:
        return list(await asyncio.gather(*(loop.run(f"q{i}") for i in range(RUNS))))

    results = asyncio.run(runs())
    scripted_total = sum(r.usage.total_tokens for r in results)
    assert scripted_total == RUNS * ev.LOOP_TOKENS_PER_RUN

    wait_for(prometheus, "sum(loopobs_tokens_total)", float(scripted_total))
    assert scalar(prometheus, 'sum(loopobs_tokens_total{gen_ai_token_type="input"})') == (
        RUNS * sum(ev.LOOP_INPUT)
    )
    assert scalar(prometheus, "sum(loopobs_runs_total)") == RUNS
    assert scalar(prometheus, "sum(loopobs_runs_active)") == 0
    assert scalar(prometheus, f'sum(loopobs_turns_total{{gen_ai_agent_name="{ev.AGENT}"}})') == (
        2 * RUNS
    )
    assert scalar(prometheus, 'sum(loopobs_tool_calls_total{gen_ai_tool_name="search"})') == RUNS
    assert scalar(prometheus, "sum(gen_ai_client_token_usage_count)") == 4 * RUNS
    # input tokens are 100 and 200 (bucket le=256), so every quantile lands in (64, 256]
    p50 = scalar(
        prometheus,
        "histogram_quantile(0.5, sum by (le) "
        '(gen_ai_client_token_usage_bucket{gen_ai_token_type="input"}))',
    )
    assert p50 is not None
    assert 64 < p50 <= 256
    series = query(prometheus, "gen_ai_client_operation_duration_seconds_count")
    assert {s["metric"]["gen_ai_request_model"] for s in series} == {"m1"}
    assert all("error_type" not in s["metric"] for s in series)  # "" means absent

    # a run in progress shows up in loopobs_runs_active
    release = asyncio.Event()

    async def open_run() -> None:
        from loopobs import AgentLoop, tool
        from loopobs.llm import Reply, ScriptedClient, ToolCall

        @tool
        async def wait() -> str:
            """Block until released."""
            await release.wait()
            return "ok"

        slow = AgentLoop(
            ScriptedClient([Reply(tool_calls=(ToolCall("wait", {}),)), Reply(text="done")]),
            model="m1",
            tools=[wait],
            observers=[observer],
            agent_name=ev.AGENT,
            tool_timeout=None,
        )
        task = asyncio.create_task(slow.run("hold"))
        await asyncio.to_thread(wait_for, prometheus, "sum(loopobs_runs_active)", 1.0)
        release.set()
        assert (await task).ok

    asyncio.run(open_run())
    wait_for(prometheus, "sum(loopobs_runs_active)", 0.0)
    wait_for(prometheus, "sum(loopobs_runs_total)", float(RUNS + 1))


def test_promtool_accepts_our_exposition(observer: PrometheusObserver, tmp_path: Path) -> None:
    """``promtool check metrics`` finds no problem in our text-format exposition."""
    promtool = require_binary("LOOPOBS_PROMTOOL_BIN", "promtool")
    ev.emit_run(observer)
    asyncio.run(ev.make_loop(observer).run("q"))
    text = generate_latest(observer.registry)
    assert b"loopobs_tokens_total" in text
    done = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
