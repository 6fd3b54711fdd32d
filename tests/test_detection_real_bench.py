"""bench/bench_real_trajectories.py on a tiny set of our own (the real set is third-party and
not in the repository): the judging, the figures it returns, and its skip."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench import bench_real_trajectories as bench
from tests._real_trajectories import ENV_VAR, needs_real_trajectories


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
            # Silent edits, each followed by the same failing test run: progress.
            "ops": [
                op
                for n in range(1, 13)
                for op in (
                    {
                        "op": "call",
                        "tool": "bash",
                        "args": {"command": f"sed -i '{n}d' a.py"},
                        "result": "",
                    },
                    {
                        "op": "call",
                        "tool": "bash",
                        "args": {"command": "python -m pytest -q"},
                        "result": "FAILED tests/test_a.py::test_lines - 3 != 2",
                    },
                )
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
    assert figures["spellings_unchanged"] == list(bench.SPELLINGS)
    out = capsys.readouterr().out
    assert "latency to warn, ops from loop_start: median 1" in out
    assert "| repeat | 0 | 0 | 1 | 1 |" in out
    assert f"spellings judged as the records are: {len(bench.SPELLINGS)} of" in out


def test_each_spelling_changes_only_what_it_names() -> None:
    """A respelling keeps the ops and their order; only the tool's name, the command
    line's wrapping or the way the exit code is printed changes."""
    result = "<returncode>1</returncode>\n<output>\nx\n</output>"
    op = {"op": "call", "tool": "bash", "args": {"command": "ls -la", "program": "ls"}}
    edit = {
        "op": "call",
        "tool": "str_replace_editor str_replace",
        "args": {"command": "str_replace", "path": "/r/a.py", "old_str": "x", "new_str": "y"},
        "result": "ERROR:\nNo replacement was performed, old_str `x` did not appear verbatim.",
    }
    answer = {"op": "answer", "text": "done"}
    record = bench.Record("r", False, None, False, ({**op, "result": result}, edit, answer))
    seen = {}
    for name, spelling in bench.SPELLINGS.items():
        call, edited, said = bench.respelled([record], spelling)[0].ops
        assert said == answer
        seen[name] = (call["tool"], call["args"], call["result"], edited)
    assert seen["shell tool named mytool (known by its arguments)"][:2] == (
        "mytool",
        {"command": "ls -la"},
    )
    assert seen["the line in a cmd argument of a shell tool"][:2] == ("shell", {"cmd": "ls -la"})
    assert seen["every line as bash -lc '…' (Codex-style)"][1]["command"] == "bash -lc 'ls -la'"
    assert seen['every line as bash -lc "…" (double quotes)'][1]["command"] == 'bash -lc "ls -la"'
    assert seen["exit codes as OpenHands prints them"][2] == (
        "x\n\n[The command completed with exit code 1.]"
    )
    bash = seen["shell calls as Claude Code sends them (Bash, a description worded anew each call)"]
    assert bash[0] == "Bash"
    assert list(bash[1]) == ["command", "description"]
    assert bash[1]["command"] == "ls -la"
    gemini = seen[
        "shell calls as Gemini CLI sends them (run_shell_command, description, directory)"
    ]
    assert (gemini[0], gemini[1]["command"], gemini[1]["directory"]) == (
        "run_shell_command",
        "ls -la",
        "/testbed",
    )
    openhands = seen[
        "shell calls as OpenHands sends them (execute_bash, a timeout that changes each call)"
    ]
    assert openhands[:2] == ("execute_bash", {"command": "ls -la", "timeout": 30})
    # Worded anew each call: the same line twice is described two ways.
    twice = bench.Record("r", False, None, False, (op, op))
    narrate = bench.SPELLINGS[
        "shell calls as Claude Code sends them (Bash, a description worded anew each call)"
    ]
    first, second = bench.respelled([twice], narrate)[0].ops
    assert first["args"]["description"] != second["args"]["description"]
    claude = seen["editor calls as Claude Code sends them (Edit, Read, Write)"][3]
    assert (claude["tool"], claude["args"]) == (
        "Edit",
        {"file_path": "/r/a.py", "old_string": "x", "new_string": "y"},
    )
    assert claude["result"].startswith("<tool_use_error>String to replace not found")
    assert len(set(map(repr, seen.values()))) == len(seen)


@needs_real_trajectories
def test_every_spelling_of_the_real_calls_is_judged_as_they_are() -> None:
    """The detectors' rules hold on what a call does, not on the records' names: renamed
    shell and editor tools, a ``cmd`` argument, ``bash -lc`` / ``cd`` / ``timeout``
    wrapping, exit codes printed as other harnesses print them give the same figures on
    the real set (before: 7 of 10)."""
    records = bench.load(Path(os.environ[ENV_VAR]))
    as_is, _ = bench.judge(records)
    for name, spelling in bench.SPELLINGS.items():
        q, _ = bench.judge(bench.respelled(records, spelling))
        assert (q.warn_p, q.warn_r, q.stop_p, q.stop_r) == (
            as_is.warn_p,
            as_is.warn_r,
            as_is.stop_p,
            as_is.stop_r,
        ), name
        assert (q.productive_warned, q.productive_stopped) == (
            as_is.productive_warned,
            as_is.productive_stopped,
        ), name


def test_the_bench_skips_without_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(bench.ENV_VAR, str(tmp_path / "absent.jsonl"))
    assert bench.main([]) is None
    assert "skipped: no real trajectories" in capsys.readouterr().out
