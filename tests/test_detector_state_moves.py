"""A session's detector state in its store: a conversation that moves keeps its loop history."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest

from loopobs import RepetitionDetector
from loopobs.contract.events import StreamSuccessContext
from loopobs.detectors._session import SNAPSHOT_VERSION
from loopobs.sessions.stores import FileStore, MemoryStore
from tests._detector_moves import SENDS, messages, send_all
from tests.test_detectors_signals import Feed


async def _unmoved() -> list[Any]:
    verdicts, errors = await send_all(MemoryStore(), uuid.uuid4(), messages())
    assert errors == 0
    return verdicts


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_session_reopened_elsewhere_detects_its_loop_at_the_same_step(
    kind: str, tmp_path: Path
) -> None:
    """Half the conversation on one loop, the rest on a fresh loop with fresh detectors
    reopening it from the same store: the same verdicts at the same steps as a session
    that never moved."""
    unmoved = await _unmoved()
    stops = [i for i, (status, _) in enumerate(unmoved) if status == "loop_detected"]
    assert stops, unmoved  # the conversation loops, and is stopped
    half = stops[0] // 2 + 1
    assert 0 < half < stops[0]
    store = MemoryStore() if kind == "memory" else FileStore(tmp_path)
    sid = uuid.uuid4()
    texts = messages()
    first, errors_1 = await send_all(store, sid, texts[:half])
    second, errors_2 = await send_all(
        store if kind == "memory" else FileStore(tmp_path), sid, texts[half:]
    )
    assert errors_1 == errors_2 == 0
    assert first + second == unmoved
    # Without the stored state, the second worker would have started the streak over.
    fresh, _ = await send_all(MemoryStore(), uuid.uuid4(), texts[half:])
    assert fresh != unmoved[half:]


@pytest.mark.parametrize("half", [2, 3, 4])
async def test_converging_answers_are_stopped_at_the_same_step_after_a_move(half: int) -> None:
    """The convergence detector's recent answers move too (sketches and sizes; numbers as
    keys): a conversation that converges across the move stops where it would have."""
    texts = messages(converge=True)
    unmoved, _ = await send_all(MemoryStore(), uuid.uuid4(), texts, converge=True)
    assert any(status == "converged" for status, _ in unmoved)
    store, sid = MemoryStore(), uuid.uuid4()
    first, _ = await send_all(store, sid, texts[:half], converge=True)
    second, errors = await send_all(store, sid, texts[half:], converge=True)
    assert errors == 0
    assert first + second == unmoved


async def test_the_stored_state_holds_keys_and_counts_never_content() -> None:
    store = MemoryStore()
    sid = uuid.uuid4()
    await send_all(store, sid, messages()[:3])
    stored = store.states[sid]
    for content in (b"order", b"pending", b"any news", b"still"):  # arguments, results, text
        assert content not in stored
    data = json.loads(stored)
    assert data["v"] == 1
    assert data["detectors"]["RepetitionDetector"]["kind"] == "repetition"
    converged = MemoryStore()
    await send_all(converged, sid, messages(converge=True)[:3], converge=True)
    answers = converged.states[sid]
    for content in (b"order", b"pending", b"warehouse"):
        assert content not in answers  # no word of the answer
    snapshot = json.loads(answers)["detectors"]["ConvergenceDetector"]
    assert snapshot["kind"] == "convergence"
    numbers = [n for row in snapshot["state"]["history"] for n in row[2]]
    assert numbers  # the answer's "17", as a key only
    assert all(n.startswith("#") and n != "#17" for n in numbers)


@pytest.mark.parametrize(
    "stored",
    [
        b"not json",
        b'{"v": 99, "detectors": {}}',
        json.dumps(
            {"v": 1, "detectors": {"RepetitionDetector": {"v": 7, "kind": "repetition"}}}
        ).encode(),
        json.dumps(
            {
                "v": 1,
                "detectors": {
                    "RepetitionDetector": {
                        "v": SNAPSHOT_VERSION,
                        "kind": "repetition",
                        "config": [130, 512],
                        "state": {"scalars": ["x"]},
                    }
                },
            }
        ).encode(),
    ],
    ids=["not-json", "session-version", "detector-version", "corrupt-state"],
)
async def test_a_corrupt_or_unknown_state_is_ignored_with_a_warning(
    stored: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore()
    sid = uuid.uuid4()
    store.states[sid] = stored
    with caplog.at_level(logging.WARNING):
        verdicts, errors = await send_all(store, sid, messages())
    assert verdicts == await _unmoved()  # fresh detector state: as a new conversation
    assert errors == 0
    assert any("ignored the stored" in r.getMessage() for r in caplog.records)


class FailingStateStore(MemoryStore):
    saves = 0

    async def save_state(self, session_id: uuid.UUID, data: bytes) -> None:
        type(self).saves += 1
        raise OSError("disk full")

    async def load_state(self, session_id: uuid.UUID) -> bytes | None:
        raise OSError("disk gone")


async def test_a_store_that_fails_the_state_never_fails_a_send(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FailingStateStore()
    sid = uuid.uuid4()
    with caplog.at_level(logging.WARNING):
        verdicts, errors = await send_all(store, sid, messages())
    assert verdicts == await _unmoved()
    assert errors == 1 + SENDS  # the load, then one save per run
    assert len(store.messages[sid]) > SENDS  # the history lost nothing
    assert any("was not saved" in r.getMessage() for r in caplog.records)


def test_a_snapshot_of_another_configuration_is_refused() -> None:
    sid = uuid.uuid4()
    small = RepetitionDetector(memory=8)
    from loopobs.contract.events import RunStartContext

    small.on_run_start(RunStartContext(run_id=sid, time_ns=1, session_id=sid, agent="a"))
    small._state(sid)
    snapshot = small.snapshot(sid)
    assert snapshot is not None
    assert not RepetitionDetector().restore(sid, snapshot)
    assert RepetitionDetector(memory=8).restore(sid, json.loads(json.dumps(snapshot)))


async def test_reset_forgets_the_stored_state() -> None:
    store = MemoryStore()
    sid = uuid.uuid4()
    await send_all(store, sid, messages()[:3])
    assert sid in store.states
    await store.clear(sid)
    assert sid not in store.states


async def test_the_session_s_own_store_and_an_opt_out_save_no_state() -> None:
    from loopobs import AgentLoop, AgentSession, RepetitionDetector
    from loopobs.llm import Reply, ScriptedClient

    loop = AgentLoop(ScriptedClient([Reply(text="a"), Reply(text="b")]), model="m")
    loop.detectors = (RepetitionDetector(),)
    async with AgentSession(loop) as own:
        await (await own.send("hi"))
        assert isinstance(own.store, MemoryStore)
        assert own.store.states == {}
    store = MemoryStore()
    async with AgentSession(loop, store=store, detector_state=False) as opted_out:
        await (await opted_out.send("hi"))
    assert store.states == {}


def _repeats(feed: Feed, n: int, model_s: float) -> list[tuple[str | None, str]]:
    """``n`` re-runs of one failing test, ``model_s + 1`` s apart, ``model_s`` of them the
    model's (no model call reported when it is 0)."""
    fired = []
    for _ in range(n):
        if model_s:
            feed.observers.on_stream_success(
                StreamSuccessContext(
                    run_id=feed.run_id, time_ns=0, turn=0, model="m", duration_ms=model_s * 1e3
                )
            )
        fired += feed.call(
            "bash", {"command": "pytest -q"}, "FAILED test_a - 1 != 2", gap=model_s + 1.0
        )
    return [(e.signal, e.action) for e in fired]


@pytest.mark.parametrize(("version", "model_s"), [(SNAPSHOT_VERSION, 44.0), (2, 0.0)])
def test_the_models_time_moves_with_the_state(version: int, model_s: float) -> None:
    """A slow model's session moved after two re-runs is warned and stopped at the same
    re-runs as one that stayed: the snapshot carries the model's time. A version 2
    snapshot (an older worker's: no model time counted, its times the wall's) is read as
    if the model had taken none."""
    stayed = Feed(RepetitionDetector())
    unmoved = _repeats(stayed, 2, model_s) + _repeats(stayed, 3, 44.0)
    assert unmoved == [("repeat", "warn"), ("repeat", "stop")]
    detector = RepetitionDetector()
    first = Feed(detector)
    before = _repeats(first, 2, model_s)
    snapshot = detector.snapshot(first.run_id)
    assert snapshot is not None
    if version == 2:
        assert snapshot["state"]["scalars"][-1] == 0  # no model time: what v2 had
        snapshot = {**snapshot, "v": 2}
        snapshot["state"] = {**snapshot["state"], "scalars": snapshot["state"]["scalars"][:-1]}
    moved = RepetitionDetector()
    assert moved.restore(first.run_id, json.loads(json.dumps(snapshot)))
    second = Feed(moved)
    second.run_id, second.t, second.n = first.run_id, first.t, first.n
    assert before + _repeats(second, 3, 44.0) == unmoved
