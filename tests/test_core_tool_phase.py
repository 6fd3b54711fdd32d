"""ToolPhase: each call's attempt in its own task, outcomes in the model's order, posts paired."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from loopobs import (
    InvalidToolInput,
    Output,
    Suspend,
    Tool,
    ToolCallPart,
    ToolExecutionError,
    ToolTimeout,
    tool,
)
from loopobs.loop.tool_phase import ToolPhase
from loopobs.testing import RecordingObserver
from tests._core_deps import make_deps


@tool
async def slow(ms: int) -> str:
    """Sleep, then say how long."""
    await asyncio.sleep(ms / 1000)
    return f"slept {ms}"


@tool
def add(a: int, b: int) -> int:
    """Add."""
    return a + b


@tool
def broken() -> str:
    """Always fails."""
    raise KeyError("missing")


@tool
def gate() -> Suspend:
    """Park for a human."""
    return Suspend("approve?")


def part(name: str, call_id: str, **arguments: object) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, arguments=arguments)


def phase_for(*tools: object, **settings: Any) -> tuple[ToolPhase, RecordingObserver]:
    rec = RecordingObserver()
    return ToolPhase(make_deps(tools=tools, observers=[rec], **settings), uuid.uuid4()), rec


async def test_outcomes_come_back_in_the_models_order() -> None:
    """The slow first call finishes last but its result stays first; posts pair with pres."""
    phase, rec = phase_for(slow, add)
    outcomes = await phase(
        0, [part("slow", "c1", ms=20), part("add", "c2", a=1, b=2)], received=True
    )
    assert [o.message.content for o in outcomes if o.message] == ["slept 20", "3"]
    assert [c.tool_call_id for c in rec.of("on_tool_call_received")] == ["c1", "c2"]
    assert sorted(p.tool_call_id for p in rec.of("on_tool_post")) == ["c1", "c2"]
    assert all(p.outcome == "output" for p in rec.of("on_tool_post"))


async def test_sequential_calls_run_one_after_the_other() -> None:
    """Without parallel calls each attempt ends before the next begins."""
    phase, rec = phase_for(slow, add, parallel_tool_calls=False)
    await phase(0, [part("slow", "c1", ms=5), part("add", "c2", a=1, b=2)], received=True)
    assert [h for h in rec.hooks() if h in ("on_tool_pre", "on_tool_post")] == [
        "on_tool_pre",
        "on_tool_post",
        "on_tool_pre",
        "on_tool_post",
    ]


async def test_failures_are_results_for_the_model() -> None:
    """Unknown tool, raising tool, bad JSON and timeout each give an error result."""
    # only the slow tool has a short limit: the others must not race it on a busy machine
    limited = Tool(slow.fn, name="slow", timeout=0.01)
    phase, rec = phase_for(limited, broken)
    bad_json = ToolCallPart(id="c3", name="broken", arguments={}, raw_arguments="{not json")
    outcomes = await phase(
        0,
        [part("nope", "c1"), part("broken", "c2"), bad_json, part("slow", "c4", ms=5_000)],
        received=True,
    )
    messages = [o.message for o in outcomes]
    assert all(m is not None and m.is_error for m in messages)
    assert "nope" in messages[0].content  # type: ignore[union-attr]
    assert "{not json" in messages[2].content  # type: ignore[union-attr]
    errors = {p.tool_call_id: p.error for p in rec.of("on_tool_post")}
    assert "c1" not in errors  # an unknown tool gets no attempt
    assert isinstance(errors["c2"], ToolExecutionError)
    assert isinstance(errors["c3"], InvalidToolInput)
    assert "{not json" not in str(errors["c3"])  # content stays out of the error
    assert isinstance(errors["c4"], ToolTimeout)


async def test_a_park_is_an_outcome_without_a_message() -> None:
    """A Suspend comes back as the call's park; its post says so."""
    phase, rec = phase_for(gate, add)
    outcomes = await phase(
        2, [part("gate", "c1"), part("add", "c2", a=2, b=2)], received=True, attempts=[1, 0]
    )
    parked, added = outcomes
    assert parked.message is None
    assert isinstance(parked.park, Suspend)
    assert parked.call is not None
    assert parked.call.id == "c1"
    assert parked.attempt == 1
    assert added.message is not None
    assert added.message.content == "4"
    post = next(p for p in rec.of("on_tool_post") if p.tool_call_id == "c1")
    assert (post.outcome, post.attempt, post.turn) == ("suspend", 1, 2)


async def test_re_runs_are_not_received_again() -> None:
    """received=False (a resume re-running parked calls) emits no on_tool_call_received."""
    phase, rec = phase_for(add)
    await phase(0, [part("add", "c1", a=1, b=1)], received=False)
    assert rec.of("on_tool_call_received") == []
    assert len(rec.of("on_tool_post")) == 1


async def test_cancelling_the_phase_posts_every_started_attempt() -> None:
    """Cancelled mid-phase: each running attempt still gets its on_tool_post, then it raises."""
    started = asyncio.Event()

    @tool
    async def hang(n: int) -> str:
        """Wait forever."""
        if n == 2:
            started.set()
        await asyncio.Event().wait()
        return "never"

    phase, rec = phase_for(hang)
    task = asyncio.create_task(
        phase(0, [part("hang", "c1", n=1), part("hang", "c2", n=2)], received=True)
    )
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    posts = rec.of("on_tool_post")
    assert sorted(p.tool_call_id for p in posts) == ["c1", "c2"]
    assert all(p.is_error for p in posts)


async def test_output_with_a_display_hint_is_reported() -> None:
    """An Output's display hint reaches the post; the result text is the rendered value."""

    @tool
    def listing() -> Output:
        """A JSON listing."""
        from loopobs import DisplayHint

        return Output({"a": 1}, display_hint=DisplayHint.json())

    phase, rec = phase_for(listing)
    outcomes = await phase(0, [part("listing", "c1")], received=True)
    assert outcomes[0].message is not None
    post = rec.of("on_tool_post")[0]
    assert post.display_hint is not None
    assert post.display_hint.type == "json"
    assert post.result == outcomes[0].message.content
