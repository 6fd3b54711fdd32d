"""The HTML run report: folding a log into runs, the page it writes, and the CLI around it."""

from __future__ import annotations

import itertools
import json
import re
import uuid
from pathlib import Path

import pytest

from loopobs.cli import main
from loopobs.contract.errors import ToolExecutionError
from loopobs.contract.events import (
    RunStartContext,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    ToolPreContext,
    TurnStartContext,
)
from loopobs.exporters.jsonl import encode_event, replay
from loopobs.report import fold_runs, render_report, write_report
from loopobs.testing import RecordingObserver

DEMO_LOG = Path(__file__).parent / "data" / "report-demo.jsonl"


def _events(path: Path) -> list:  # type: ignore[type-arg]
    recorder = RecordingObserver()
    replay(path, recorder)
    return [ctx for _, ctx in recorder.events]


def _payload(html: str) -> dict:  # type: ignore[type-arg]
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', html, re.S
    )
    assert match is not None
    data: dict = json.loads(match.group(1))  # type: ignore[type-arg]
    return data


def test_demo_log_folds_into_its_runs() -> None:
    """Every run of the demo log becomes one record with its status, turns, bars and markers."""
    events = _events(DEMO_LOG)
    runs = fold_runs(events)
    assert len(runs) == len({e.run_id for e in events}) == 15
    by_status: dict[str, int] = {}
    for run in runs:
        by_status[run.status] = by_status.get(run.status, 0) + 1
    assert by_status == {
        "completed": 11,
        "loop_detected": 1,
        "sleeping": 1,
        "suspended": 1,
        "budget_exceeded": 1,
    }
    looping = next(r for r in runs if r.status == "loop_detected")
    kinds = [bar[0] for bar in looping.bars]
    assert kinds.count("turn") == looping.turns == 10
    assert kinds.count("chat") == 10
    assert kinds.count("tool") == 10
    assert looping.error is not None
    assert looping.error.startswith("LoopDetected: ")
    assert [m[0] for m in looping.marks] == ["loop detected", "loop detected"]
    assert "stop" in looping.marks[-1][2]
    # Every chat bar of a successful stream has its time to first chunk, inside the bar.
    for index, bar in enumerate(looping.bars):
        if bar[0] == "chat":
            assert bar[2] <= bar[2] + looping.ttft[index] <= bar[3]
    # Tokens add up to the run's own totals.
    end = next(
        e
        for e in events
        if e.run_id.hex == uuid.UUID(looping.run_id).hex and e.hook == "on_run_end"
    )
    assert looping.tokens[0] == end.input_tokens
    assert looping.tokens[1] == end.output_tokens
    # Priced calls: the run's cost is its own total, and each turn's cost is summed per turn.
    priced = [r for r in runs if r.cost is not None]
    assert priced
    assert all(r.cost is not None and r.cost > 0 for r in priced)
    assert any(t[5] is not None for r in priced for t in r.turn_totals.values())
    labels = {m[0] for r in runs for m in r.marks}
    assert {
        "fallback",
        "model switch",
        "compaction",
        "parked",
        "sleeping",
        "convergence",
        "budget",
    } <= labels


def test_parallel_tools_overlap_and_errors_are_readable() -> None:
    """Parallel tool calls are drawn as overlapping bars; a failed call carries its error text."""
    runs = fold_runs(_events(DEMO_LOG))
    overlapping = 0
    for run in runs:
        tools = [b for b in run.bars if b[0] == "tool"]
        overlapping += sum(1 for a, b in itertools.pairwise(tools) if b[2] < a[3])
    assert overlapping >= 1
    errors = [b for r in runs for b in r.bars if b[0] == "tool" and b[5] == "error"]
    assert errors
    assert all(b[6] and ":" in b[6] for b in errors)


def test_an_unfinished_run_closes_at_its_last_event() -> None:
    """A log cut off mid-run: the run ends at its last event, marked incomplete, bars closed."""
    run_id, t0 = uuid.uuid4(), 1_000_000_000
    events = [
        RunStartContext(run_id=run_id, time_ns=t0, session_id=run_id),
        TurnStartContext(run_id=run_id, time_ns=t0 + 1_000_000, turn=0),
        StreamStartContext(run_id=run_id, time_ns=t0 + 2_000_000, turn=0, model="m"),
        StreamSuccessContext(
            run_id=run_id, time_ns=t0 + 7_000_000, turn=0, model="m", input_tokens=5
        ),
        ToolPreContext(run_id=run_id, time_ns=t0 + 8_000_000, turn=0, tool="t", tool_call_id="a"),
    ]
    (run,) = fold_runs(events)
    assert run.status == "incomplete"
    assert run.end_ms == 8.0
    assert run.error is not None
    assert "incomplete" in run.error
    assert [bar[5] for bar in run.bars] == ["open", "ok", "open"]
    assert all(bar[3] == 8.0 for bar in run.bars if bar[5] == "open")


def test_content_appears_only_where_the_log_has_it_and_can_be_left_out(tmp_path: Path) -> None:
    """Content is in the page (behind the toggle) by default, and absent with content=False."""
    with_content = tmp_path / "with.html"
    without = tmp_path / "without.html"
    write_report(DEMO_LOG, with_content)
    write_report(DEMO_LOG, without, content=False)
    data = _payload(with_content.read_text(encoding="utf-8"))
    assert data["hasContent"] is True
    labels = [c[0] for r in data["runs"] for c in r["content"]]
    assert any(label.endswith("· query") for label in labels)
    assert any(label.endswith("arguments") for label in labels)
    bare = _payload(without.read_text(encoding="utf-8"))
    assert bare["hasContent"] is False
    assert all(r["content"] == [] for r in bare["runs"])
    query = next(e.query for e in _events(DEMO_LOG) if e.hook == "on_turn_start" and e.query)
    assert query not in without.read_text(encoding="utf-8")


def test_the_page_is_self_contained_and_hostile_text_stays_text(tmp_path: Path) -> None:
    """No external resource; a tool name that closes the script tag cannot inject markup."""
    run_id = uuid.uuid4()
    hostile = "</script><script>alert(1)</script><!--"
    log = tmp_path / "hostile.jsonl"
    events = [
        RunStartContext(run_id=run_id, time_ns=1, session_id=run_id, agent=hostile),
        ToolPreContext(run_id=run_id, time_ns=2, turn=0, tool=hostile, tool_call_id="x"),
        ToolPostContext(
            run_id=run_id,
            time_ns=3,
            turn=0,
            tool=hostile,
            tool_call_id="x",
            is_error=True,
            outcome="error",
            error=ToolExecutionError(hostile, tool=hostile),
        ),
    ]
    log.write_text("".join(encode_event(e) + "\n" for e in events), encoding="utf-8")
    out = tmp_path / "hostile.html"
    write_report(log, out)
    html = out.read_text(encoding="utf-8")
    assert html.count("<script") == 2  # the data block and the page's own script
    assert "alert(1)" in html
    assert "<script>alert" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "default-src 'none'" in html
    assert _payload(html)["runs"][0]["agent"] == hostile


def test_render_is_stable_for_a_fixed_time() -> None:
    """The same runs and generation time give the same page, byte for byte."""
    import datetime as dt

    runs = fold_runs(_events(DEMO_LOG))
    when = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    assert render_report(runs, generated=when) == render_report(runs, generated=when)


def test_report_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`loopobs report LOG` writes LOG.html (or -o) and says so; it never overwrites the log."""
    log = tmp_path / "run.jsonl"
    log.write_bytes(DEMO_LOG.read_bytes())
    assert main(["report", str(log)]) == 0
    assert (tmp_path / "run.html").stat().st_size > 10_000
    assert "15 runs, 430 events" in capsys.readouterr().out
    assert main(["report", str(log), "-o", str(tmp_path / "x.html"), "--no-content"]) == 0
    assert _payload((tmp_path / "x.html").read_text(encoding="utf-8"))["hasContent"] is False
    capsys.readouterr()
    assert main(["report", str(log), "-o", str(log)]) == 1
    assert "would overwrite the log" in capsys.readouterr().err
    log.write_text(log.read_text() + "{not json\n")
    assert main(["report", str(log)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "run.jsonl:431" in err
    assert main(["report", str(log), "--skip-invalid"]) == 0
    assert "1 malformed lines skipped" in capsys.readouterr().out


def test_demo_exit_writes_log_report_and_where_to_look(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`demo --exit` plays once; writes the log, its report and a Prometheus config; says where."""
    out = tmp_path / "out"
    assert (
        main(
            [
                "demo",
                "--exit",
                "--out",
                str(out),
                "--metrics-port",
                "0",
                "--no-live",
                "--quiet",
                "--seed",
                "1",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert (out / "demo.jsonl").stat().st_size > 0
    assert (out / "demo.html").stat().st_size > 0
    assert 'targets: ["127.0.0.1:' in (out / "prometheus.yml").read_text()
    assert "Where to look:" in text
    for what in (
        "metrics     http://127.0.0.1:",
        "report      file://",
        "event log   ",
        "prometheus  prometheus --config.file=",
        "dashboards  ",
    ):
        assert what in text
    assert "until Ctrl-C" not in text


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["demo", "--latency", "-1"], "-1 is not a duration"),
        (["demo", "--latency", "soon"], "'soon' is not a number of seconds"),
        (["demo", "--runs", "x"], "'x' is not a whole number"),
        (["demo", "--runs", "0"], "0 is not at least 1"),
        (["demo", "--metrics-port", "http"], "'http' is not a whole number"),
        (["demo", "--seed", "1.5"], "'1.5' is not a whole number"),
    ],
)
def test_argument_errors_name_no_internals(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad values end with one line that says what is wrong, never an internal function name."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert expected in err
    assert "invalid _" not in err
    assert "_positive" not in err
    assert "_seconds" not in err


def test_replay_without_an_exporter_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no OTLP endpoint configured, replay says it only shows the console view."""
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["replay", str(DEMO_LOG)]) == 0
    err = capsys.readouterr().err
    assert "no exporter configured" in err
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in err


def _report_to(target: Path, capsys: pytest.CaptureFixture[str]) -> str:
    log = target.parent / "run.jsonl"
    if not log.exists():
        log.write_bytes(DEMO_LOG.read_bytes())
    assert main(["report", str(log), "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    return err


def test_report_output_is_never_a_fifo_symlink_or_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-o writes only to a regular file or a new path; anything else is refused, untouched."""
    import os
    import stat

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is a FIFO, not a regular file" in _report_to(fifo, capsys)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)

    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    link = tmp_path / "link.html"
    link.symlink_to(precious)
    assert "is a symbolic link" in _report_to(link, capsys)
    assert link.is_symlink()
    assert precious.read_text() == "keep"

    dangling = tmp_path / "dangling.html"
    dangling.symlink_to(tmp_path / "nowhere")
    assert "is a symbolic link" in _report_to(dangling, capsys)
    assert not (tmp_path / "nowhere").exists()

    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pass  # no CAP_MKNOD here: the kinds above cover the check
    else:
        assert "is a character device" in _report_to(device, capsys)
        assert stat.S_ISCHR(os.lstat(device).st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # nothing left over


def test_report_replaces_a_regular_file_whole_and_keeps_its_mode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os
    import stat

    log = tmp_path / "run.jsonl"
    log.write_bytes(DEMO_LOG.read_bytes())
    target = tmp_path / "old.html"
    target.write_text("old report")
    target.chmod(0o640)
    assert main(["report", str(log), "-o", str(target)]) == 0
    assert _payload(target.read_text(encoding="utf-8"))["runs"]
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.html", "run.jsonl"]


def _session_log() -> tuple[uuid.UUID, list]:  # type: ignore[type-arg]
    from loopobs.contract.events import (
        BackpressureContext,
        RunEndContext,
        RunStatus,
        SessionResetContext,
        TurnEndContext,
    )

    session, run = uuid.uuid4(), uuid.uuid4()
    t = 1_700_000_000_000_000_000
    events = [
        BackpressureContext(
            run_id=session,
            time_ns=t,
            queue="inbox",
            outcome="saturated",
            capacity=2,
            policy="block",
        ),
        RunStartContext(run_id=run, time_ns=t + 1, session_id=session, agent="a", model="m"),
        TurnStartContext(run_id=run, time_ns=t + 2, turn=0),
        TurnEndContext(run_id=run, time_ns=t + 3, turn=0, success=True),
        RunEndContext(run_id=run, time_ns=t + 4, success=True, status=RunStatus.COMPLETED),
        SessionResetContext(run_id=session, time_ns=t + 5, epoch=1, discarded=2),
        BackpressureContext(
            run_id=session,
            time_ns=t + 6,
            queue="inbox",
            outcome="rejected",
            capacity=2,
            policy="block",
        ),
    ]
    return session, events


def test_session_events_belong_to_their_session_not_to_an_incomplete_run(tmp_path: Path) -> None:
    """on_backpressure / on_session_reset carry the session's id: no run is made of them."""
    from loopobs.report import fold_log

    session, events = _session_log()
    folded = fold_log(events)
    assert [r.status for r in folded.runs] == ["completed"]
    assert fold_runs(events) == folded.runs
    assert folded.runs[0].session == str(session)
    (record,) = folded.sessions
    assert record.session_id == str(session)
    assert record.counts == {"inbox saturated": 1, "reset": 1, "inbox rejected": 1}
    assert [e[1] for e in record.events] == ["inbox saturated", "reset", "inbox rejected"]
    assert "2 discarded" in record.events[1][2]

    log = tmp_path / "session.jsonl"
    log.write_text("".join(encode_event(e) + "\n" for e in events))
    out = tmp_path / "session.html"
    stats = write_report(log, out)
    assert stats.runs == 1
    payload = _payload(out.read_text(encoding="utf-8"))
    assert [r["status"] for r in payload["runs"]] == ["completed"]
    assert payload["runs"][0]["session"] == str(session)
    assert payload["sessions"][0]["counts"]["reset"] == 1
