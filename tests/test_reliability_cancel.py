"""Cancellation storm: 300 concurrent runs, each cancelled at a random point — inside a
model stream, inside a tool, inside a wave of parallel tool calls, or between steps.
Afterwards no span is open, every ``on_run_start`` has its ``on_run_end``, and
``loopobs_runs_active`` (Prometheus and OTel) is back to 0."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from uuid import UUID

import pytest

from loopobs import (
    AgentLoop,
    Cancelled,
    Conversation,
    LoopObserver,
    RunEndContext,
    RunStartContext,
    tool,
)
from loopobs.contract.events import EventContext
from loopobs.contract.model import ModelRequest, StreamEvent
from loopobs.llm import ScriptedClient
from loopobs.testing import assert_contract, spans_by_name
from tests._reliability import Stack, collect, make_stack, otel_sum, prom_sum, tool_script

RUNS = 300
TOOL_TURNS = 3
PARALLEL = 3
SEEDS = (1, 2, 20_261_129)


class YieldingClient:
    """Plays the tool script, yielding to the event loop between stream chunks."""

    provider = "scripted"

    def __init__(self) -> None:
        self.inner = ScriptedClient(
            tool_script(TOOL_TURNS, parallel=PARALLEL, fill=4), chunk_size=4
        )

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self._play(request)

    async def _play(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        async for event in self.inner.stream(request):
            await asyncio.sleep(0)
            yield event


@tool(name="lookup")
async def napping_lookup(step: int, total: int, n: int) -> str:
    """Sleeps a little (so cancellation can land inside it), then reports the step."""
    await asyncio.sleep(0.001 * (n % 4))
    return f"step {step} of {total}"


class CancelAt(LoopObserver):
    """Cancels a run's task when the run reaches its randomly chosen event number.

    Half of the runs are instead cancelled from outside after a random wall-clock
    delay (see the test); for those the target is never reached.
    """

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.tasks: dict[UUID, asyncio.Task[object]] = {}
        self.targets: dict[UUID, int] = {}
        self.seen: Counter[UUID] = Counter()
        self.fired_at: dict[UUID, str] = {}

    def on_run_start(self, ctx: RunStartContext) -> None:
        """Remember the run's task and draw its cancellation point."""
        task = asyncio.current_task()
        assert task is not None
        self.tasks[ctx.run_id] = task
        self.targets[ctx.run_id] = self.rng.randint(1, 60)

    def _count(self, ctx: EventContext) -> None:
        run = ctx.run_id
        self.seen[run] += 1
        if self.seen[run] == self.targets.get(run) and run not in self.fired_at:
            self.fired_at[run] = ctx.hook
            self.tasks[run].cancel()

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Forget the run."""
        self.tasks.pop(ctx.run_id, None)

    on_turn_start = on_turn_end = on_stream_start = on_stream_success = _count
    on_text_delta = on_response = on_tool_call_received = on_tool_pre = on_tool_post = _count


def _assert_nothing_left(stack: Stack, loop: AgentLoop) -> None:
    rec = stack.recorder
    assert_contract(rec.events)
    hooks = Counter(h for h, _ in rec.events)
    assert hooks["on_run_start"] == hooks["on_run_end"] == RUNS
    assert stack.tracing.open_spans() == 0
    assert stack.tracing.open_runs == 0
    spans = spans_by_name(stack.span_exporter)
    assert len(spans["invoke_agent agent"]) == RUNS
    assert len(spans.get("turn", [])) == hooks["on_turn_start"]
    assert len(spans.get("chat m1", [])) == hooks["on_stream_start"]
    assert len(spans.get("execute_tool lookup", [])) == hooks["on_tool_pre"]
    assert prom_sum(stack.prometheus.registry, "loopobs_runs_active") == 0
    assert stack.prometheus.open_runs == 0
    points = collect(stack)
    assert otel_sum(points, "loopobs.runs.active") == 0
    assert otel_sum(points, "loopobs.runs") == RUNS
    assert stack.metrics.open_runs == 0
    assert loop._policy.open_runs == 0
    assert loop.observers.failure_count == 0


@pytest.mark.parametrize("seed", SEEDS)
async def test_cancellation_storm_leaves_nothing_open(seed: int) -> None:
    """Random cancels in streams, tools and parallel waves: contract holds, nothing open."""
    rng = random.Random(seed)
    canceller = CancelAt(rng)
    stack = make_stack([canceller])
    loop = AgentLoop(
        YieldingClient(),
        model="m1",
        tools=[napping_lookup],
        observers=stack.observers,
        max_turns=TOOL_TURNS + 5,
    )
    tasks = [asyncio.create_task(loop.run(f"question {i}")) for i in range(RUNS)]
    # Half the runs: also cancelled from outside at a random moment.
    for task in tasks[::2]:
        asyncio.get_running_loop().call_later(rng.uniform(0, 0.05), task.cancel)
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)

    cancelled = [o for o in outcomes if isinstance(o, asyncio.CancelledError)]
    completed = [o for o in outcomes if not isinstance(o, BaseException) and o.ok]
    assert len(cancelled) + len(completed) == RUNS
    assert len(cancelled) > RUNS // 2
    _assert_nothing_left(stack, loop)

    rec = stack.recorder
    ends = rec.of("on_run_end")
    assert sum(e.status == "cancelled" for e in ends) == len(cancelled)
    assert all(isinstance(e.error, Cancelled) for e in ends if e.status == "cancelled")
    # The storm hit every kind of place.
    stream_cancels = [c for c in rec.of("on_stream_failure") if isinstance(c.error, Cancelled)]
    tool_cancels = [c for c in rec.of("on_tool_post") if isinstance(c.error, Cancelled)]
    assert stream_cancels, "no run was cancelled inside a model stream"
    assert tool_cancels, "no run was cancelled inside a tool"
    waves = Counter((c.run_id, c.turn) for c in tool_cancels)
    assert any(n >= 2 for n in waves.values()), "no parallel tool wave was cancelled"
    assert {"on_text_delta", "on_tool_pre"} <= set(canceller.fired_at.values())
    stack.close()


async def test_cancelled_session_runs_again_cleanly() -> None:
    """A run cancelled mid-wave leaves its session reusable; the next run completes."""
    in_tool = asyncio.Event()

    class InTool(LoopObserver):
        def on_tool_pre(self, ctx: EventContext) -> None:
            in_tool.set()

    stack = make_stack([InTool()])
    loop = AgentLoop(
        YieldingClient(),
        model="m1",
        tools=[napping_lookup],
        observers=stack.observers,
        max_turns=TOOL_TURNS + 5,
    )
    session = Conversation()
    task = asyncio.create_task(loop.run("first", session=session))
    await asyncio.wait_for(in_tool.wait(), 10)
    task.cancel()
    outcome = await asyncio.gather(task, return_exceptions=True)
    assert isinstance(outcome[0], asyncio.CancelledError)
    assert not session.busy
    result = await loop.run("second", session=session)
    assert result.ok
    assert_contract(stack.recorder.events)
    assert stack.tracing.open_spans() == 0
    assert prom_sum(stack.prometheus.registry, "loopobs_runs_active") == 0
    stack.close()
