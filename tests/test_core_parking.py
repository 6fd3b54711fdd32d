"""Parking: the checkpoint of a parked wave, the checks before resuming, the resume plan."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from loopobs import (
    AssistantMessage,
    Conversation,
    InvalidResumeInput,
    NotYetAwake,
    RunStatus,
    Sleep,
    Suspend,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from loopobs.contract.trace_links import TraceLinks
from loopobs.loop import parking
from loopobs.loop.tool_phase import ToolAttempt
from loopobs.testing import RecordingObserver
from tests._core_deps import make_deps

UTC = dt.timezone.utc
WAKE = dt.datetime(2030, 1, 1, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def wave_session() -> Conversation:
    calls = (
        ToolCallPart(id="c1", name="approve", arguments={"n": 1}),
        ToolCallPart(id="c2", name="add", arguments={}),
        ToolCallPart(id="c3", name="wait", arguments={}),
    )
    return Conversation(
        messages=[UserMessage(content="pay"), AssistantMessage(tool_calls=calls)], turn=4
    )


def outcomes() -> list[ToolAttempt]:
    return [
        ToolAttempt(
            None,
            park=Suspend("approve?", SCHEMA),
            call=ToolCallPart(id="c1", name="approve", arguments={"n": 1}),
        ),
        ToolAttempt(ToolResultMessage(tool_call_id="c2", name="add", content="3")),
        ToolAttempt(
            None, park=Sleep(WAKE), call=ToolCallPart(id="c3", name="wait", arguments={}), attempt=2
        ),
    ]


def test_no_park_no_checkpoint() -> None:
    """A wave where nothing parked leaves the run going."""
    rec = RecordingObserver()
    deps = make_deps(observers=[rec])
    done = [ToolAttempt(ToolResultMessage(tool_call_id="c2", name="add", content="3"))]
    assert parking.park(deps.observers, uuid.uuid4(), wave_session(), 0, "m1", done) is None
    assert rec.hooks() == []


def test_the_first_park_decides_and_the_others_run_again() -> None:
    """The first parking call is the checkpoint's; later parked calls are listed to re-run."""
    rec = RecordingObserver()
    deps, run, session = make_deps(observers=[rec]), uuid.uuid4(), wave_session()
    parked = parking.park(deps.observers, run, session, 3, "m1", outcomes())
    assert parked is not None
    assert parked.status is RunStatus.SUSPENDED
    cp = parked.checkpoint
    assert (cp.kind, cp.reason, cp.input_schema, cp.turn, cp.model) == (
        "suspend",
        "approve?",
        SCHEMA,
        4,
        "m1",
    )
    assert cp.parked.id == "c1"
    assert [(c.id, c.attempt) for c in cp.rerun] == [("c3", 2)]
    assert [r.content if r else None for r in cp.results] == [None, "3", None]
    event = rec.of("on_suspended")[0]
    assert (event.run_id, event.turn, event.tool_call_id) == (run, 3, "c1")


def test_a_sleep_parks_until_its_time() -> None:
    """A Sleep first: the run sleeps; on_sleep carries wake_at."""
    rec = RecordingObserver()
    deps = make_deps(observers=[rec])
    sleeping = [outcomes()[2]]
    parked = parking.park(deps.observers, uuid.uuid4(), wave_session(), 0, "m1", sleeping)
    assert parked is not None
    assert parked.status is RunStatus.SLEEPING
    assert parked.checkpoint.wake_at == WAKE
    assert rec.of("on_sleep")[0].wake_at == WAKE


def test_resume_checks_input_and_time_without_changing_anything() -> None:
    """Bad input and an early wake are refused; good ones pass."""
    deps = make_deps()
    suspended = parking.park(deps.observers, uuid.uuid4(), wave_session(), 0, "m1", outcomes())
    assert suspended is not None
    with pytest.raises(InvalidResumeInput) as info:
        parking.check_resume(suspended.checkpoint, {"ok": "yes"}, None)
    assert info.value.errors
    parking.check_resume(suspended.checkpoint, {"ok": True}, None)
    done = [ToolResultMessage(tool_call_id=i, name="x", content="ok") for i in ("c1", "c2")]
    sleeping = parking.park(
        deps.observers,
        uuid.uuid4(),
        wave_session(),
        0,
        "m1",
        [outcomes()[2]],
        wave_results=[*done, None],
    )
    assert sleeping is not None
    with pytest.raises(NotYetAwake):
        parking.check_resume(sleeping.checkpoint, None, WAKE - dt.timedelta(seconds=1))
    parking.check_resume(sleeping.checkpoint, None, WAKE)


def test_the_resumed_session_is_the_parked_one() -> None:
    """Rebuilt from the checkpoint when none is given; another session is refused."""
    deps = make_deps()
    session = wave_session()
    parked = parking.park(deps.observers, uuid.uuid4(), session, 0, "m1", outcomes())
    assert parked is not None
    rebuilt = parking.resumed_session(parked.checkpoint, None)
    assert (rebuilt.id, rebuilt.turn, rebuilt.last_model) == (session.id, 4, "m1")
    assert rebuilt.messages == session.messages
    assert parking.resumed_session(parked.checkpoint, session) is session
    with pytest.raises(ValueError, match="session"):
        parking.resumed_session(parked.checkpoint, Conversation())


def test_the_plan_fills_the_suspended_call_and_reruns_the_rest() -> None:
    """Suspended: the input is c1's result, c3 runs again. Sleeping: the parked call re-runs."""
    deps = make_deps()
    suspended = parking.park(deps.observers, uuid.uuid4(), wave_session(), 0, "m1", outcomes())
    assert suspended is not None
    plan = parking.plan_resume(suspended.checkpoint, {"ok": True})
    assert plan.slots == {"c1": 0, "c2": 1, "c3": 2}
    assert plan.results[0] is not None
    assert plan.results[0].content == '{"ok": true}'
    assert [c.id for c in plan.to_run] == ["c3"]
    sleeping = parking.park(
        deps.observers, uuid.uuid4(), wave_session(), 0, "m1", [outcomes()[2], outcomes()[1]]
    )
    assert sleeping is not None
    assert [c.id for c in parking.plan_resume(sleeping.checkpoint, None).to_run] == ["c3"]


def test_the_checkpoint_carries_the_trace_context_when_traced() -> None:
    """with_trace_context adds the run's traceparent; an untraced run's checkpoint is unchanged."""
    deps, run = make_deps(), uuid.uuid4()
    parked = parking.park(deps.observers, run, wave_session(), 0, "m1", outcomes())
    assert parked is not None
    links = TraceLinks()
    assert parking.with_trace_context(parked.checkpoint, links, run) is parked.checkpoint
    links.publish(run, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    traced = parking.with_trace_context(parked.checkpoint, links, run)
    assert traced.trace_context == {
        "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    }
