"""Event logs of any size for replay tests, fast: one recorded run, copied with fresh ids.

The template is ``tests._emit.full_run`` recorded through ``JsonlRecorder``
(every non-parking hook, 8 spans). Each copy gets its own run and session ids
and a later clock, so runs never overlap; the copies are re-encoded through the
real encoder, so the log is exactly what a recorder writes.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs.exporters.jsonl import JsonlRecorder, replay
from loopobs.exporters.tracing import TracingObserver
from tests._emit import T0, full_run


@dataclass(frozen=True)
class LogShape:
    """What a generated log holds."""

    events: int
    spans: int
    """Spans of the complete runs."""
    runs: int
    first_ns: int
    last_ns: int


def _template() -> list[dict[str, object]]:
    stream = io.StringIO()
    recorder = JsonlRecorder(stream)
    asyncio.run(full_run(recorder))
    recorder.force_flush()
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def spans_per_run() -> int:
    """Spans the template run gives when replayed."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    stream = io.StringIO()
    recorder = JsonlRecorder(stream)
    asyncio.run(full_run(recorder))
    recorder.force_flush()
    replay(io.StringIO(stream.getvalue()), TracingObserver(provider, propagate_context=False))
    return len(exporter.get_finished_spans())


def write_log(
    path: Path, runs: int, *, cut_last_after: int | None = None, deltas: int = 1
) -> LogShape:
    """Write ``runs`` copies of the template run to ``path``.

    With ``cut_last_after``, the last run keeps only its first that many events
    (a recorder that crashed mid-run). ``deltas`` streams each text and
    reasoning chunk that many times, as a model streaming token by token does
    (events without spans: the span count stays 8 per run).
    """
    template = []
    for event in _template():
        repeat = deltas if event["hook"] in ("on_text_delta", "on_thinking_delta") else 1
        template.extend([event] * repeat)
    span = template[-1]["time_ns"] - template[0]["time_ns"]  # type: ignore[operator]
    step = int(span) + 1_000_000
    events = 0
    last_ns = T0
    with path.open("w", encoding="utf-8") as fh:
        for index in range(runs):
            run_id, session_id = str(uuid.uuid4()), str(uuid.uuid4())
            shift = index * step
            lines = template
            if cut_last_after is not None and index == runs - 1:
                lines = template[:cut_last_after]
            for event in lines:
                copy = dict(event)
                copy["run_id"] = run_id
                if "session_id" in copy:
                    copy["session_id"] = session_id
                copy["time_ns"] = int(event["time_ns"]) + shift  # type: ignore[call-overload]
                last_ns = copy["time_ns"]  # type: ignore[assignment]
                fh.write(json.dumps(copy, separators=(",", ":")) + "\n")
                events += 1
    per_run = spans_per_run()
    whole = runs if cut_last_after is None else runs - 1
    return LogShape(
        events=events,
        spans=per_run * whole,
        runs=runs,
        first_ns=int(template[0]["time_ns"]),  # type: ignore[call-overload]
        last_ns=int(last_ns),
    )
