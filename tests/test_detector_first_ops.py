"""An operation seen once is held as a plain tuple until it comes again: the detector's
snapshots and verdicts are those of a state made of streak objects only."""

from __future__ import annotations

import os
from typing import Any

from loopobs import RepetitionDetector
from loopobs.detectors import COMPILED
from loopobs.detectors.repetition import _STREAK_FIELDS, _OpStat, _streak
from tests._real_trajectories import ENV_VAR, real_records
from tests.test_detectors_signals import Feed

_Call = tuple[str, dict[str, Any], str]


def _flows() -> list[list[_Call]]:
    """A synthetic session (re-reads, edits, a cycle, a repeat that stops) and, when they
    are given, every real trajectory's calls."""
    synthetic: list[_Call] = []
    for i in range(30):
        synthetic.append(("bash", {"command": f"cat src/m{i % 4}.py"}, f"def f{i % 4}(): ..." * 3))
        if i % 7 == 0:
            synthetic.append(("bash", {"command": f"sed -i 's/a/b{i}/' src/m0.py"}, ""))
    synthetic += [("search", {"q": "x"}, "no results for x at all"), ("open", {"p": 1}, "page 1")]
    synthetic += [("search", {"q": "x"}, "no results for x at all"), ("open", {"p": 1}, "page 1")]
    synthetic += [("run_tests", {}, "FAILED test_a: 1 != 2, see the log")] * 6
    flows = [synthetic]
    if ENV_VAR in os.environ:
        for record in real_records():
            ops = record.get("ops", [])
            flows.append(
                [
                    (op["tool"], dict(op.get("args") or {}), op.get("result") or "")
                    for op in ops
                    if op.get("op") == "call"
                ]
            )
    return flows


def _verdicts(feed: Feed, calls: list[_Call]) -> list[list[tuple[str | None, str]]]:
    return [[(e.signal, e.action) for e in feed.call(*call)] for call in calls]


def test_a_snapshot_holds_operations_seen_once_as_streaks_and_moves_unchanged() -> None:
    held_once = 0
    for calls in _flows():
        whole = _verdicts(Feed(RepetitionDetector()), calls)
        half = len(calls) // 2
        detector = RepetitionDetector()
        feed = Feed(detector)
        first = _verdicts(feed, calls[:half])
        state = detector._sessions.get(feed.run_id.int)
        if state is None:
            continue  # stopped in the first half: nothing left to move
        held_once += sum(isinstance(v, tuple) for v in state.ops.values())
        snapshot = detector.snapshot(feed.run_id)
        # The same state with every operation a streak object dumps the same.
        for op, value in list(state.ops.items()):
            state.ops[op] = _streak(value)
        assert all(isinstance(v, _OpStat) for v in state.ops.values())
        assert detector.snapshot(feed.run_id) == snapshot
        # Moved to a fresh detector, the session goes on with the same verdicts.
        moved = RepetitionDetector()
        assert moved.restore(feed.run_id, snapshot)
        other = Feed(moved)  # its observers and recorder, at this feed's time and run
        feed.observers, feed.recorder = other.observers, other.recorder
        second = _verdicts(feed, calls[half:])
        assert first + second == whole
    assert held_once, "no operation was held as seen once: the test checks nothing"


def test_an_operation_seen_once_snapshots_as_a_streak_of_one_begun_at_its_step() -> None:
    """The fields a snapshot gives an operation seen once are those of a new streak: one
    count, begun and last seen at its step, marked with the session's counters then."""
    detector = RepetitionDetector()
    feed = Feed(detector)
    feed.call("bash", {"command": "cat a.py"}, "print('a')" * 4)
    t1 = int(feed.t * 1e9)  # when its post came
    feed.call("bash", {"command": "sed -i 's/a/b/' a.py"}, "")  # a write: progress, new work
    feed.call("bash", {"command": "cat b.py"}, "print('b')" * 4)
    t3 = int(feed.t * 1e9)
    snapshot = detector.snapshot(feed.run_id)
    assert snapshot is not None
    rows = snapshot["state"]["ops"]
    assert len(rows) == 3
    fields = [dict(zip(_STREAK_FIELDS, row[3], strict=True)) for row in rows]
    assert fields[0] == {
        **dict.fromkeys(_STREAK_FIELDS, 0),
        "count": 1,
        "paced": False,
        "first_ns": t1,
        "last_ns": t1,
        "first_pos": 1,
        "last_pos": 1,
        "novel_mark": 1,
    }
    assert fields[2] == {
        **fields[0],
        "first_ns": t3,
        "last_ns": t3,
        "first_pos": 3,
        "last_pos": 3,
        "start_epoch": 1,
        "epoch": 1,
        "novel_mark": 3,
    }


def test_a_snapshot_names_every_field_of_a_streak_once() -> None:
    """A snapshot's streak fields are the streak's fields, each once: those of a new streak
    read by name (compiled too), and (interpreted, where the class has them) its slots."""
    st = _OpStat.first(11, 12, 13, 14, 15, 16)
    assert dict(zip(_STREAK_FIELDS, [getattr(st, n) for n in _STREAK_FIELDS], strict=True)) == {
        "count": 1,
        "epoch": 13,
        "first_ns": 11,
        "first_pos": 12,
        "gen": 14,
        "last_gap": 0,
        "last_ns": 11,
        "last_pos": 12,
        "level": 0,
        "level_pos": 0,
        "novel_mark": 16,
        "paced": False,
        "polls": 0,
        "start_epoch": 13,
        "wait_mark": 15,
    }
    if not COMPILED:
        assert sorted(_OpStat.__slots__) == list(_STREAK_FIELDS)
