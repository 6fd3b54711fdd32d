"""The ``loopobs`` command: demo, replay, inspect, and their errors."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import HOOKS
from loopobs.cli import main
from loopobs.demo.showcase import SCENARIOS, Showcase
from loopobs.exporters.jsonl import JsonlRecorder, replay
from loopobs.exporters.tracing import TracingObserver


def _hooks_in(path: Path) -> set[str]:
    return {json.loads(line)["hook"] for line in path.read_text().splitlines() if line.strip()}


def test_demo_records_every_hook(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --runs 1` exits 0 and its event log holds every hook of the contract."""
    log = tmp_path / "demo.jsonl"
    code = main(
        [
            "demo",
            "--runs",
            "1",
            "--metrics-port",
            "0",
            "--jsonl",
            str(log),
            "--no-live",
            "--seed",
            "3",
        ]
    )
    assert code == 0
    assert _hooks_in(log) == set(HOOKS)
    out = capsys.readouterr().out
    assert "/metrics on http://127.0.0.1:" in out
    assert "summary:" in out
    assert "loop_detected" in out  # the runaway scenario's tree


def _tree(spans: tuple[ReadableSpan, ...]) -> list[tuple[Any, ...]]:
    """Spans as comparable rows: name, parent name path, times, attributes, status, events."""
    by_id = {s.context.span_id: s for s in spans}

    def path(span: ReadableSpan) -> tuple[str, ...]:
        names: list[str] = []
        parent = span.parent
        while parent is not None and parent.span_id in by_id:
            names.append(by_id[parent.span_id].name)
            parent = by_id[parent.span_id].parent
        return tuple(reversed(names))

    rows = []
    for s in spans:
        rows.append(
            (
                s.name,
                path(s),
                s.start_time,
                s.end_time,
                s.status.status_code,
                tuple(sorted((k, str(v)) for k, v in (s.attributes or {}).items())),
                tuple((e.name, e.timestamp) for e in s.events),
            )
        )
    return sorted(rows, key=lambda r: (r[2] or 0, r[0]))


async def test_replay_gives_the_live_span_tree(tmp_path: Path) -> None:
    """Replaying a recorded showcase into a fresh TracingObserver rebuilds the live span tree."""
    live_spans = InMemorySpanExporter()
    live_provider = TracerProvider()
    live_provider.add_span_processor(SimpleSpanProcessor(live_spans))
    log = tmp_path / "events.jsonl"
    recorder = JsonlRecorder(log)
    showcase = Showcase([TracingObserver(live_provider), recorder], random.Random(7))
    for scenario in SCENARIOS.values():
        await scenario(showcase)
    recorder.shutdown()

    replayed_spans = InMemorySpanExporter()
    replay_provider = TracerProvider()
    replay_provider.add_span_processor(SimpleSpanProcessor(replayed_spans))
    stats = replay(log, TracingObserver(replay_provider, propagate_context=False))
    assert stats.skipped == 0
    live = _tree(live_spans.get_finished_spans())
    again = _tree(replayed_spans.get_finished_spans())
    assert len(live) > 40
    assert again == live


def test_inspect_shows_each_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`inspect` prints one tree per recorded run, and the totals."""
    log = tmp_path / "demo.jsonl"
    assert (
        main(["demo", "--exit", "--metrics-port", "0", "--jsonl", str(log), "--no-live", "--quiet"])
        == 0
    )
    capsys.readouterr()
    run_ids = {json.loads(line)["run_id"] for line in log.read_text().splitlines()}
    assert main(["inspect", str(log)]) == 0
    out = capsys.readouterr().out
    for run_id in run_ids:
        assert f"run {run_id[:8]}" in out
    assert f"total: {len(run_ids)} runs" in out
    assert "⚠ loop detected" in out
    assert "⏸ suspended by request_approval" in out
    # cost per run and per turn, unknown for the unpriced fallback model, and the budget stop
    assert re.search(r"budget_exceeded  turns=\d+  .*  cost \$0\.\d+$", out, re.MULTILINE)
    assert re.search(r"├─ turn 0  ok  .*  cost \$0\.\d+$", out, re.MULTILINE)
    assert re.search(r"chat claude-haiku #1  ok  .*  cost unknown$", out, re.MULTILINE)
    assert "⛔ run budget exceeded: usd" in out
    assert re.search(
        r"; cost unknown \(\d+ unpriced calls, \$0\.\d+ priced\); "
        r"budget stops 1$",
        out,
        re.MULTILINE,
    )


def test_bad_flags_give_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown flags and bad values end with one line on stderr and exit code 2."""
    for argv in (["demo", "--bogus"], ["demo", "--metrics-port", "99999"], ["demo", "--runs", "0"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert err[0].startswith("loopobs")


def test_unreachable_model_server_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """An unreachable --base-url gives a one-line error and exit code 1."""
    code = main(
        [
            "demo",
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--no-live",
            "--metrics-port",
            "0",
        ]
    )
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [err[0]]
    assert "cannot reach the model server" in err[0]


def test_unreachable_otlp_endpoint_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreachable OTLP endpoint gives a one-line error and exit code 1."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9")
    assert main(["demo", "--no-live", "--metrics-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "cannot reach the OTLP endpoint" in err


def test_metrics_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A /metrics port already taken gives a one-line error and exit code 1."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["demo", "--no-live", "--metrics-port", str(port)]) == 1
    assert "cannot serve /metrics" in capsys.readouterr().err


def test_malformed_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed event log gives a one-line error naming the line; --skip-invalid skips it."""
    log = tmp_path / "bad.jsonl"
    assert (
        main(["demo", "--exit", "--metrics-port", "0", "--jsonl", str(log), "--no-live", "--quiet"])
        == 0
    )
    lines = log.read_text().splitlines()
    lines.insert(3, '{"hook": "on_nothing"}')
    log.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["inspect", str(log)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert f"{log}:4:" in err
    assert main(["inspect", "--skip-invalid", str(log)]) == 0
    assert "1 malformed lines skipped" in capsys.readouterr().out
    assert main(["replay", str(tmp_path / "missing.jsonl")]) == 1


def test_missing_extras_give_an_install_hint(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without prometheus-client the demo says which extra to install, in one line."""
    import builtins

    real_import = builtins.__import__

    def blocked(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "loopobs.exporters.metrics_server":
            raise ModuleNotFoundError(
                "No module named 'prometheus_client'", name="prometheus_client"
            )
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
    assert main(["demo", "--no-live", "--metrics-port", "0"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "prometheus_client is not installed" in err
    assert "loopobs[all]" in err
