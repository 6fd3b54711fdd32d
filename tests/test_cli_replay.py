"""`loopobs replay` / `inspect` against an OTLP/HTTP receiver on 127.0.0.1: nothing lost unsaid.

The receiver (``tests._otlp_sink``) decodes every request with the official
protobuf classes, so the counts below are what arrived, not what was sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopobs.cli import escape_for_terminal, main
from loopobs.exporters import jsonl
from tests._otlp_sink import OtlpSink, otlp_sink
from tests._replay_logs import write_log

STATUS_ERROR = 2  # OTLP Status.STATUS_CODE_ERROR


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


@pytest.fixture
def sink(monkeypatch: pytest.MonkeyPatch) -> Iterator[OtlpSink]:
    with otlp_sink() as receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
        yield receiver


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow  # one of the longest of the suite: `make unit-fast` leaves it out
def test_replay_waits_for_a_slow_receiver_and_loses_nothing(
    sink: OtlpSink, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """More spans than the 2,048-span queue, a receiver slower than replay: all arrive."""
    log = tmp_path / "big.jsonl"
    shape = write_log(log, 700)
    assert shape.spans > 2 * 2048
    sink.delay_s = 0.5
    assert main(["replay", str(log)]) == 0
    out = capsys.readouterr().out
    assert len(sink.spans) == shape.spans
    assert len({s.span_id for s in sink.spans}) == shape.spans
    assert f"replayed {shape.events} events" in out
    assert f"{shape.spans} spans exported" in out


def test_receiver_answering_404_is_a_failure(
    sink: OtlpSink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every export refused (a path the receiver answers 404): exit 1, one line, no success."""
    log = tmp_path / "log.jsonl"
    write_log(log, 20)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{sink.url}/wrong/v1/traces")
    assert main(["replay", str(log)]) == 1
    captured = capsys.readouterr()
    assert "replayed" not in captured.out
    err = captured.err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("loopobs: error:")
    assert "refused" in err[0]
    assert sink.spans == []
    assert "/wrong/v1/traces" in sink.paths


def test_endpoint_without_scheme_is_a_failure(
    sink: OtlpSink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``host:port`` passes a TCP check but no OTLP/HTTP exporter accepts it: exit 1."""
    log = tmp_path / "log.jsonl"
    write_log(log, 2)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", sink.url.removeprefix("http://"))
    assert main(["replay", str(log)]) == 1
    captured = capsys.readouterr()
    assert "replayed" not in captured.out
    assert captured.err.count("\n") == 1
    assert "needs a scheme" in captured.err


def test_unfinished_run_ends_at_its_last_event_as_incomplete(
    sink: OtlpSink, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A log cut mid-run: the run's spans end at its last recorded event, marked incomplete."""
    log = tmp_path / "cut.jsonl"
    shape = write_log(log, 3, cut_last_after=12)
    events = _lines(log)
    cut_run = events[-1]["run_id"]
    assert main(["replay", str(log)]) == 0
    assert "1 unfinished runs closed at their last event" in capsys.readouterr().out
    assert max(s.end_ns for s in sink.spans) == shape.last_ns
    roots = [s for s in sink.spans if not s.parent_span_id]
    assert len(roots) == 3
    cut_trace = {
        s.trace_id for s in sink.spans if s.attributes.get("loopobs.run.id") == cut_run
    } or {r.trace_id for r in roots if r.end_ns == shape.last_ns}
    (cut_root,) = [r for r in roots if r.trace_id in cut_trace]
    assert cut_root.end_ns == shape.last_ns
    assert cut_root.status_code == STATUS_ERROR
    assert cut_root.attributes["error.type"] == "RunIncomplete"
    complete = [r for r in roots if r is not cut_root]
    assert all(r.status_code != STATUS_ERROR for r in complete)


def test_ctrl_c_flushes_what_was_read_and_exits_130(
    sink: OtlpSink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Ctrl-C at event 100: the runs read so far arrive (the open one closed), exit 130."""
    log = tmp_path / "log.jsonl"
    write_log(log, 10)
    events = _lines(log)
    real = jsonl.decode_event
    calls = 0

    def interrupted(line: str | bytes) -> Any:
        nonlocal calls
        calls += 1
        if calls == 101:
            raise KeyboardInterrupt
        return real(line)

    monkeypatch.setattr(jsonl, "decode_event", interrupted)
    assert main(["replay", str(log)]) == 130
    err = capsys.readouterr().err
    assert "interrupted after 100 events" in err
    assert "spans exported" in err
    read = events[:100]
    runs = {e["run_id"] for e in read}
    assert len({s.trace_id for s in sink.spans}) == len(runs) == 4
    assert max(s.end_ns for s in sink.spans) == read[-1]["time_ns"]


def test_replay_sends_traces_only_unless_metrics_are_asked_for(
    sink: OtlpSink, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Spans keep the recorded timestamps; metrics (stamped now) only with --metrics."""
    log = tmp_path / "log.jsonl"
    shape = write_log(log, 2)
    assert main(["replay", str(log)]) == 0
    assert "/v1/metrics" not in sink.paths
    assert min(s.start_ns for s in sink.spans) == shape.first_ns
    assert max(s.end_ns for s in sink.spans) == shape.last_ns
    assert main(["replay", "--metrics", str(log)]) == 0
    assert "/v1/metrics" in sink.paths


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "loopobs-demo"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs"}, "from-attrs"),
        ({"OTEL_SERVICE_NAME": "from-env"}, "from-env"),
    ],
)
def test_replay_keeps_the_standard_service_name(
    sink: OtlpSink,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    expected: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    log = tmp_path / "log.jsonl"
    write_log(log, 1)
    assert main(["replay", str(log)]) == 0
    assert {s.resource["service.name"] for s in sink.spans} == {expected}


HOSTILE = "\x1b]0;pwned\x07\x1b[2J\rFAKE: all tests passed\n$ \u202eevil\ud800"


def _hostile_log(path: Path) -> None:
    write_log(path, 1)
    lines = _lines(path)
    for event in lines:
        if event.get("tool") == "add":
            event["tool"] = HOSTILE
    path.write_text("\n".join(json.dumps(e) for e in lines) + "\n")


@pytest.mark.parametrize("command", ["inspect", "replay"])
def test_log_text_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """Escape sequences, bidi overrides and line breaks from a log are printed escaped."""
    log = tmp_path / "hostile.jsonl"
    _hostile_log(log)
    assert main([command, str(log)]) == 0
    out = capsys.readouterr().out
    for raw in ("\x1b", "\x07", "\r", "\u202e", "\ud800"):
        assert raw not in out
    assert "\\x1b]0;pwned\\x07" in out
    assert not any(line.startswith(("FAKE", "$ ")) for line in out.splitlines())
    assert escape_for_terminal(HOSTILE) in out
