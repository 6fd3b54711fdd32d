"""`loopobs demo` leaves something to look at: it keeps serving /metrics until Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def test_demo_keeps_serving_metrics_until_ctrl_c(tmp_path: Path) -> None:
    """With no run count and no --exit, the demo plays once, says where to look, serves on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loopobs.cli",
            "demo",
            "--metrics-port",
            "0",
            "--no-live",
            "--quiet",
            "--latency",
            "0",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a speed assertion
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            if "until Ctrl-C" in line:
                break
        text = "".join(lines)
        assert "until Ctrl-C" in text, text
        url = next(w for w in text.split() if w.endswith("/metrics") and w.startswith("http"))
        time.sleep(0.5)
        assert proc.poll() is None  # still running after the runs
        scrape = httpx.get(url, timeout=5)
        assert scrape.status_code == 200
        assert "loopobs_runs_total" in scrape.text
        assert (tmp_path / "loopobs-demo" / "demo.html").is_file()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
