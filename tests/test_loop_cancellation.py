"""AgentLoop cancellation: every open stream, tool, turn and run is closed, then it propagates."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from loopobs import AgentLoop, Cancelled, Conversation, RunStatus, tool
from loopobs.contract.model import Finish, ModelRequest, StreamEvent, TextDelta
from loopobs.llm import Reply, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_support import make_loop, u


class HangingClient:
    """Streams one delta, then waits forever; tells the test when it got there."""

    provider = "hanging"

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.closed = False

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self._play()

    async def _play(self) -> AsyncIterator[StreamEvent]:
        try:
            yield TextDelta("thinking about it")
            self.waiting.set()
            await asyncio.sleep(3600)
            yield Finish()
        finally:
            self.closed = True


def _assert_cancelled_cleanly(rec: RecordingObserver, session: Conversation) -> None:
    assert_contract(rec.events)
    turn_end = rec.of("on_turn_end")[-1]
    assert turn_end.success is False
    assert isinstance(turn_end.error, Cancelled)
    end = rec.of("on_run_end")[0]
    assert (end.status, end.success) == ("cancelled", False)
    assert isinstance(end.error, Cancelled)
    assert rec.events[-1][0] == "on_run_end"
    assert not session.busy


async def test_cancel_during_a_stream() -> None:
    """Cancelling mid-stream: on_stream_failure(Cancelled), turn and run end, CancelledError."""
    client = HangingClient()
    loop, rec, _ = make_loop(client)
    session = Conversation()
    task = asyncio.create_task(loop.run("q", session=session))
    await asyncio.wait_for(client.waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    failure = rec.of("on_stream_failure")[0]
    assert isinstance(failure.error, Cancelled)
    assert client.closed
    _assert_cancelled_cleanly(rec, session)


def _blocking_tools(started: asyncio.Event, count: int) -> list[object]:
    arrived = 0

    @tool
    async def quick() -> str:
        """Returns at once."""
        return "quick"

    @tool
    async def stuck(n: int) -> str:
        """Never returns."""
        nonlocal arrived
        arrived += 1
        if arrived == count:
            started.set()
        await asyncio.sleep(3600)
        return "never"

    return [quick, stuck]


@pytest.mark.parametrize("parallel", [True, False])
async def test_cancel_during_tools(parallel: bool) -> None:
    """Cancelling while tools run: every started tool gets an error post, then the turn ends."""
    started = asyncio.Event()
    stuck_calls = 2 if parallel else 1
    tools = _blocking_tools(started, stuck_calls)
    calls = (
        ToolCall("quick", {}, id="q"),
        ToolCall("stuck", {"n": 1}, id="s1"),
        ToolCall("stuck", {"n": 2}, id="s2"),
    )
    loop, rec, _ = make_loop(
        [Reply(tool_calls=calls, usage=u(3, 1))], tools=tools, parallel_tool_calls=parallel
    )
    session = Conversation()
    task = asyncio.create_task(loop.run("q", session=session))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    posts = {p.tool_call_id: p for p in rec.of("on_tool_post")}
    assert posts["q"].outcome == "output"
    expected_stuck = ["s1", "s2"] if parallel else ["s1"]
    assert sorted(k for k in posts if k != "q") == expected_stuck
    for call_id in expected_stuck:
        assert posts[call_id].is_error
        assert posts[call_id].outcome == "error"
        assert isinstance(posts[call_id].error, Cancelled)
    if not parallel:
        assert [p.tool_call_id for p in rec.of("on_tool_pre")] == ["q", "s1"]
    _assert_cancelled_cleanly(rec, session)
    assert rec.of("on_run_end")[0].input_tokens == 3


async def test_cancel_during_a_sync_tool() -> None:
    """A sync tool running in a thread is abandoned on cancel; its post is still emitted."""
    import threading

    entered = threading.Event()
    release = threading.Event()

    @tool
    def blocking() -> str:
        """Blocks a worker thread until released."""
        entered.set()
        release.wait(10)
        return "done"

    client_steps = [Reply(tool_calls=(ToolCall("blocking", {}, id="b"),))]
    loop, rec, _ = make_loop(client_steps, tools=[blocking])
    session = Conversation()
    task = asyncio.create_task(loop.run("q", session=session))
    assert await asyncio.to_thread(entered.wait, 5)
    task.cancel()
    try:
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    assert rec.of("on_tool_post")[0].is_error
    _assert_cancelled_cleanly(rec, session)


async def test_the_session_runs_again_after_a_cancelled_run() -> None:
    """After a cancelled run the session is free and a new run on it completes."""
    client = HangingClient()
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m1", observers=[rec], detectors=[])
    session = Conversation()
    task = asyncio.create_task(loop.run("q", session=session))
    await asyncio.wait_for(client.waiting.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    loop.client = _Answering()
    result = await loop.run("again", session=session)
    assert result.status is RunStatus.COMPLETED
    assert [t.turn for t in rec.of("on_turn_start")] == [0, 1]
    assert_contract(rec.events)


class _Answering:
    provider = "answering"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self._play()

    async def _play(self) -> AsyncIterator[StreamEvent]:
        yield TextDelta("ok")
        yield Finish(reason="stop")
