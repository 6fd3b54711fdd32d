"""bench/bench_real_trajectories.py on a tiny set of our own (the real set is third-party and
not in the repository): the judging, the figures it returns, and its skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_real_trajectories as bench


def _write(path: Path) -> Path:
    same = {
        "op": "call",
        "tool": "sql",
        "args": {"query": "SELECT name FROM teachers"},
        "result": "Error executing query: Table 'school.teachers' doesn't exist",
    }
    records = [
        {
            "id": "loop/1",
            "label": "runaway",
            "loop_start": 3,
            "borderline": False,
            "ops": [same] * 8,
        },
        {
            "id": "ok/1",
            "label": "productive",
            "loop_start": None,
            "borderline": False,
            "ops": [
                {
                    "op": "call",
                    "tool": "bash",
                    "args": {"command": f"sed -i '{n}d' a.py"},
                    "result": "",
                }
                for n in range(1, 13)
            ]
            + [{"op": "answer", "text": "Removed the twelve stale lines."}],
        },
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_the_bench_judges_as_the_sets_readme_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runaway stopped, a productive run untouched; latency counted from loop_start."""
    figures = bench.main(["--quick", "--path", str(_write(tmp_path / "set.jsonl"))])
    assert figures is not None
    assert (figures["warn_precision"], figures["warn_recall"]) == (1.0, 1.0)
    assert (figures["stop_precision"], figures["stop_recall"]) == (1.0, 1.0)
    assert figures["productive_warned"] == figures["productive_stopped"] == []
    assert figures["call_ns"] > 0
    assert figures["answer_ns"] > 0
    out = capsys.readouterr().out
    assert "latency to warn, ops from loop_start: median 1" in out
    assert "| repeat | 0 | 0 | 1 | 1 |" in out


def test_the_bench_skips_without_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(bench.ENV_VAR, str(tmp_path / "absent.jsonl"))
    assert bench.main([]) is None
    assert "skipped: no real trajectories" in capsys.readouterr().out
