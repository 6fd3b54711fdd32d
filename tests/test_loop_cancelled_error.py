"""A CancelledError nobody asked for (raised by a tool or an observer) is that part's failure,
not a cancellation of the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    LoopObserver,
    ObserverSet,
    RunStartContext,
    RunStatus,
    ToolExecutionError,
    tool,
)
from loopobs.exporters import MetricsObserver, TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, assert_contract


@tool
async def rogue() -> str:
    """Raise CancelledError though nobody cancelled anything."""
    raise asyncio.CancelledError()


async def test_a_tool_raising_cancelled_error_is_a_tool_error() -> None:
    """The run goes on: the model gets an error result and answers."""
    rec = RecordingObserver()
    client = ScriptedClient([Reply(tool_calls=(ToolCall("rogue"),)), Reply(text="recovered")])
    loop = AgentLoop(client, model="m1", tools=[rogue], detectors=[], observers=[rec])
    result = await loop.run("go")
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "recovered"
    post = rec.of("on_tool_post")[0]
    assert isinstance(post.error, ToolExecutionError)
    assert post.error.error_type == "CancelledError"
    assert_contract(rec.events)


async def test_cancelling_the_run_still_cancels_a_running_tool() -> None:
    """A real cancellation of the run is still a cancellation."""
    started = asyncio.Event()

    @tool
    async def hang() -> str:
        """Wait forever."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    rec = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient([Reply(tool_calls=(ToolCall("hang"),))]),
        model="m1",
        tools=[hang],
        detectors=[],
        observers=[rec],
    )
    task = asyncio.create_task(loop.run("go"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rec.of("on_run_end")[0].status is RunStatus.CANCELLED
    assert_contract(rec.events)


class CancelsOnStart(LoopObserver):
    """An observer with a bug: raises CancelledError from on_run_start."""

    def on_run_start(self, ctx: RunStartContext) -> None:
        raise asyncio.CancelledError()


async def test_an_observer_raising_cancelled_error_leaves_nothing_open(
    tracer_provider: Any, meter_provider: Any, span_exporter: Any
) -> None:
    """Counted as that observer's failure; the run completes; spans end, runs.active is 0."""
    tracing, metrics = TracingObserver(tracer_provider), MetricsObserver(meter_provider)
    bad = CancelsOnStart()
    loop = AgentLoop(
        ScriptedClient([Reply(text="fine")]),
        model="m1",
        detectors=[],
        observers=[tracing, metrics, bad],
    )
    result = await loop.run("go")
    assert result.ok
    assert tracing.open_spans() == 0
    assert metrics.open_runs == 0
    assert loop.observers.failures == {(bad.name, "on_run_start"): 1}
    assert [s.name for s in span_exporter.get_finished_spans()][-1].startswith("invoke_agent")


def test_a_strict_set_still_raises_it() -> None:
    """A strict set (for tests of observers) lets the observer's CancelledError through."""
    strict = ObserverSet([CancelsOnStart()], strict=True)
    import uuid

    run = uuid.uuid4()
    with pytest.raises(asyncio.CancelledError):
        strict.on_run_start(RunStartContext(run_id=run, time_ns=0, session_id=run))
