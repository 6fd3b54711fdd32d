"""RepetitionDetector and ConvergenceDetector, driven by hand-emitted events.

The :class:`Driver` here plays a loop that is not ours: it emits the contract's
events into an ``ObserverSet`` holding the detector and a recorder, and returns
the detections each call produced.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs.contract.events import (
    ConvergenceDetectedContext,
    LoopDetectedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    ToolCallReceivedContext,
    ToolPostContext,
)
from loopobs.contract.hashing import _normalise, arguments_hash, canonical_json, result_hash
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.detectors import (
    ConvergenceDetector,
    RepetitionDetector,
    answer_sketch,
    sketch_similarity,
)
from loopobs.testing import RecordingObserver

PROPERTY = settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])


class Driver:
    """Emits tool calls and answers by hand, as a loop that is not ours would."""

    def __init__(self, *detectors: LoopObserver) -> None:
        self.recorder = RecordingObserver()
        # The recorder goes first, so it sees each post before the detection it causes.
        self.observers = ObserverSet([self.recorder, *detectors], strict=True)
        self.run_id = uuid.uuid4()
        self._n = 0

    def start_run(self, session_id: uuid.UUID) -> uuid.UUID:
        self.run_id = uuid.uuid4()
        self.observers.on_run_start(
            RunStartContext(run_id=self.run_id, time_ns=self._tick(), session_id=session_id)
        )
        return self.run_id

    def end_run(self) -> None:
        self.observers.on_run_end(
            RunEndContext(run_id=self.run_id, time_ns=self._tick(), success=True)
        )

    def _tick(self) -> int:
        self._n += 1
        return self._n

    def call(
        self,
        tool: str,
        args: Mapping[str, Any],
        result: str,
        *,
        run_id: uuid.UUID | None = None,
        received: bool = True,
    ) -> list[LoopDetectedContext]:
        """One tool call (received → post); the loop detections it caused."""
        run = run_id or self.run_id
        before = len(self.recorder.events)
        n = self._tick()
        call_id = f"call_{n}"
        if received:
            self.observers.on_tool_call_received(
                ToolCallReceivedContext(
                    run_id=run, time_ns=n, turn=0, tool=tool, tool_call_id=call_id, input=args
                )
            )
        self.observers.on_tool_post(
            ToolPostContext(
                run_id=run,
                time_ns=n,
                turn=0,
                tool=tool,
                tool_call_id=call_id,
                result_hash=result_hash(result),
                result=result,
            )
        )
        new = [c for _, c in self.recorder.events[before:]]
        return [c for c in new if isinstance(c, LoopDetectedContext)]

    def answer(
        self, text: str, *, tool_calls: int = 0, run_id: uuid.UUID | None = None
    ) -> list[ConvergenceDetectedContext]:
        """One model response; the convergence detections it caused."""
        before = len(self.recorder.events)
        self.observers.on_response(
            ResponseContext(
                run_id=run_id or self.run_id,
                time_ns=self._tick(),
                turn=0,
                text=text,
                tool_calls=tool_calls,
            )
        )
        new = [c for _, c in self.recorder.events[before:]]
        return [c for c in new if isinstance(c, ConvergenceDetectedContext)]

    def detections(self) -> list[LoopDetectedContext]:
        return list(self.recorder.of("on_loop_detected"))


def _op(i: int) -> tuple[str, dict[str, Any], str]:
    """A distinct operation per ``i``."""
    return ("tool", {"key": f"k{i}"}, f"result {i}")


# -- repetition: properties -----------------------------------------------------------------


@PROPERTY
@given(
    warn_after=st.integers(2, 6),
    extra=st.integers(0, 8),
    k=st.integers(1, 40),
)
def test_repeated_operation_fires_exactly_at_warn_and_stop(
    warn_after: int, extra: int, k: int
) -> None:
    """One operation repeated k times warns at warn_after, stops at stop_after, then starts over
    (the surer stop switched off: ``sure_stop_after=0``)."""
    stop_after = warn_after + extra
    d = Driver(
        RepetitionDetector(
            window=50, warn_after=warn_after, stop_after=stop_after, sure_stop_after=0
        )
    )
    fired: list[tuple[int, str, int]] = []
    for i in range(1, k + 1):
        for e in d.call("read_file", {"path": "/etc/hosts"}, "127.0.0.1 localhost"):
            fired.append((i, e.action, e.repetitions))
    expected = []
    for i in range(1, k + 1):
        j = (i - 1) % stop_after + 1  # a stop clears the session's window
        if j == stop_after:
            expected.append((i, "stop", stop_after))
        elif j == warn_after:
            expected.append((i, "warn", warn_after))
    assert fired == expected
    assert all(e.pattern == "read_file(/etc/hosts)" for e in d.detections())
    assert all(e.tool == "read_file" for e in d.detections())


@PROPERTY
@given(
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz", max_size=12), unique=True, max_size=120
    ),
    st.integers(1, 4),
)
def test_sequences_without_repeats_never_fire(keys: list[str], max_period: int) -> None:
    """Distinct operations never fire, whatever the window and period. (Lower-case words:
    texts that differ only in case, spacing, digits or a date, "x y" and "x  y", are one
    query normalised, so three of them are a repeat, not distinct operations.)"""
    d = Driver(RepetitionDetector(window=20, max_period=max_period))
    for key in keys:
        assert d.call("search", {"q": key}, "same result every time") == []


@PROPERTY
@given(period=st.integers(2, 4), warn_after=st.integers(3, 5), prefix=st.integers(0, 5))
def test_cycle_fires_after_warn_after_cycles(period: int, warn_after: int, prefix: int) -> None:
    """A→B→…→A→B… of period ≤ 4, the same results each pass, is unambiguous: it warns
    after two passes and stops at the second step of the third (a 2-step cycle: after
    three passes), whatever warn_after and stop_after are."""
    stop_after = warn_after + 3
    d = Driver(RepetitionDetector(warn_after=warn_after, stop_after=stop_after, max_period=4))
    for i in range(prefix):
        assert d.call("setup", {"step": i}, f"done {i}") == []
    fired: list[tuple[int, LoopDetectedContext]] = []
    steps = [("read_file", {"path": f"f{j}"}, f"content {j}") for j in range(period)]
    for i in range(1, period * 3 + 1):
        tool, args, result = steps[(i - 1) % period]
        fired.extend((i, e) for e in d.call(tool, args, result))
    assert [(i, e.action, e.repetitions) for i, e in fired] == [
        (period * 2, "warn", 2),
        (period * 2 + 2, "stop", 2 if period > 2 else 3),
    ]
    expected = " → ".join(f"read_file(f{j})" for j in range(period))
    assert all(e.pattern == expected for _, e in fired)
    assert all(e.signal == "cycle" for _, e in fired)


@PROPERTY
@given(
    warn_after=st.integers(2, 5),
    gaps=st.lists(st.integers(0, 3), min_size=5, max_size=5),
)
def test_noise_interleaved_within_the_window_still_fires(warn_after: int, gaps: list[int]) -> None:
    """The repeats of a call that is not a read need not be consecutive: a little unique
    noise between them (up to ``novelty`` = 3 new operations) does not hide them."""
    d = Driver(
        RepetitionDetector(window=50, warn_after=warn_after, stop_after=20, sure_stop_after=0)
    )
    noise = 0
    fired: list[tuple[int, LoopDetectedContext]] = []
    for occurrence in range(1, warn_after + 1):
        for _ in range(gaps[occurrence - 1]):
            noise += 1
            assert d.call("noise", {"n": noise}, f"noise {noise}") == []
        fired.extend((occurrence, e) for e in d.call("build", {"target": "api"}, "3 errors"))
    assert [(i, e.action, e.pattern, e.repetitions) for i, e in fired] == [
        (warn_after, "warn", "build(api)", warn_after)
    ]


def test_a_read_again_amid_new_reads_is_not_a_repeat() -> None:
    """A read re-done between reads never made before (A x A y A) is a re-read amid new
    work (``read_novelty=0``); the same read back to back is a repeat."""
    d = Driver(RepetitionDetector())
    for i in range(6):
        d.call("read_file", {"path": "parser.c"}, "int main() {}")
        d.call("grep", {"pattern": f"DEF{i}"}, f"{i}: DEF{i}")
    assert d.detections() == []
    fired = [
        e.action
        for _ in range(3)
        for e in d.call("read_file", {"path": "parser.c"}, "int main() {}")
    ]
    assert fired == ["warn"]


@PROPERTY
@given(st.integers(1, 3), st.integers(1, 4))
def test_repeats_further_apart_than_the_horizon_never_fire(mult: int, slack: int) -> None:
    """An operation not seen again within ``horizon`` calls starts over: it never fires.

    (The horizon replaced the sliding window: the same memory, but a gap between
    two occurrences rather than a span of calls, so a 30-step redo is still seen.)
    """
    horizon = 10 * mult
    d = Driver(RepetitionDetector(horizon=horizon, warn_after=3))
    noise = 0
    for _ in range(10):
        assert d.call("grep", {"q": "TODO"}, "3 matches") == []
        for _ in range(horizon + slack):
            noise += 1
            assert d.call("noise", {"n": noise}, str(noise)) == []


def test_repeats_amid_new_work_start_over() -> None:
    """More than ``novelty`` never-seen operations between two repeats: a re-read amid new
    work, not a loop; the streak starts over."""
    d = Driver(RepetitionDetector(warn_after=3))
    noise = 0
    for _ in range(6):
        assert d.call("read_file", {"path": "notes.md"}, "the same notes") == []
        for _ in range(4):
            noise += 1
            assert d.call("grep", {"pattern": f"p{noise}"}, f"hit {noise}") == []


@PROPERTY
@given(
    st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz .", min_size=1, max_size=20),
        unique=True,
        min_size=1,
        max_size=150,
    )
)
def test_changing_results_never_fire(results: list[str]) -> None:
    """Polling the same call while its result keeps changing is progress, not a loop.
    (Results without digits: "1 ms", "2 ms" and "3 ms" are one result once durations are
    masked, and their repeats a loop.)"""
    d = Driver(RepetitionDetector())
    for r in results:
        assert d.call("job_status", {"id": "42"}, r) == []


json_scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


def _reformat(value: Any, rnd: st.DataObject) -> Any:
    """The same JSON value with keys reordered and integers written as floats."""
    if isinstance(value, dict):
        keys = rnd.draw(st.permutations(list(value)))
        return {k: _reformat(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_reformat(v, rnd) for v in value]
    if type(value) is int and abs(value) < 2**53 and rnd.draw(st.booleans()):
        return float(value)
    return value


@PROPERTY
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6), st.data())
def test_canonicalisation_ignores_key_order_and_number_format(
    args: dict[str, Any], data: st.DataObject
) -> None:
    """Reordered keys, ints written as floats and JSON whitespace give the same hash."""
    other = _reformat(args, data)
    assert canonical_json(other) == canonical_json(args)
    assert arguments_hash(other) == arguments_hash(args)
    respaced = json.loads(json.dumps(other, indent=3))
    assert arguments_hash(respaced) == arguments_hash(args)


@PROPERTY
@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_fast_path_encodes_like_the_normalised_form(args: dict[str, Any]) -> None:
    """canonical_json's shortcut for flat arguments gives the text of the full normalisation."""
    slow = json.dumps(
        _normalise(args), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    assert canonical_json(args) == slow


def test_reordered_arguments_are_the_same_operation() -> None:
    """The detector counts calls with reordered, reformatted arguments as one operation."""
    d = Driver(RepetitionDetector())
    d.call("grep", {"q": "x", "max": 10}, "r")
    d.call("grep", {"max": 10.0, "q": "x"}, "r")
    assert [e.repetitions for e in d.call("grep", {"max": 1e1, "q": "x"}, "r")] == [3]


_PROBE = """
import json, sys
from loopobs.contract.hashing import arguments_hash, result_hash
from loopobs.detectors import answer_sketch
args = json.loads(sys.argv[1])
print(json.dumps([arguments_hash(args), result_hash("hello\\nworld"),
                  sorted(answer_sketch("The answer is 42."))]))
"""


def test_hashes_are_equal_in_a_fresh_interpreter() -> None:
    """Hashes do not depend on the process: a fresh interpreter with another hash seed agrees."""
    args = {"path": "/etc/hosts", "n": 3, "nested": {"b": [1, 2.0], "a": None}}
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=60,
    )
    theirs = json.loads(out.stdout)
    assert theirs == [
        arguments_hash(args),
        result_hash("hello\nworld"),
        sorted(answer_sketch("The answer is 42.")),
    ]


def test_hashes_are_pinned() -> None:
    """BLAKE2b-64 of the canonical form: the same figures on every machine and version."""
    assert canonical_json({"b": 1.0, "a": "x"}) == '{"a":"x","b":1}'
    assert arguments_hash({"a": 1}) == arguments_hash({"a": 1.0}) == 2273192342946969294


# -- repetition: behaviour ------------------------------------------------------------------


def test_once_per_escalation() -> None:
    """Between the warning and the stop, further repeats emit nothing."""
    d = Driver(RepetitionDetector(warn_after=3, stop_after=10, sure_stop_after=0))
    counts = [len(d.call("ls", {"dir": "."}, "a b c")) for _ in range(10)]
    assert counts == [0, 0, 1, 0, 0, 0, 0, 0, 0, 1]


def test_the_same_call_and_result_with_nothing_changed_stops_sooner() -> None:
    """Unambiguous evidence (the same call, the same result, nothing side-effecting since)
    stops at ``sure_stop_after`` (5), before ``stop_after``; a write in between starts over."""
    d = Driver(RepetitionDetector(warn_after=3, stop_after=10))
    actions = [[e.action for e in d.call("ls", {"dir": "."}, "a b c")] for _ in range(5)]
    assert actions == [[], [], ["warn"], [], ["stop"]]
    d = Driver(RepetitionDetector(warn_after=3, stop_after=10))
    for i in range(4):
        d.call("ls", {"dir": "."}, "a b c")
        d.call("write_file", {"path": f"f{i}.py", "text": f"v{i} of the module"}, "ok")
    assert d.detections() == []


def test_progress_clears_the_warning() -> None:
    """A warned call returning something new clears its warning and its stale entries."""
    d = Driver(RepetitionDetector(warn_after=3, stop_after=10))
    for _ in range(3):
        d.call("job_status", {"id": "7"}, "running")
    assert [e.action for e in d.detections()] == ["warn"]
    assert d.call("job_status", {"id": "7"}, "done") == []
    # The stale "running" entries were dropped: two more "running" do not reach 3.
    assert d.call("job_status", {"id": "7"}, "running") == []
    assert d.call("job_status", {"id": "7"}, "running") == []
    # A fresh run of three identical results warns again.
    assert [e.repetitions for e in d.call("job_status", {"id": "7"}, "running")] == [3]


def test_any_new_result_resets_that_call() -> None:
    """A state that flips back (queued, running, queued) is progress, even before a warning."""
    d = Driver(RepetitionDetector(warn_after=3))
    for state in ["queued", "queued", "running", "queued", "queued"]:
        assert d.call("job_status", {"id": "9"}, state) == []
    assert [e.repetitions for e in d.call("job_status", {"id": "9"}, "queued")] == [3]


def test_stop_clears_the_session_for_its_next_run() -> None:
    """After a stop the session starts afresh: its next run is not stopped on its first call."""
    det = RepetitionDetector(warn_after=2, stop_after=3)
    d = Driver(det)
    session = uuid.uuid4()
    d.start_run(session)
    actions = [e.action for _ in range(3) for e in d.call("ls", {"d": "."}, "x")]
    assert actions == ["warn", "stop"]
    d.end_run()
    d.start_run(session)
    assert d.call("ls", {"d": "."}, "x") == []


def test_state_is_per_session_and_carries_across_runs() -> None:
    """Runs of one session share a window; other sessions do not see it."""
    d = Driver(RepetitionDetector(warn_after=3))
    s1, s2 = uuid.uuid4(), uuid.uuid4()
    r1 = d.start_run(s1)
    d.call("ls", {"d": "."}, "x")
    d.end_run()
    r2 = d.start_run(s2)
    assert d.call("ls", {"d": "."}, "x") == []
    assert d.call("ls", {"d": "."}, "x") == []
    d.end_run()
    r3 = d.start_run(s1)
    d.call("ls", {"d": "."}, "x")
    fired = d.call("ls", {"d": "."}, "x")
    assert [(e.run_id, e.repetitions) for e in fired] == [(r3, 3)]
    assert r1 != r2 != r3


def test_unknown_runs_are_keyed_on_their_run_id() -> None:
    """Events of runs never started still count, per run id."""
    d = Driver(RepetitionDetector(warn_after=2))
    a, b = uuid.uuid4(), uuid.uuid4()
    assert d.call("ls", {}, "x", run_id=a) == []
    assert d.call("ls", {}, "x", run_id=b) == []
    fired = d.call("ls", {}, "x", run_id=a)
    assert [(e.run_id, e.pattern) for e in fired] == [(a, "ls()")]


def test_post_without_received_counts_with_unknown_arguments() -> None:
    """A loop that skips on_tool_call_received still gets detections, labelled ``tool()``."""
    d = Driver(RepetitionDetector(warn_after=2))
    d.call("fetch", {"url": "a"}, "same", received=False)
    fired = d.call("fetch", {"url": "b"}, "same", received=False)
    assert [e.pattern for e in fired] == ["fetch()"]


def test_result_hash_is_computed_when_missing() -> None:
    """A post carrying only the result text is hashed by the detector."""
    d = Driver(RepetitionDetector(warn_after=2))
    obs = d.observers
    run = uuid.uuid4()
    for i, text in enumerate(["one", "two", "two"]):
        obs.on_tool_post(
            ToolPostContext(
                run_id=run, time_ns=i, turn=0, tool="t", tool_call_id=str(i), result=text
            )
        )
    assert [e.repetitions for e in d.detections()] == [2]


def test_detection_goes_into_the_attached_set_with_the_triggering_event() -> None:
    """The detection carries the run id and time of the post that completed the pattern."""
    det = RepetitionDetector(warn_after=2)
    d = Driver(det)
    d.call("ls", {}, "x")
    fired = d.call("ls", {}, "x")
    post = d.recorder.of("on_tool_post")[-1]
    assert [(e.run_id, e.time_ns) for e in fired] == [(post.run_id, post.time_ns)]
    assert d.recorder.hooks()[-2:] == ["on_tool_post", "on_loop_detected"]
    d.observers.remove(det)
    other = RecordingObserver()
    standalone = ObserverSet([det, other])
    standalone.remove(det)
    for _ in range(3):
        det.on_tool_post(
            ToolPostContext(
                run_id=uuid.uuid4(), time_ns=0, turn=0, tool="z", tool_call_id="1", result_hash=1
            )
        )
    assert other.events == []
    assert len(d.recorder.of("on_loop_detected")) == 1


def test_labels() -> None:
    """Patterns show primary_params, else the first string argument, truncated, else JSON."""
    det = RepetitionDetector(primary_params={"edit": "file"})
    assert det.label("edit", {"text": "x", "file": "a.py"}) == "edit(a.py)"
    assert det.label("edit", {"text": "x", "file": 3}) == "edit(3)"
    assert det.label("read", {"n": 1, "path": "/etc/hosts"}) == "read(/etc/hosts)"
    assert det.label("sum", {"b": 2, "a": 1}) == 'sum({"a":1,"b":2})'
    assert det.label("now", {}) == "now()"
    long = det.label("read", {"path": "x" * 500})
    assert long == f"read({'x' * 59}…)"


def test_cycle_of_different_tools_reads_as_arrows() -> None:
    """An A→B oscillation reads ``read_file(a) → grep(b)`` and has no single tool."""
    d = Driver(RepetitionDetector())
    for _ in range(2):
        d.call("read_file", {"path": "a"}, "text of a")
        d.call("grep", {"pattern": "b"}, "no match")
    [e] = d.detections()
    assert (e.pattern, e.repetitions, e.tool, e.action) == (
        "read_file(a) → grep(b)",
        2,
        None,
        "warn",
    )


def test_cycle_with_warn_after_two_reports_the_first_repeat_once() -> None:
    """With warn_after=2 the repeat of a cycle's first step warns before the cycle is visible.

    That warning is the escalation: the cycle's own warning is not emitted on top
    of it, and the cycle is reported as such when it reaches the stop (after
    max(warn_after + 1, ceil(stop_after / 2)) = 3 cycles).
    """
    d = Driver(RepetitionDetector(warn_after=2, stop_after=4))
    fired: list[tuple[int, str, str]] = []
    for i in range(1, 9):
        step = "ab"[(i - 1) % 2]
        fired.extend((i, e.action, e.pattern) for e in d.call("t", {"s": step}, step))
    assert fired == [(3, "warn", "t(a)"), (6, "stop", "t(a) → t(b)")]


def test_period_beyond_max_period_is_not_a_cycle() -> None:
    """With max_period=2, a three-step cycle is caught by the plain counts instead."""
    d = Driver(RepetitionDetector(max_period=2, warn_after=3))
    for _ in range(3):
        for step in "abc":
            d.call("t", {"s": step}, step)
    assert [e.pattern for e in d.detections()] == ["t(a)", "t(b)", "t(c)"]


def test_memory_stays_bounded() -> None:
    """Operations, calls, results, writes, the ring, pending calls and sessions stay bounded."""
    det = RepetitionDetector(memory=20, max_period=8, max_sessions=8)
    d = Driver(det)
    for i in range(3000):
        d.call("t", {"k": i % 37}, str(i % 5))
        d.call("write_file", {"path": f"f{i}"}, "ok")
        det.on_tool_call_received(
            ToolCallReceivedContext(
                run_id=d.run_id,
                time_ns=0,
                turn=0,
                tool="never_posted",
                tool_call_id=f"x{i}",
                input={},
            )
        )
    state = det._sessions[d.run_id.int]
    assert len(state.ops) <= 20
    assert len(state.calls) <= 20
    assert len(state.same) <= 20
    assert len(state.written) <= 20
    assert len(state.ring) == len(state.ring_calls) == 2 * 8 + 2
    assert len(state.cands) <= 4
    assert len(det._pending[d.run_id.int]) <= 1024
    for _ in range(50):
        d.call("t", {}, "x", run_id=uuid.uuid4())
    assert det.sessions == 8


def test_reset_forgets_everything() -> None:
    """After reset() a repeat counts from one again."""
    det = RepetitionDetector(warn_after=3)
    d = Driver(det)
    d.call("ls", {}, "x")
    d.call("ls", {}, "x")
    det.reset()
    assert det.sessions == 0
    assert d.call("ls", {}, "x") == []
    assert d.call("ls", {}, "x") == []
    assert len(d.call("ls", {}, "x")) == 1


def test_concurrent_sessions_do_not_mix() -> None:
    """Eight threads, one session each, interleaving freely: each sees its own detections."""
    det = RepetitionDetector(warn_after=3, stop_after=10, sure_stop_after=0)
    rec = RecordingObserver()
    observers = ObserverSet([det, rec], strict=True)
    runs = [uuid.uuid4() for _ in range(8)]
    barrier = threading.Barrier(len(runs))

    def work(run: uuid.UUID) -> None:
        barrier.wait()
        for i in range(400):
            observers.on_tool_call_received(
                ToolCallReceivedContext(
                    run_id=run, time_ns=i, turn=0, tool="poll", tool_call_id=str(i), input={"id": 1}
                )
            )
            observers.on_tool_post(
                ToolPostContext(
                    run_id=run, time_ns=i, turn=0, tool="poll", tool_call_id=str(i), result_hash=1
                )
            )

    threads = [threading.Thread(target=work, args=(r,)) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for run in runs:
        fired = rec.of("on_loop_detected", run)
        # 400 calls = 40 windows cleared by a stop each: warn at 3, stop at 10, repeat.
        assert [(e.action, e.time_ns % 10) for e in fired] == [("warn", 2), ("stop", 9)] * 40


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"window": 0}, "window"),
        ({"horizon": 0}, "horizon"),
        ({"memory": 0}, "memory"),
        ({"warn_after": 1}, "warn_after"),
        ({"warn_after": 5, "stop_after": 4}, "stop_after"),
        ({"max_period": 0}, "max_period"),
        ({"max_sessions": 0}, "max_sessions"),
    ],
)
def test_repetition_settings_are_validated(kwargs: dict[str, int], message: str) -> None:
    """Settings that cannot work are refused up front."""
    with pytest.raises(ValueError, match=message):
        RepetitionDetector(**kwargs)  # type: ignore[arg-type]


def test_stop_after_zero_never_stops() -> None:
    """stop_after=0 warns but never stops."""
    d = Driver(RepetitionDetector(warn_after=2, stop_after=0))
    actions = [e.action for _ in range(60) for e in d.call("ls", {}, "x")]
    assert actions == ["warn"]


# -- convergence ----------------------------------------------------------------------------


def test_identical_answers_converge_at_consecutive() -> None:
    """Three alike answers in a row emit once, with the similarity and the streak."""
    d = Driver(ConvergenceDetector(similarity=0.95, consecutive=3, action="warn"))
    assert d.answer("The build is green.") == []
    assert d.answer("the build is GREEN!") == []
    [e] = d.answer("The build, is green")
    assert (e.action, e.similarity, e.consecutive) == ("warn", 1.0, 3)
    assert d.answer("The build is green.") == []


def test_different_answers_do_not_converge() -> None:
    """Answers that differ reset the streak."""
    d = Driver(ConvergenceDetector(consecutive=2))
    for text in ["alpha beta", "gamma delta", "epsilon zeta", "eta"]:
        assert d.answer(text) == []


def test_alternating_drafts_converge() -> None:
    """Two drafts alternating: each matches the answer two back (compared with the last k)."""
    d = Driver(ConvergenceDetector(consecutive=3))
    fired = [
        d.answer(t)
        for t in ["draft one here", "second version", "draft one here", "second version"]
    ]
    assert [len(f) for f in fired] == [0, 0, 0, 1]
    [e] = fired[-1]
    assert (e.signal, e.compared_with, e.consecutive) == ("alternating", 2, 3)


def test_tool_call_responses_and_empty_answers() -> None:
    """Responses asking for tools are ignored; an empty answer clears the streak."""
    d = Driver(ConvergenceDetector(consecutive=2))
    assert d.answer("same") == []
    assert d.answer("same", tool_calls=2) == []
    assert d.answer("") == []
    assert d.answer("same") == []
    assert len(d.answer("same")) == 1


def test_convergence_fires_again_after_a_break() -> None:
    """Once per escalation: a dissimilar answer re-arms the detector."""
    d = Driver(ConvergenceDetector(consecutive=2))
    fired = [len(d.answer(t)) for t in ["a b", "a b", "a b", "x y", "x y"]]
    assert fired == [0, 1, 0, 0, 1]


def test_convergence_across_runs_of_one_session_and_stop_clears() -> None:
    """A session's answers converge across its runs; a stop clears the session."""
    d = Driver(ConvergenceDetector(consecutive=2, action="stop"))
    session = uuid.uuid4()
    d.start_run(session)
    assert d.answer("42") == []
    d.end_run()
    run = d.start_run(session)
    assert [(e.run_id, e.action) for e in d.answer("42.")] == [(run, "stop")]
    d.end_run()
    d.start_run(session)
    assert d.answer("42") == []
    d.start_run(uuid.uuid4())
    assert d.answer("42") == []


def test_similarity_threshold() -> None:
    """One different word in ten keeps a 0.8 threshold and breaks a 0.95 one.

    (Ten words: below the length from which one changed word is the same answer anyway.)
    """
    words = [f"w{i}" for i in range(10)]
    a = " ".join(words)
    b = " ".join([*words[:-1], "other"])
    assert sketch_similarity(answer_sketch(a), answer_sketch(b)) == pytest.approx(9 / 11)
    loose = Driver(ConvergenceDetector(similarity=0.8, consecutive=2))
    strict = Driver(ConvergenceDetector(similarity=0.95, consecutive=2))
    for drv, expected in ((loose, [0, 1]), (strict, [0, 0])):
        assert [len(drv.answer(t)) for t in (a, b)] == expected


@PROPERTY
@given(
    st.sets(st.text("abcdefgh", min_size=1, max_size=3), max_size=60),
    st.sets(st.text("abcdefgh", min_size=1, max_size=3), max_size=60),
)
def test_sketch_similarity_is_exact_jaccard_for_small_answers(a: set[str], b: set[str]) -> None:
    """Below the sketch size the estimate is the exact Jaccard similarity of the word sets."""
    sa, sb = answer_sketch(" ".join(a)), answer_sketch(" ".join(b))
    expected = len(a & b) / len(a | b) if a and b else 0.0
    assert sketch_similarity(sa, sb) == pytest.approx(expected)


def test_sketch_estimates_large_answers_within_tolerance() -> None:
    """Answers beyond the sketch size are estimated, closely: constant memory per session."""
    a = [f"word{i}" for i in range(2000)]
    b = a[:1900] + [f"new{i}" for i in range(100)]
    sa, sb = answer_sketch(" ".join(a)), answer_sketch(" ".join(b))
    assert len(sa) == len(sb) == 128
    true = 1900 / 2100
    assert abs(sketch_similarity(sa, sb) - true) < 0.1


def test_convergence_settings_are_validated() -> None:
    """Thresholds and actions outside the allowed ranges are refused."""
    with pytest.raises(ValueError, match="similarity"):
        ConvergenceDetector(similarity=0)
    with pytest.raises(ValueError, match="consecutive"):
        ConvergenceDetector(consecutive=1)
    with pytest.raises(ValueError, match="action"):
        ConvergenceDetector(action="explode")  # type: ignore[arg-type]
    for action in ("stop", "warn", "compact", "ask_user", "switch_phase"):
        assert ConvergenceDetector(action=action).action == action
