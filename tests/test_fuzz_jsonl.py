"""Fuzzing the JSONL event log reader: random and mutated bytes give only ``ReplayError``
(a ``ValueError``), never another exception, and no intact line is ever lost.

(The SSE parsers and both HTTP clients are fuzzed in ``tests/test_sse.py`` and
``tests/test_llm_*.py``; deep nesting in their JSON is in ``tests/test_fuzz_llm.py``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs import AgentLoop
from loopobs.exporters import JsonlRecorder, ReplayError, replay
from loopobs.exporters.jsonl import decode_event
from loopobs.llm import ScriptedClient
from loopobs.testing import RecordingObserver
from tests._reliability import lookup, tool_script


@cache
def good_lines() -> tuple[bytes, ...]:
    """The event log of a real two-turn run with text, a tool call and usage."""
    stream = io.StringIO()
    recorder = JsonlRecorder(stream)
    loop = AgentLoop(
        ScriptedClient(tool_script(1), chunk_size=4),
        model="m1",
        tools=[lookup],
        observers=[recorder],
    )
    assert asyncio.run(loop.run("what is it? ünïcødé ✓")).ok
    recorder.force_flush()
    return tuple(line.encode() for line in stream.getvalue().splitlines())


def mutate(data: st.DataObject, line: bytes) -> bytes:
    """``line`` with 1-4 byte-level edits: flip, insert, delete, truncate, or splice."""
    buf = bytearray(line)
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        if not buf:
            buf.extend(data.draw(st.binary(min_size=1, max_size=8)))
            continue
        at = data.draw(st.integers(0, len(buf) - 1), label="at")
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "truncate", "splice"]))
        if action == "flip":
            buf[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "insert":
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del buf[at]
        elif action == "truncate":
            del buf[at:]
        else:
            buf[at:at] = data.draw(
                st.sampled_from(
                    [
                        b'"',
                        b"\\",
                        b"{",
                        b"}",
                        b"[",
                        b"]",
                        b",",
                        b":",
                        b"null",
                        b"1e999",
                        b"-",
                        b"\xff",
                        b"\xed\xa0\x80",
                        b"\\ud800",
                        b"\x00",
                        b"\n",
                        b"\r",
                    ]
                )
            )
    return bytes(buf)


_LOG: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def log_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The file the tests write their logs to (replay reads a path as bytes, line by line)."""
    path = tmp_path_factory.mktemp("fuzz") / "log.jsonl"
    _LOG[:] = [path]
    return path


def _file(blob: bytes) -> Path:
    """``blob`` written to the module's log file."""
    path = _LOG[0]
    path.write_bytes(blob)
    return path


def _replay(blob: bytes, *, skip: bool) -> tuple[RecordingObserver, int | None]:
    """Replay ``blob``; the recorder and, if replay stopped, the failing line number."""
    rec = RecordingObserver()
    stopped: ReplayError | None = None
    try:
        stats = replay(_file(blob), rec, skip_invalid=skip)
    except ReplayError as err:
        stopped = err
    if stopped is not None:
        assert not skip
        return rec, stopped.line_no
    assert stats.events == len(rec.events)
    return rec, None


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_lines_lose_no_intact_line(data: st.DataObject) -> None:
    """Mutate some lines of a real log: every intact line still replays, in order."""
    lines = list(good_lines())
    chosen = data.draw(st.sets(st.integers(0, len(lines) - 1), min_size=1, max_size=4))
    out = [mutate(data, line) if i in chosen else line for i, line in enumerate(lines)]
    blob = b"\n".join(out) + b"\n"
    rec, stopped = _replay(blob, skip=True)
    assert stopped is None
    intact = [decode_event(line) for i, line in enumerate(lines) if i not in chosen]
    replayed = [ctx for _, ctx in rec.events]
    # The intact events come out in order (mutated lines may add valid events in between).
    it = iter(replayed)
    assert all(any(got == want for got in it) for want in intact)

    strict, stopped = _replay(blob, skip=False)
    if stopped is not None:
        # Everything before the bad line was delivered.
        before = blob.split(b"\n")[: stopped - 1]
        assert len(strict.events) == sum(1 for line in before if line.strip())


@pytest.mark.slow
@settings(max_examples=300)
@given(blob=st.binary(max_size=400))
def test_random_bytes_give_only_replay_errors(blob: bytes) -> None:
    """Arbitrary bytes: replay either succeeds or raises ReplayError, never anything else."""
    _replay(blob, skip=False)
    _replay(blob, skip=True)


@settings(max_examples=200)
@given(text=st.text(max_size=200))
def test_random_text_streams_give_only_replay_errors(text: str) -> None:
    """Arbitrary text (a text stream, lone surrogates included) gives only ReplayError."""
    rec = RecordingObserver()
    with contextlib.suppress(ReplayError):
        replay(io.StringIO(text), rec)
    replay(io.StringIO(text), rec, skip_invalid=True)


@pytest.mark.parametrize(
    "blob",
    [
        b"[" * 100_000,
        b'{"hook":"on_run_start","run_id":' + b"[" * 50_000,
        b'{"hook":"on_tool_call_received","input":' + b'{"a":' * 5_000 + b"1" + b"}" * 5_001,
    ],
)
def test_deeply_nested_json_is_a_replay_error(blob: bytes) -> None:
    """JSON nested past the parser's recursion limit is a bad line, not a RecursionError."""
    lines = good_lines()
    log = lines[0] + b"\n" + blob + b"\n" + lines[1] + b"\n"
    rec = RecordingObserver()
    with pytest.raises(ReplayError, match="nested too deeply"):
        replay(_file(log), rec)
    assert len(rec.events) == 1
    stats = replay(_file(log), RecordingObserver(), skip_invalid=True)
    assert (stats.events, stats.skipped) == (2, 1)


def test_torn_last_line_keeps_everything_before_it() -> None:
    """A log cut mid-line (a crash while writing) replays every complete line before it."""
    lines = good_lines()
    for cut in range(1, len(lines[-1])):
        blob = b"\n".join(lines[:-1]) + b"\n" + lines[-1][:cut]
        stats = replay(_file(blob), RecordingObserver(), skip_invalid=True)
        assert stats.events == len(lines) - 1
        assert stats.skipped == 1
