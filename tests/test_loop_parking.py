"""AgentLoop parking: Suspend and Sleep end the run with a checkpoint; resume continues it."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    Checkpoint,
    Conversation,
    InvalidResumeInput,
    NotYetAwake,
    RunStatus,
    SleepContext,
    SuspendedContext,
)
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests import _loop_parking_tools as parking
from tests._loop_support import add, make_loop, names, u

ROOT = Path(__file__).resolve().parent.parent
PAY = Reply(
    text="paying",
    tool_calls=(
        ToolCall("add", {"a": 1, "b": 1}, id="a1"),
        ToolCall("approve", {"amount": 40}, id="p1"),
    ),
    usage=u(10, 2),
)
DONE = Reply(text="paid", usage=u(30, 3))
TOOLS = (add, parking.approve, parking.webhook, parking.nap)
AFTER_WAKE = parking.WAKE + dt.timedelta(seconds=1)


@pytest.fixture(autouse=True)
def _fresh_naps() -> Iterator[None]:
    parking.naps.clear()
    yield
    parking.naps.clear()


async def test_suspend_ends_the_run_with_a_checkpoint() -> None:
    """Suspend emits on_suspended before on_turn_end and ends the run suspended."""
    loop, rec, _ = make_loop([PAY], tools=TOOLS)
    result = await loop.run("pay the bill")
    assert result.status is RunStatus.SUSPENDED
    assert result.answer is None
    assert_contract(rec.events)
    assert names(rec.events)[-4:] == ["on_tool_post", "on_suspended", "on_turn_end", "on_run_end"]
    post = next(p for p in rec.of("on_tool_post") if p.tool_call_id == "p1")
    assert (post.outcome, post.is_error, post.result_hash) == ("suspend", False, None)
    ctx: SuspendedContext = rec.of("on_suspended")[0]
    assert (ctx.turn, ctx.tool, ctx.tool_call_id, ctx.kind) == (0, "approve", "p1", "human")
    assert ctx.reason == "approve a payment of 40"
    assert ctx.input_schema == parking.SCHEMA
    end = rec.of("on_run_end")[0]
    assert (end.status, end.success) == ("suspended", True)
    cp = result.checkpoint
    assert cp is not None
    assert (cp.kind, cp.run_id, cp.session_id, cp.turn) == (
        "suspend",
        result.run_id,
        result.session.id,
        1,
    )
    assert cp.parked.id == "p1"
    assert [r.content if r else None for r in cp.results] == ["2", None]


async def test_signal_suspension_reports_kind_signal() -> None:
    """Suspend(...).on_signal() parks with kind "signal" in the event and the checkpoint."""
    loop, rec, _ = make_loop(
        [Reply(tool_calls=(ToolCall("webhook", {}),), usage=u(1, 1))], tools=TOOLS
    )
    result = await loop.run("go")
    assert rec.of("on_suspended")[0].kind == "signal"
    assert result.checkpoint is not None
    assert result.checkpoint.suspension_kind == "signal"


async def test_checkpoint_round_trips_and_resumes_in_a_fresh_loop() -> None:
    """A checkpoint survives JSON; a fresh loop resumes it as a new run on the same session."""
    loop, _, _ = make_loop([PAY], tools=TOOLS)
    parked = await loop.run("pay the bill")
    assert parked.checkpoint is not None
    text = parked.checkpoint.model_dump_json()
    restored = Checkpoint.model_validate_json(text)
    assert restored == parked.checkpoint

    fresh, rec, client = make_loop([DONE], tools=TOOLS)
    result = await fresh.resume(restored, input={"approved": True})
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "paid"
    assert result.session.id == parked.session.id
    assert result.run_id != parked.run_id
    assert result.turns == 1
    assert result.usage == u(30, 3)
    start = rec.of("on_run_start")[0]
    assert start.resumed_from == parked.run_id
    assert start.session_id == parked.session.id
    assert [t.turn for t in rec.of("on_turn_start")] == [1]
    assert not rec.of("on_tool_call_received")
    sent = client.requests[0].messages
    assert [(m.role, m.content) for m in sent[-2:]] == [
        ("tool", "2"),
        ("tool", '{"approved": true}'),
    ]
    assert_contract(rec.events)


async def test_invalid_resume_input_lists_errors_and_changes_nothing() -> None:
    """Input failing the schema raises InvalidResumeInput; afterwards a valid resume works."""
    loop, _, _ = make_loop([PAY], tools=TOOLS)
    parked = await loop.run("pay")
    cp = parked.checkpoint
    assert cp is not None
    before = cp.model_dump_json()
    fresh, rec, client = make_loop([DONE], tools=TOOLS)
    with pytest.raises(InvalidResumeInput) as info:
        await fresh.resume(cp, input={"approved": "yes", "extra": 1})
    errors = info.value.errors
    assert "approved: fails 'type' (expected boolean)" in errors
    assert "(input): fails 'additionalProperties' (unexpected extra)" in errors
    assert "yes" not in str(info.value)
    with pytest.raises(InvalidResumeInput, match=r"'required' \(missing approved\)"):
        await fresh.resume(cp, input={})
    assert rec.events == []
    assert client.requests == []
    assert cp.model_dump_json() == before
    result = await fresh.resume(cp, input={"approved": False, "note": "too much"})
    assert result.ok


async def test_a_huge_rejected_input_gives_a_bounded_message_without_its_values() -> None:
    """A 10 MB note of the wrong type, a 10 MB key, thousands of errors: the error names
    paths and rules only, and stays small."""
    loop, _, _ = make_loop([PAY], tools=TOOLS)
    cp = (await loop.run("pay")).checkpoint
    assert cp is not None
    fresh, _, _ = make_loop([DONE], tools=TOOLS)
    huge = "n" * 10_000_000
    with pytest.raises(InvalidResumeInput) as info:
        await fresh.resume(cp, input={"approved": huge, "note": [huge], huge: 1})
    err = info.value
    assert len(str(err)) < 2000
    assert len(json.dumps(err.to_dict())) < 6000
    assert "nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn" not in str(err)
    assert "approved: fails 'type' (expected boolean)" in err.errors
    assert "note: fails 'type' (expected string)" in err.errors
    many: dict[str, object] = {"type": "array", "items": {"type": "integer"}}
    schema_errors = list(_validator(many).iter_errors(["x" * 1000] * 5000))
    bounded = InvalidResumeInput.from_schema_errors(iter(schema_errors))
    assert bounded is not None
    assert len(bounded.errors) == InvalidResumeInput.MAX_ERRORS
    assert bounded.errors[-1] == "… and more"
    assert "xxxx" not in str(bounded)
    assert InvalidResumeInput.from_dict(bounded.to_dict()) == bounded


def _validator(schema: dict[str, object]) -> Any:
    import jsonschema

    return jsonschema.validators.validator_for(schema)(schema)


async def test_resume_on_the_live_session_and_a_wrong_session() -> None:
    """resume() can reuse the parked run's session; another session is refused."""
    client = ScriptedClient([PAY, DONE])
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m1", tools=TOOLS, observers=[rec], detectors=[])
    parked = await loop.run("pay")
    assert parked.checkpoint is not None
    with pytest.raises(ValueError, match="not the parked run's session"):
        await loop.resume(parked.checkpoint, input={"approved": True}, session=Conversation())
    result = await loop.resume(parked.checkpoint, input={"approved": True}, session=parked.session)
    assert result.session is parked.session
    assert result.ok
    assert [t.turn for t in rec.of("on_turn_start")] == [0, 1]
    assert_contract(rec.events)


async def test_sleep_parks_until_wake_at_and_the_call_runs_again_after() -> None:
    """Sleep ends the run sleeping; too early is NotYetAwake; after wake_at the call re-runs."""
    nap = Reply(tool_calls=(ToolCall("nap", {"minutes": 5}, id="n1"),), usage=u(4, 1))
    loop, rec, _ = make_loop([nap], tools=TOOLS)
    parked = await loop.run("rest")
    assert parked.status is RunStatus.SLEEPING
    ctx: SleepContext = rec.of("on_sleep")[0]
    assert (ctx.tool, ctx.tool_call_id, ctx.wake_at) == ("nap", "n1", parking.WAKE)
    assert rec.of("on_run_end")[0].status == "sleeping"
    cp = Checkpoint.model_validate_json(parked.checkpoint.model_dump_json())  # type: ignore[union-attr]
    assert cp.wake_at == parking.WAKE

    fresh, rec2, client = make_loop([Reply(text="rested", usage=u(9, 2))], tools=TOOLS)
    with pytest.raises(NotYetAwake) as info:
        await fresh.resume(cp, now=parking.WAKE - dt.timedelta(seconds=1))
    assert info.value.wake_at == parking.WAKE
    assert rec2.events == []
    result = await fresh.resume(cp, now=AFTER_WAKE)
    assert result.ok
    assert parking.naps == [5, 5]
    assert names(rec2.events) == [
        "on_run_start",
        "on_turn_start",
        "on_tool_pre",
        "on_tool_post",
        "on_turn_end",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    pre, post = rec2.of("on_tool_pre")[0], rec2.of("on_tool_post")[0]
    assert (pre.attempt, post.attempt, pre.turn, post.outcome) == (1, 1, 1, "output")
    assert [t.turn for t in rec2.of("on_turn_start")] == [1, 2]
    assert result.turns == 2
    assert client.requests[0].messages[-1].content == "rested 5 minutes"
    assert_contract(rec2.events)


async def test_a_wave_with_a_suspend_and_a_sleep_reruns_the_sleeper_on_resume() -> None:
    """When two calls of one wave park, the first receives the input and the other runs again."""
    wave = Reply(
        tool_calls=(
            ToolCall("approve", {"amount": 1}, id="p"),
            ToolCall("nap", {"minutes": 2}, id="n"),
        ),
        usage=u(1, 1),
    )
    loop, rec, _ = make_loop([wave], tools=TOOLS)
    parked = await loop.run("both")
    assert parked.status is RunStatus.SUSPENDED
    assert len(rec.of("on_suspended")) == 1
    assert not rec.of("on_sleep")
    cp = parked.checkpoint
    assert cp is not None
    assert [c.id for c in cp.rerun] == ["n"]
    fresh, rec2, client = make_loop([DONE], tools=TOOLS)
    result = await fresh.resume(cp, input={"approved": True})
    assert result.ok
    sent = [(m.tool_call_id, m.content) for m in client.requests[0].messages if m.role == "tool"]
    assert sent == [("p", '{"approved": true}'), ("n", "rested 2 minutes")]
    assert_contract(rec2.events)


RESUMER = """
import asyncio, json, sys
from loopobs import AgentLoop, Checkpoint, RunStatus
from loopobs.llm import Reply, ScriptedClient
from loopobs.testing import RecordingObserver, check_contract
from tests._loop_parking_tools import approve

checkpoint = Checkpoint.model_validate_json(sys.stdin.read())
rec = RecordingObserver()
loop = AgentLoop(ScriptedClient([Reply(text="paid from another process")]), model="m1",
                 tools=[approve], observers=[rec], detectors=[])
result = asyncio.run(loop.resume(checkpoint, input={"approved": True}))
print(json.dumps({
    "status": result.status.value, "answer": result.answer,
    "session": str(result.session.id), "resumed_from": str(rec.of("on_run_start")[0].resumed_from),
    "tool": [m.content for m in result.messages if m.role == "tool"],
    "violations": check_contract(rec.events),
}))
"""


def test_resume_in_another_process() -> None:
    """A checkpoint written as JSON is resumed by a separate Python process."""
    loop, _, _ = make_loop(
        [Reply(tool_calls=(ToolCall("approve", {"amount": 7}, id="p"),))], tools=TOOLS
    )
    parked = loop.run_sync("pay")
    assert parked.checkpoint is not None
    out = subprocess.run(
        [sys.executable, "-c", RESUMER],
        input=parked.checkpoint.model_dump_json(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        timeout=60,
    )
    report = json.loads(out.stdout)
    assert report == {
        "status": "completed",
        "answer": "paid from another process",
        "session": str(parked.session.id),
        "resumed_from": str(parked.run_id),
        "tool": ['{"approved": true}'],
        "violations": [],
    }
