"""Multi-process mode: three worker processes record, one /metrics shows their sums."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.multiprocess import mark_process_dead
from prometheus_client.parser import text_string_to_metric_families

from loopobs.exporters import start_metrics_server
from tests import _prom_events as ev

ROOT = Path(__file__).resolve().parent.parent

# A worker: records `runs` scripted runs through an ObserverSet that also holds a failing
# observer; with `hold`, it then opens one more run, waits for stdin to close, and exits
# without ending that run, like a crashed worker.
WORKER = """
import os, sys
from loopobs import LoopObserver, ObserverSet
from loopobs.exporters import PrometheusObserver
from tests import _prom_events as ev

class Broken(LoopObserver):
    def on_turn_end(self, ctx):
        raise RuntimeError("bug")

runs, hold = int(sys.argv[1]), sys.argv[2] == "hold"
obs = PrometheusObserver()
assert obs.multiprocess and not obs.exemplars
observers = ObserverSet([Broken(), obs])
for _ in range(runs):
    ev.emit_run(observers)
if hold:
    ev.emit_run(observers, before_end=lambda: (
        print("open", flush=True), sys.stdin.read(), os._exit(0)))
print("done", flush=True)
"""


def start_worker(env: dict[str, str], runs: int, hold: bool) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(runs), "hold" if hold else "exit"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def multiproc_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "prom"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    return directory


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(url).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


@pytest.mark.slow
def test_three_workers_sum_into_one_endpoint(multiproc_dir: Path) -> None:
    """Workers with 1, 2 and 3 runs: one server shows 6 runs' figures; dead workers clean up."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(multiproc_dir)}
    holder = start_worker(env, 1, hold=True)
    others = [start_worker(env, n, hold=False) for n in (2, 3)]
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "open"
        for proc in others:
            out, _ = proc.communicate(timeout=60)
            assert proc.returncode == 0
            assert out.strip() == "done"

        with start_metrics_server(0) as srv:
            samples = scrape(srv.url)
            runs = 6  # ended; the holder's open run has recorded everything but its end
            assert total(samples, "loopobs_tokens_total") == (runs + 1) * ev.TOKENS_PER_RUN
            assert total(samples, "loopobs_turns_total") == 2 * (runs + 1)
            assert total(samples, "loopobs_runs_total") == runs
            assert total(samples, "gen_ai_invoke_agent_duration_seconds_count") == runs
            assert total(samples, "gen_ai_client_token_usage_count") == 4 * (runs + 1)
            assert total(samples, "gen_ai_client_token_usage_sum") == (runs + 1) * (
                ev.INPUT_TOKENS + ev.OUTPUT_TOKENS
            )
            assert total(samples, "loopobs_tool_calls_total") == 2 * (runs + 1)
            assert total(samples, "loopobs_loop_detections_total") == runs + 1
            # synced at each on_run_end: 2 failing turn ends per ended run
            assert total(samples, "loopobs_observer_errors_total") == 2 * runs
            assert total(samples, "loopobs_runs_active") == 1  # livesum: the holder's open run

            holder_pid = holder.pid
            out, _ = holder.communicate(input="", timeout=60)
            assert holder.returncode == 0
            # the holder exited with its run still open: its live gauge file stays until cleaned
            assert total(scrape(srv.url), "loopobs_runs_active") == 1
            mark_process_dead(holder_pid)  # type: ignore[no-untyped-call]
            after = scrape(srv.url)
            assert total(after, "loopobs_runs_active") == 0
            assert total(after, "loopobs_tokens_total") == 7 * ev.TOKENS_PER_RUN  # counters stay
    finally:
        for proc in (holder, *others):
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
