"""`loopobs demo --framework langgraph`: a LangGraph agent through the adapter, offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopobs.cli import main
from loopobs.exporters.jsonl import replay
from loopobs.testing import RecordingObserver, assert_contract


def test_the_langgraph_demo_runs_offline_and_stops_the_runaway_loop(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three LangGraph runs: completed, completed with a failed tool, stopped as a loop;
    the event log keeps the contract and `loopobs inspect` reads it."""
    log = tmp_path / "demo.jsonl"
    code = main(
        [
            "demo",
            "--framework",
            "langgraph",
            "--exit",
            "--metrics-port",
            "0",
            "--jsonl",
            str(log),
            "--out",
            str(tmp_path),
            "--no-live",
            "--seed",
            "1",
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "the graph was stopped: stopped: the tool call pattern booking_status(args#" in out
    recorder = RecordingObserver()
    replay(log, recorder)
    assert_contract(recorder.events)
    ends = recorder.of("on_run_end")
    assert [e.status for e in ends] == ["completed", "completed", "loop_detected"]
    assert {json.loads(line)["hook"] for line in log.read_text().splitlines()} >= {
        "on_stream_success",
        "on_tool_post",
        "on_loop_detected",
    }
    assert main(["inspect", str(log)]) == 0
    assert "langgraph-travel" in capsys.readouterr().out
