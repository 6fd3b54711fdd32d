"""Sync tools run on the loop's own bounded worker threads: the run returns at the timeout,
and a pool whose threads all hang says so instead of timing out calls that never ran."""

from __future__ import annotations

import threading

from loopobs import AgentLoop, Tool, ToolTimeout, ToolWorkersExhausted, tool
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.loop.workers import ToolWorkers
from loopobs.testing import RecordingObserver

# Long enough that a run waiting for the stuck thread is unmistakable, short enough that a
# regression fails the test instead of hanging it.
SAFETY_RELEASE_S = 5.0


def stuck_tool(release: threading.Event, entered: threading.Event) -> Tool:
    def stuck() -> str:
        """Block until released."""
        entered.set()
        release.wait()
        return "released"

    # The only tool with a short limit, so no other call can time out on a busy machine.
    return Tool(stuck, timeout=0.05)


def test_run_sync_returns_at_the_timeout_not_when_the_thread_ends() -> None:
    """A sync tool past its timeout: run_sync returns while the tool's thread still blocks."""
    release, entered = threading.Event(), threading.Event()
    safety = threading.Timer(SAFETY_RELEASE_S, release.set)
    safety.start()
    try:
        client = ScriptedClient([Reply(tool_calls=(ToolCall("stuck"),)), Reply(text="gave up")])
        rec = RecordingObserver()
        loop = AgentLoop(
            client, model="m1", tools=[stuck_tool(release, entered)], detectors=[], observers=[rec]
        )
        result = loop.run_sync("go")
        # Had run_sync waited for the worker thread, only the safety timer could have ended it.
        assert not release.is_set()
        assert result.ok
        assert isinstance(rec.of("on_tool_post")[0].error, ToolTimeout)
        assert loop.workers.busy == 1
    finally:
        release.set()
        safety.cancel()


async def test_exhausted_workers_are_reported_as_such() -> None:
    """With every worker stuck, a fresh sync call fails as exhausted without running; once a
    thread comes back, sync tools run again."""
    release, entered = threading.Event(), threading.Event()
    ran: list[str] = []

    @tool
    def fresh() -> str:
        """Record that it ran."""
        ran.append("fresh")
        return "ok"

    client = ScriptedClient(
        [
            Reply(tool_calls=(ToolCall("stuck"),)),
            Reply(tool_calls=(ToolCall("fresh"),)),
            Reply(text="done"),
            Reply(tool_calls=(ToolCall("fresh"),)),
            Reply(text="done again"),
        ]
    )
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m1",
        tools=[stuck_tool(release, entered), fresh],
        detectors=[],
        observers=[rec],
        sync_tool_workers=1,
    )
    try:
        assert (await loop.run("go")).ok
        errors = [p.error for p in rec.of("on_tool_post")]
        assert isinstance(errors[0], ToolTimeout)
        assert isinstance(errors[1], ToolWorkersExhausted)
        assert errors[1].workers == 1
        assert ran == []
    finally:
        release.set()
    while loop.workers.busy:  # the released thread finishes its call
        threading.Event().wait(0.001)
    assert (await loop.run("again")).ok
    assert ran == ["fresh"]
    assert loop.workers.threads == 1


async def test_results_and_errors_come_back_from_the_thread() -> None:
    """The pool returns what the function returns and raises what it raises."""
    import pytest

    workers = ToolWorkers(2)
    assert await workers.run(lambda: 41 + 1) == 42

    def boom() -> None:
        raise KeyError("nope")

    with pytest.raises(KeyError):
        await workers.run(boom)
    assert workers.busy == 0
    with pytest.raises(ValueError, match="max_workers"):
        ToolWorkers(0)
