"""The JSONL event log: exact round trip (property-based), malformed input, threads, lifecycle."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import io
import json
import threading
import types
import typing
import uuid
import zoneinfo
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs import (
    CONTEXT_TYPES,
    HOOKS,
    DisplayHint,
    EventContext,
    HookName,
    LoopError,
    McpCallInfo,
    ObserverSet,
    RateLimited,
    SleepContext,
    ToolCallReceivedContext,
    ToolPostContext,
    Usage,
)
from loopobs.contract import errors
from loopobs.contract.events import ToolAnnotations
from loopobs.exporters.jsonl import (
    LOG_VERSION,
    JsonlRecorder,
    ReplayError,
    decode_event,
    encode_event,
    replay,
)
from loopobs.testing import RecordingObserver
from tests.conftest import RUN_ID, MakeContext, sample_context

# -- strategies ---------------------------------------------------------------------------

# Text of every kind, lone surrogates included (a provider's stream can split a UTF-16 pair).
TEXT = st.text(st.characters(exclude_categories=()), max_size=12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
# What a log can carry: signed or unsigned 64-bit integers (the reader refuses wider ones).
INTS = st.integers(min_value=-(2**63), max_value=2**64 - 1)
JSON_SCALARS = st.none() | st.booleans() | INTS | FLOATS | TEXT
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=5)
# Fixed offsets down to the microsecond (isoformat keeps them; minute-rounding would not).
TIMEZONES = st.builds(
    dt.timezone,
    st.timedeltas(
        min_value=dt.timedelta(hours=-23, minutes=-59), max_value=dt.timedelta(hours=23, minutes=59)
    ),
)
AWARE_DATETIMES = st.datetimes(timezones=TIMEZONES)

ERROR_FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "retryable": st.booleans(),
    "status_code": st.none() | INTS,
    "provider": st.none() | TEXT,
    "retry_after": st.none() | FLOATS,
    "models": st.lists(TEXT, max_size=3),
    "tool": TEXT,
    "available": st.lists(TEXT, max_size=3),
    "errors": st.lists(TEXT, max_size=3),
    "error_type": TEXT,
    "timeout_s": FLOATS,
    "workers": INTS,
    "used": INTS,
    "limit": INTS,
    "max_turns": INTS,
    "pattern": TEXT,
    "session_id": TEXT,
    "run_id": TEXT,
    "wake_at": AWARE_DATETIMES,
    "server": TEXT,
    "context_provider": TEXT,
    "kind": TEXT,
    "store": TEXT,
    "reason": TEXT,
    "code": st.none() | INTS,
    "queue": TEXT,
    "capacity": INTS,
    # each attempt's error of a FallbackExhausted: errors of the simple kinds
    "failures": st.lists(
        st.builds(RateLimited, TEXT, retry_after=st.none() | FLOATS, status_code=st.none() | INTS),
        max_size=2,
    ),
    "value": FLOATS,
    "budget": FLOATS,
    "scope": st.sampled_from(["run", "session"]),
}
# A field name that means something else on one class: BudgetExceeded.limit names the limit.
ERROR_FIELDS_OF: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("BudgetExceeded", "limit"): st.sampled_from(["usd", "total_tokens", "wall_time_s"]),
}


def _loop_error_classes() -> list[type[LoopError]]:
    found: list[type[LoopError]] = []
    todo: list[type[LoopError]] = [LoopError]
    while todo:
        cls = todo.pop()
        if cls.__module__ == errors.__name__:
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


ERROR_CLASSES = _loop_error_classes()
LOOP_ERRORS: st.SearchStrategy[LoopError] = st.one_of(
    [
        st.builds(
            cls,
            message=TEXT,
            **{f: ERROR_FIELDS_OF.get((cls.__name__, f), ERROR_FIELDS[f]) for f in cls._fields},
        )
        for cls in ERROR_CLASSES
    ]
)
DISPLAY_HINTS = st.one_of(
    st.sampled_from(
        [
            DisplayHint.text(),
            DisplayHint.diff(),
            DisplayHint.json(),
            DisplayHint.suppress(),
            DisplayHint.markdown(),
        ]
    ),
    st.builds(DisplayHint.code, TEXT),
)
OPTIONAL_BOOLS = st.none() | st.booleans()
ANNOTATIONS = st.builds(
    ToolAnnotations,
    read_only=OPTIONAL_BOOLS,
    idempotent=OPTIONAL_BOOLS,
    side_effecting=OPTIONAL_BOOLS,
    waits=OPTIONAL_BOOLS,
)
USAGES = st.builds(
    Usage,
    input_tokens=INTS,
    output_tokens=INTS,
    cache_read_input_tokens=INTS,
    cache_write_input_tokens=INTS,
    reasoning_output_tokens=INTS,
)
MCP_CALLS = st.builds(
    McpCallInfo,
    server=TEXT,
    method=TEXT,
    transport=st.sampled_from(["pipe", "tcp"]),
    protocol_version=st.none() | TEXT,
    session_id=st.none() | TEXT,
    request_id=st.none() | TEXT,
    status_code=st.none() | TEXT,
    error_type=st.none() | TEXT,
    server_address=st.none() | TEXT,
    server_port=st.none() | INTS,
    duration_ms=FLOATS,
)

# Fields whose values need more than their type says.
BY_NAME: dict[str, st.SearchStrategy[Any]] = {
    "input": JSON_OBJECTS,
    "input_schema": JSON_OBJECTS,
    "wake_at": AWARE_DATETIMES,
    "request_options": JSON_OBJECTS,
    "attribution": st.dictionaries(TEXT, TEXT, max_size=3),
}


def _for_type(hint: Any) -> st.SearchStrategy[Any]:
    """A strategy for one field type; unknown types fail loudly so new fields get one."""
    simple: dict[Any, st.SearchStrategy[Any]] = {
        int: INTS,
        float: FLOATS,
        str: TEXT,
        bool: st.booleans(),
        uuid.UUID: st.uuids(),
        LoopError: LOOP_ERRORS,
        Usage: USAGES,
        DisplayHint: DISPLAY_HINTS,
        McpCallInfo: MCP_CALLS,
        ToolAnnotations: ANNOTATIONS,
    }
    if hint in simple:
        return simple[hint]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return st.sampled_from(list(hint))
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_for_type(a) for a in typing.get_args(hint)])
    if hint is type(None):
        return st.none()
    if origin is tuple and typing.get_args(hint)[1:] == (Ellipsis,):
        return st.lists(_for_type(typing.get_args(hint)[0]), max_size=4).map(tuple)
    raise AssertionError(f"no strategy for field type {hint!r}: add one to test_jsonl.py")


TIMES = st.integers(min_value=0, max_value=2**63 - 1)


def context_strategy(cls: type[EventContext]) -> st.SearchStrategy[EventContext]:
    """Every field of ``cls`` drawn from its strategy (no field left at its default)."""
    hints = typing.get_type_hints(cls)
    fields = {
        f.name: TIMES
        if f.name == "time_ns"
        else BY_NAME[f.name]
        if f.name in BY_NAME
        else _for_type(hints[f.name])
        for f in dataclasses.fields(cls)
    }
    return st.builds(cls, **fields)


ANY_CONTEXT = st.one_of([context_strategy(CONTEXT_TYPES[h]) for h in HOOKS])


def record(contexts: list[EventContext]) -> str:
    """The log a JsonlRecorder writes for ``contexts``, emitted through an ObserverSet."""
    out = io.StringIO()
    recorder = JsonlRecorder(out, buffer_lines=3)
    observers = ObserverSet([recorder], strict=True)
    for ctx in contexts:
        observers.emit(ctx)
    observers.shutdown()
    return out.getvalue()


def replayed(log: str) -> list[EventContext]:
    """The contexts replay() rebuilds from ``log``."""
    rec = RecordingObserver()
    stats = replay(io.StringIO(log), ObserverSet([rec], strict=True))
    assert stats.skipped == 0
    assert stats.events == len(rec.events)
    return [c for _, c in rec.events]


# -- exact round trip ---------------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOKS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_is_exact_for_every_context_type(hook: HookName, data: st.DataObject) -> None:
    """record → replay gives equal contexts, and recording them again gives the same bytes."""
    contexts = data.draw(st.lists(context_strategy(CONTEXT_TYPES[hook]), min_size=1, max_size=3))
    log = record(contexts)
    back = replayed(log)
    assert back == contexts
    assert [type(c) for c in back] == [type(c) for c in contexts]
    assert record(back) == log
    assert len(log.splitlines()) == len(contexts)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contexts=st.lists(ANY_CONTEXT, max_size=12))
def test_round_trip_of_mixed_logs(contexts: list[EventContext]) -> None:
    """A log mixing every kind of event replays in order, exactly."""
    log = record(contexts)
    back = replayed(log)
    assert back == contexts
    assert record(back) == log


@pytest.mark.parametrize("hook", HOOKS)
def test_fully_populated_samples_round_trip(hook: HookName, make_context: MakeContext) -> None:
    """Each hand-written sample (every field set) survives encode → decode unchanged."""
    ctx = make_context(hook)
    line = encode_event(ctx)
    assert "\n" not in line
    assert decode_event(line) == ctx
    assert decode_event(line.encode()) == ctx
    assert encode_event(decode_event(line)) == line


def test_encoding_is_the_documented_one(make_context: MakeContext) -> None:
    """hook and version first; UUIDs canonical; wake_at ISO 8601 + offset; objects for the rest."""
    sleep = json.loads(encode_event(make_context("on_sleep")))
    assert list(sleep)[:4] == ["hook", "version", "run_id", "time_ns"]
    assert sleep["version"] == LOG_VERSION
    assert sleep["hook"] == "on_sleep"
    assert sleep["run_id"] == str(RUN_ID) == sleep["run_id"].lower()
    assert sleep["wake_at"] == "2030-01-02T03:04:05.000678+02:00"
    end = json.loads(encode_event(make_context("on_run_end")))
    assert end["error"] == {
        "type": "NotYetAwake",
        "message": end["error"]["message"],
        "wake_at": "2030-05-06T07:08:09+00:00",
    }
    response = json.loads(encode_event(make_context("on_response")))
    assert response["usage"] == {
        "input_tokens": 300,
        "output_tokens": 20,
        "cache_read_input_tokens": 100,
        "cache_write_input_tokens": 0,
        "reasoning_output_tokens": 0,
        "details": [],
    }
    post = json.loads(encode_event(make_context("on_tool_post")))
    assert post["display_hint"] == {"type": "code", "language": "python"}
    assert post["error"]["type"] == "ToolExecutionError"


@pytest.mark.parametrize(
    "wake_at",
    [
        dt.datetime(1900, 1, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Amsterdam")),  # +00:19:32
        dt.datetime(2024, 7, 1, 9, 30, tzinfo=zoneinfo.ZoneInfo("Asia/Kolkata")),
        dt.datetime(2024, 1, 1, tzinfo=dt.timezone(dt.timedelta(seconds=-30, microseconds=5))),
        dt.datetime(1, 1, 1, tzinfo=dt.timezone.utc),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.timezone(dt.timedelta(hours=-23))),
    ],
)
def test_wake_at_keeps_its_instant_and_offset(wake_at: dt.datetime) -> None:
    """Named zones, sub-minute offsets and extreme years replay to the same instant and offset."""
    ctx = sample_context("on_sleep", wake_at=wake_at)
    back = decode_event(encode_event(ctx))
    assert isinstance(back, SleepContext)
    assert back.wake_at == wake_at
    assert back.wake_at.utcoffset() == wake_at.utcoffset()


def test_wake_at_written_by_older_versions_with_z_still_replays() -> None:
    """A "Z" suffix (pydantic's UTC spelling) reads as UTC."""
    line = encode_event(sample_context("on_sleep")).replace(
        "2030-01-02T03:04:05.000678+02:00", "2030-01-02T01:04:05.000678Z"
    )
    ctx, expected = decode_event(line), sample_context("on_sleep")
    assert isinstance(ctx, SleepContext)
    assert isinstance(expected, SleepContext)
    assert ctx.wake_at == expected.wake_at


def test_lone_surrogates_are_escaped_and_come_back() -> None:
    """Half a UTF-16 pair in text or input keys is written as an escape and replays exactly."""
    ctx = sample_context(
        "on_tool_call_received", tool="t\udc80", input={"k\ud800": ["\ud83d", {"x": "\ude00"}]}
    )
    line = encode_event(ctx)
    assert line.isascii()
    assert "\\ud800" in line
    assert decode_event(line) == ctx
    assert encode_event(decode_event(line)) == line


def test_infinite_floats_replay() -> None:
    """An infinite duration is written as Infinity and read back, not turned into null."""
    ctx = sample_context("on_run_end", duration_ms=float("inf"))
    assert decode_event(encode_event(ctx)) == ctx


# -- malformed input ----------------------------------------------------------------------


GOOD = encode_event(sample_context("on_turn_start"))
BAD_LINES: dict[str, tuple[str | bytes, str]] = {
    "bad JSON": ('{"hook": "on_turn_start",', "not JSON"),
    "not an object": ("[1, 2]", "JSON object"),
    "unknown hook": (GOOD.replace("on_turn_start", "on_coffee_break"), "unknown hook"),
    "no hook": (f'{{"run_id": "{RUN_ID}", "time_ns": 1, "turn": 0}}', "unknown hook"),
    "unknown field": (GOOD[:-1] + ',"colour":"red"}', "colour"),
    "missing field": (f'{{"hook":"on_turn_start","run_id":"{RUN_ID}","time_ns":1}}', "turn"),
    "wrong type": (GOOD.replace('"turn":3', '"turn":"third"'), "turn"),
    "bad uuid": (GOOD.replace(str(RUN_ID), "not-a-uuid"), "run_id"),
    "bad error": (
        encode_event(sample_context("on_run_end")).replace("NotYetAwake", "Nope"),
        "Nope",
    ),
    "bad hint": (
        encode_event(sample_context("on_tool_post")).replace(
            '"language":"python"', '"language":null'
        ),
        "language",
    ),
    "bad usage field": (
        encode_event(sample_context("on_response")).replace("input_tokens", "inptu_tokens", 1),
        "inptu_tokens",
    ),
    "not UTF-8": (b'{"hook":"on_turn_start","query":"\xff\xfe"}', "UTF-8"),
}


@pytest.mark.parametrize("case", BAD_LINES, ids=list(BAD_LINES))
def test_bad_line_raises_replay_error_naming_file_and_line(case: str, tmp_path: Path) -> None:
    """The error names the file and line number; the events before it were delivered."""
    bad, reason = BAD_LINES[case]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join([GOOD.encode(), b"", _bytes(bad), GOOD.encode()]) + b"\n")
    rec = RecordingObserver()
    with pytest.raises(ReplayError) as info:
        replay(path, rec)
    err = info.value
    assert (err.source, err.line_no) == (str(path), 3)
    assert str(err).startswith(f"{path}:3: ")
    assert reason in err.reason
    assert isinstance(err, ValueError)
    assert rec.hooks() == ["on_turn_start"]


def _bytes(line: str | bytes) -> bytes:
    return line if isinstance(line, bytes) else line.encode()


def test_skip_invalid_skips_and_counts(tmp_path: Path) -> None:
    """skip_invalid=True delivers every good line and reports each bad one with its line."""
    path = tmp_path / "events.jsonl"
    lines = [GOOD.encode()]
    for bad, _ in BAD_LINES.values():
        lines += [_bytes(bad), GOOD.encode()]
    path.write_bytes(b"\n".join(lines) + b"\n\n")
    rec = RecordingObserver()
    stats = replay(path, rec, skip_invalid=True)
    assert stats.events == len(BAD_LINES) + 1 == len(rec.events)
    assert stats.skipped == len(BAD_LINES)
    assert [e.line_no for e in stats.errors] == list(range(2, 2 * len(BAD_LINES) + 1, 2))
    assert all(e.source == str(path) for e in stats.errors)


def test_replay_from_a_stream_names_it() -> None:
    """A stream without a name is reported as <stream>; blank lines are ignored."""
    with pytest.raises(ReplayError, match=r"^<stream>:3: not JSON"):
        replay(io.StringIO(f"{GOOD}\n\n{{oops\n"), RecordingObserver())


def test_replay_into_an_observer_set_reaches_its_members(tmp_path: Path) -> None:
    """Any observer works as a target, a whole ObserverSet included."""
    path = tmp_path / "log.jsonl"
    recorder = JsonlRecorder(path)
    contexts = [sample_context(h) for h in HOOKS]
    for ctx in contexts:
        getattr(recorder, ctx.hook)(ctx)
    recorder.shutdown()
    a, b = RecordingObserver(), RecordingObserver()
    stats = replay(path, ObserverSet([a, b]))
    assert stats.events == len(HOOKS)
    assert stats.skipped == 0
    assert stats.errors == ()
    assert [c for _, c in a.events] == contexts == [c for _, c in b.events]


# -- the recorder -------------------------------------------------------------------------


def test_recorder_listens_to_every_hook() -> None:
    """JsonlRecorder overrides every hook, so an ObserverSet sends it everything."""
    assert ObserverSet([JsonlRecorder(io.StringIO())]).listening == frozenset(HOOKS)


def test_recorder_buffers_until_flush_or_full() -> None:
    """Lines wait in the buffer until buffer_lines are pending or force_flush is called."""
    out = io.StringIO()
    recorder = JsonlRecorder(out, buffer_lines=3, flush_interval_s=None)
    ctx = sample_context("on_text_delta")
    recorder.on_event(ctx)
    recorder.on_event(ctx)
    assert out.getvalue() == ""
    recorder.on_event(ctx)
    assert out.getvalue().count("\n") == 3
    recorder.on_event(ctx)
    recorder.force_flush()
    assert out.getvalue().count("\n") == 4


def test_recorder_lifecycle_with_a_path(tmp_path: Path) -> None:
    """A path is appended to and closed by shutdown; later events and calls are no-ops."""
    path = tmp_path / "run.jsonl"
    path.write_text(GOOD + "\n", encoding="utf-8")
    recorder = JsonlRecorder(str(path))
    recorder.on_event(sample_context("on_turn_start"))
    recorder.shutdown()
    recorder.on_event(sample_context("on_turn_start"))
    recorder.force_flush()
    recorder.shutdown()
    assert path.read_text(encoding="utf-8") == f"{GOOD}\n{GOOD}\n"


def test_recorder_leaves_a_given_stream_open() -> None:
    """A stream passed in is flushed at shutdown but stays open for its owner."""
    out = io.StringIO()
    recorder = JsonlRecorder(out)
    recorder.on_event(sample_context("on_turn_start"))
    recorder.shutdown()
    assert not out.closed
    assert out.getvalue() == GOOD + "\n"


def test_many_threads_share_one_recorder_and_write_whole_lines(tmp_path: Path) -> None:
    """Concurrent runs sharing a recorder: every line is whole, none lost, each run in order."""
    path = tmp_path / "shared.jsonl"
    recorder = JsonlRecorder(path, buffer_lines=7)
    observers = ObserverSet([recorder], strict=True)
    threads_n, per_thread = 8, 400
    long_text = "ä" * 3000  # lines far longer than any single write buffer

    def run(i: int) -> None:
        run_id = uuid.UUID(int=i + 1)
        for n in range(per_thread):
            observers.on_text_delta(
                sample_context("on_text_delta", run_id=run_id, time_ns=n, delta=long_text)
            )

    threads = [threading.Thread(target=run, args=(i,)) for i in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    observers.shutdown()
    rec = RecordingObserver()
    stats = replay(path, rec)
    assert stats.events == threads_n * per_thread
    assert stats.skipped == 0
    for i in range(threads_n):
        times = [c.time_ns for c in rec.of("on_text_delta", uuid.UUID(int=i + 1))]
        assert times == list(range(per_thread))


# -- durability: run ends, a time bound, a full disk -------------------------------------------


async def test_the_log_holds_every_run_when_it_ends_without_a_flush(tmp_path: Path) -> None:
    """As in the README's example: no force_flush, no shutdown, yet the file is complete."""
    from loopobs import AgentLoop
    from loopobs.llm import Reply, ScriptedClient

    path = tmp_path / "run.jsonl"
    recorder = JsonlRecorder(path)
    loop = AgentLoop(
        ScriptedClient([Reply(text="one"), Reply(text="two")]), model="m", observers=[recorder]
    )
    await loop.run("first")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0])["hook"] == "on_run_start"
    assert json.loads(lines[-1])["hook"] == "on_run_end"
    await loop.run("second")
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2 * len(lines)
    recorder.shutdown()


def test_pending_lines_reach_the_file_within_the_time_bound(tmp_path: Path) -> None:
    """A run that stalls mid-way: its lines are written by the flush thread, no event needed."""
    path = tmp_path / "stall.jsonl"
    recorder = JsonlRecorder(path, flush_interval_s=0.05)
    recorder.on_event(sample_context("on_turn_start"))
    written = threading.Event()

    def poll() -> None:
        while not path.read_text(encoding="utf-8"):
            if written.wait(0.01):
                return
        written.set()

    poller = threading.Thread(target=poll)
    poller.start()
    assert written.wait(30), "the pending line never reached the file"
    poller.join()
    assert path.read_text(encoding="utf-8") == GOOD + "\n"
    recorder.shutdown()


class FullDisk(io.StringIO):
    """A stream that accepts ``room`` writes, then fails every write like a full disk."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room
        self.attempts: list[int] = []

    def write(self, text: str) -> int:
        self.attempts.append(text.count("\n"))
        if len(self.attempts) > self.room:
            raise OSError(28, "No space left on device")
        return super().write(text)


def test_a_full_disk_drops_and_counts_instead_of_growing_the_buffer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every failed write drops its lines: no write ever carries more than buffer_lines,
    nothing is raised into the run, and the loss is counted and logged once."""
    disk = FullDisk(room=2)
    recorder = JsonlRecorder(disk, buffer_lines=50, flush_interval_s=None)
    observers = ObserverSet([recorder], strict=True)  # strict: any raise would surface here
    ctx = sample_context("on_text_delta")
    with caplog.at_level("WARNING", logger="loopobs.exporters.jsonl"):
        for _ in range(5000):
            observers.on_text_delta(ctx)
        observers.force_flush()
    assert max(disk.attempts) <= 50
    assert sum(disk.attempts) == 5000
    assert recorder.write_failures == len(disk.attempts) - 2
    assert recorder.dropped_lines == 5000 - 100
    assert disk.getvalue().count("\n") == 100
    assert len([r for r in caplog.records if "could not write" in r.getMessage()]) == 1
    recorder.shutdown()


# -- log versions ---------------------------------------------------------------------------
V1_RECEIVED = json.dumps(
    {
        "hook": "on_tool_call_received",
        "run_id": str(RUN_ID),
        "time_ns": 5,
        "turn": 0,
        "tool": "search",
        "call_id": "call_7",
        "input": {"q": "x"},
    }
)


def test_a_version_1_line_is_upgraded_on_load() -> None:
    """A line written before the renames (no version, ``call_id``) replays with today's names."""
    ctx = decode_event(V1_RECEIVED)
    assert isinstance(ctx, ToolCallReceivedContext)
    assert ctx.tool_call_id == "call_7"
    again = json.loads(encode_event(ctx))
    assert again["version"] == LOG_VERSION
    assert "call_id" not in again
    assert again["tool_call_id"] == "call_7"


def test_a_version_1_log_replays_through_the_cli_reader(tmp_path: Path) -> None:
    """``replay`` (what ``loopobs replay`` and ``inspect`` read with) upgrades old logs too."""
    log = tmp_path / "old.jsonl"
    log.write_text(V1_RECEIVED + "\n", encoding="utf-8")
    recorder = RecordingObserver()
    stats = replay(log, recorder)
    assert stats.events == 1
    assert recorder.of("on_tool_call_received")[0].tool_call_id == "call_7"


def test_a_version_2_tool_post_reads_as_it_is_and_mcp_round_trips() -> None:
    """Version 3 added hooks and ``ToolPostContext.mcp``: a version-2 line reads unchanged."""
    v2 = json.dumps(
        {
            "hook": "on_tool_post",
            "version": 2,
            "run_id": str(RUN_ID),
            "time_ns": 9,
            "tool_call_id": "c1",
            "turn": 0,
            "tool": "search",
        }
    )
    ctx = decode_event(v2)
    assert isinstance(ctx, ToolPostContext)
    assert ctx.mcp is None
    with_mcp = dataclasses.replace(
        ctx, mcp=McpCallInfo(server="files", request_id="4", duration_ms=2.5)
    )
    assert decode_event(encode_event(with_mcp)) == with_mcp


def test_current_lines_keep_their_names() -> None:
    """A current-version line is not rewritten: a ``call_id`` there is an unknown field."""
    line = json.dumps({**json.loads(V1_RECEIVED), "version": LOG_VERSION})
    with pytest.raises(ValueError, match="call_id"):
        decode_event(line)


@pytest.mark.parametrize("version", [LOG_VERSION + 1, 0, "2", True, None])
def test_unreadable_versions_are_refused(version: object) -> None:
    """A newer log asks for a newer loopobs; a version that is not a positive int is invalid."""
    line = json.dumps(
        {
            "hook": "on_turn_start",
            "version": version,
            "run_id": str(RUN_ID),
            "time_ns": 1,
            "turn": 0,
        }
    )
    with pytest.raises(ValueError, match="version"):
        decode_event(line)


def test_out_of_range_numbers_are_refused_on_load() -> None:
    """A time past 64 bits (which would make the OTLP encoder drop its whole batch) is refused."""
    import json as _json
    import uuid as _uuid

    from loopobs.contract.events import ToolPostContext
    from loopobs.exporters.jsonl import decode_event, encode_event

    line = encode_event(
        ToolPostContext(
            run_id=_uuid.uuid4(),
            time_ns=5,
            turn=0,
            tool="t",
            tool_call_id="c",
            result_hash=2**64 - 1,
        )
    )
    decoded = decode_event(line)
    assert isinstance(decoded, ToolPostContext)
    assert decoded.result_hash == 2**64 - 1  # an unsigned 64-bit hash is fine
    data = _json.loads(line)
    for field, value in (
        ("time_ns", 2**64 + 5),
        ("time_ns", -1),
        ("turn", 2**70),
        ("result_hash", 2**64),
    ):
        bad = dict(data, **{field: value})
        with pytest.raises(ValueError, match=f"{field} out of"):
            decode_event(_json.dumps(bad))
