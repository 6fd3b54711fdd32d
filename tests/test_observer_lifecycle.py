"""Observers attached and detached while runs are in flight, failures counted once, async hooks.

A detached observer still sees the end of every run it saw start (so no span
stays open and ``runs_active`` comes back to 0); a detector's failure is in
the same failure count as a user observer's; an ``async def`` hook is refused
when the observer is added.
"""

from __future__ import annotations

import asyncio
import io
import random
import uuid

import pytest

from loopobs import AgentLoop, LoopObserver, RunStatus
from loopobs.contract.events import EventContext, RunEndContext, RunStartContext, ToolPreContext
from loopobs.contract.observer import EventSink, ObserverSet
from loopobs.exporters import JsonlRecorder
from loopobs.llm import ScriptedClient
from loopobs.testing import RecordingObserver, assert_contract
from tests._reliability import (
    Stack,
    collect,
    lookup,
    make_stack,
    otel_sum,
    prom_sum,
    tool_script,
)


def _assert_nothing_open(stack: Stack) -> None:
    assert stack.tracing.open_spans() == 0
    assert stack.tracing.open_runs == 0
    assert stack.metrics.open_runs == 0
    assert stack.prometheus.open_runs == 0
    assert prom_sum(stack.prometheus.registry, "loopobs_runs_active") == 0
    assert otel_sum(collect(stack), "loopobs.runs.active") == 0


def _run_end(run_id: uuid.UUID, time_ns: int) -> RunEndContext:
    return RunEndContext(
        run_id=run_id,
        time_ns=time_ns,
        success=True,
        error=None,
        total_turns=0,
        duration_ms=0.0,
        status=RunStatus.COMPLETED,
    )


def _exporters(stack: Stack) -> list[LoopObserver]:
    return [stack.tracing, stack.metrics, stack.prometheus, stack.jsonl, stack.recorder]


async def test_detaching_mid_run_still_delivers_that_runs_end() -> None:
    """Detached inside a tool call: the run's spans all end and the gauges return to 0."""
    stack = make_stack()
    loop: AgentLoop

    class DetachAll(LoopObserver):
        def on_tool_pre(self, ctx: ToolPreContext) -> None:
            for observer in _exporters(stack):
                if observer in loop.observers:
                    loop.detach(observer)

    loop = AgentLoop(
        ScriptedClient(tool_script(2)),
        model="m1",
        tools=[lookup],
        observers=[DetachAll(), *_exporters(stack)],
    )
    result = await loop.run("q")
    assert result.ok
    _assert_nothing_open(stack)
    assert_contract(stack.recorder.events)
    assert stack.recorder.hooks()[-1] == "on_run_end"
    # A run started after the detach is not delivered at all.
    stack.recorder.reset()
    await loop.run("again")
    assert stack.recorder.events == []
    assert len(stack.jsonl_lines()) > 0
    stack.close()


@pytest.mark.parametrize("seed", [1, 7])
async def test_attach_detach_toggling_across_concurrent_runs(seed: int) -> None:
    """200 runs while the exporters are detached and re-attached at random moments:
    every span ends, runs_active is 0, and each run an observer saw start is whole."""
    rng = random.Random(seed)
    stack = make_stack()
    exporters = _exporters(stack)

    class Toggle(LoopObserver):
        def on_tool_pre(self, ctx: ToolPreContext) -> None:
            observer = rng.choice(exporters)
            if observer in loop.observers:
                loop.detach(observer)
            else:
                loop.attach(observer)

    loop = AgentLoop(
        ScriptedClient(tool_script(3)),
        model="m1",
        tools=[lookup],
        observers=[Toggle(), *exporters],
        max_turns=10,
    )
    results = await asyncio.gather(*(loop.run(f"q{i}") for i in range(200)))
    assert all(r.ok for r in results)
    _assert_nothing_open(stack)
    # Every start the recorder saw has its end (a re-attach mid-run sees a run's rest only).
    starts = {c.run_id for c in stack.recorder.of("on_run_start")}
    ends = {c.run_id for c in stack.recorder.of("on_run_end")}
    assert starts <= ends
    stack.close()


def test_a_removed_observer_gets_only_the_runs_it_saw_start() -> None:
    rec = RecordingObserver()
    observers = ObserverSet([rec])
    seen, unseen = uuid.uuid4(), uuid.uuid4()
    observers.on_run_start(
        RunStartContext(run_id=seen, time_ns=1, session_id=uuid.uuid4(), agent="a", model="m")
    )
    observers.remove(rec)
    observers.add(RecordingObserver())  # someone still listening, so runs keep flowing
    observers.on_run_start(
        RunStartContext(run_id=unseen, time_ns=2, session_id=uuid.uuid4(), agent="a", model="m")
    )
    for run_id in (unseen, seen):
        observers.on_run_end(_run_end(run_id, 3))
    assert [(h, c.run_id) for h, c in rec.events] == [("on_run_start", seen), ("on_run_end", seen)]
    # Drained: it is gone for good now.
    observers.on_run_end(_run_end(seen, 4))
    assert len(rec.events) == 2
    assert observers._draining == ()
    assert observers._runs == {}


def test_a_removed_observer_of_tool_hooks_only_is_released_at_the_run_end() -> None:
    """An observer that never listened to the run bounds still drains, and is then dropped."""

    class ToolsOnly(LoopObserver):
        def __init__(self) -> None:
            self.seen: list[str] = []

        def on_tool_pre(self, ctx: ToolPreContext) -> None:
            self.seen.append(ctx.tool_call_id)

    class Starts(LoopObserver):
        def on_run_start(self, ctx: RunStartContext) -> None: ...

    tools, starts = ToolsOnly(), Starts()
    observers = ObserverSet([tools, starts])
    run_id = uuid.uuid4()
    observers.on_run_start(
        RunStartContext(run_id=run_id, time_ns=1, session_id=uuid.uuid4(), agent="a", model="m")
    )
    observers.remove(tools)
    observers.remove(starts)
    assert observers.listens("on_tool_pre")
    assert observers.listens("on_run_end")
    observers.on_tool_pre(
        ToolPreContext(run_id=run_id, time_ns=2, turn=0, tool="t", tool_call_id="c1")
    )
    observers.on_tool_pre(
        ToolPreContext(run_id=uuid.uuid4(), time_ns=2, turn=0, tool="t", tool_call_id="other run")
    )
    observers.on_run_end(_run_end(run_id, 3))
    assert tools.seen == ["c1"]
    assert observers._draining == ()
    assert observers.listening == frozenset()


# -- one failure count ------------------------------------------------------------------


class FailingDetector(LoopObserver):
    name = "FailingDetector"

    def on_tool_pre(self, ctx: ToolPreContext) -> None:
        raise RuntimeError("detector bug")


async def test_detector_failures_are_in_the_one_failure_count() -> None:
    """loop.observers.failures, loopobs_observer_errors_total and loopobs.observer.errors
    all count a failing detector, as they count a failing user observer."""
    stack = make_stack()
    loop = AgentLoop(
        ScriptedClient(tool_script(2)),
        model="m1",
        tools=[lookup],
        observers=stack.observers,
        detectors=[FailingDetector()],
    )
    assert (await loop.run("q")).ok
    assert loop.observers.failures == {("FailingDetector", "on_tool_pre"): 2}
    assert (
        prom_sum(
            stack.prometheus.registry,
            "loopobs_observer_errors_total",
            loopobs_observer_name="FailingDetector",
            loopobs_observer_hook="on_tool_pre",
        )
        == 2
    )
    assert (
        otel_sum(
            collect(stack),
            "loopobs.observer.errors",
            **{"loopobs.observer.name": "FailingDetector"},
        )
        == 2
    )
    stack.close()


def test_count_failures_in_shares_one_count() -> None:
    inner = ObserverSet()
    outer = ObserverSet([inner, FailingDetector()], count_failures_in=inner)
    outer.on_tool_pre(
        ToolPreContext(run_id=uuid.uuid4(), time_ns=1, turn=0, tool="t", tool_call_id="c")
    )
    assert inner.failures == outer.failures == {("FailingDetector", "on_tool_pre"): 1}
    inner.reset()
    assert outer.failure_count == 0


# -- async hooks -----------------------------------------------------------------------------


class AsyncHook(LoopObserver):
    async def on_run_start(self, ctx: RunStartContext) -> None:  # type: ignore[override]
        raise AssertionError("never awaited")


class AsyncSink(EventSink):
    async def on_event(self, ctx: EventContext) -> None:  # type: ignore[override]
        raise AssertionError("never awaited")


@pytest.mark.parametrize("observer_cls", [AsyncHook, AsyncSink])
def test_an_async_hook_is_refused_when_added(observer_cls: type[LoopObserver]) -> None:
    observer = observer_cls()
    with pytest.raises(TypeError, match=r"is an async def: hooks are called synchronously"):
        ObserverSet([observer])
    with pytest.raises(TypeError, match="on_run_start is an async def"):
        AgentLoop(ScriptedClient([]), model="m", observers=[observer])
    loop = AgentLoop(ScriptedClient([]), model="m")
    with pytest.raises(TypeError):
        loop.attach(observer)
    assert observer not in loop.observers


def test_sync_observers_with_async_helpers_are_fine() -> None:
    class Helper(LoopObserver):
        def on_run_start(self, ctx: RunStartContext) -> None: ...

        async def flush_later(self) -> None: ...

    ObserverSet([Helper(), JsonlRecorder(io.StringIO())])
