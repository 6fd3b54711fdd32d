"""Faulty observers never break a run: one raising in every hook, one slow in every hook,
one raising in ``shutdown``. Runs complete with the right results, the other observers'
telemetry is complete, and failures are counted and logged without flooding."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid

import pytest

from loopobs import LoopObserver, ObserverSet, TurnEndContext
from loopobs.contract.events import HOOKS, EventContext
from loopobs.contract.observer import LOG_INTERVAL_S
from loopobs.testing import assert_contract, spans_by_name

if sys.version_info >= (3, 11):  # pragma: no cover - version switch
    from builtins import ExceptionGroup
else:  # pragma: no cover - version switch
    from exceptiongroup import ExceptionGroup

from tests._reliability import (
    ANSWER_USAGE,
    STEP_USAGE,
    Stack,
    collect,
    make_loop,
    make_stack,
    otel_sum,
    prom_sum,
)

TOOL_TURNS = 4
RUNS = 6


class RaisesEverywhere(LoopObserver):
    """Raises ``RuntimeError`` in every hook."""


class SlowEverywhere(LoopObserver):
    """Sleeps (blocking!) in every hook: the worst a careless observer can do."""

    delay_s = 0.001


class BadShutdown(LoopObserver):
    """Works, but raises ``RuntimeError`` in ``shutdown`` and ``force_flush``."""

    def __init__(self) -> None:
        self.seen = 0

    def on_turn_end(self, ctx: EventContext) -> None:
        self.seen += 1

    def shutdown(self, timeout_s: float | None = None) -> None:
        raise RuntimeError("shutdown failed")

    def force_flush(self, timeout_s: float | None = None) -> None:
        raise RuntimeError("flush failed")


def _raise(self: LoopObserver, ctx: EventContext) -> None:
    raise RuntimeError(f"boom in {ctx.hook}")


def _sleep(self: SlowEverywhere, ctx: EventContext) -> None:
    time.sleep(self.delay_s)


for _hook in HOOKS:
    setattr(RaisesEverywhere, _hook, _raise)
    setattr(SlowEverywhere, _hook, _sleep)


def _assert_complete(stack: Stack, runs: int, tool_turns: int) -> None:
    """Every good observer saw every run whole: spans, metric sums, Prometheus, JSONL."""
    assert_contract(stack.recorder.events)
    spans = spans_by_name(stack.span_exporter)
    turns = tool_turns + 1
    assert len(spans["invoke_agent agent"]) == runs
    assert len(spans["turn"]) == runs * turns
    assert len(spans["chat m1"]) == runs * turns
    assert len(spans["execute_tool lookup"]) == runs * tool_turns
    assert stack.tracing.open_spans() == 0
    points = collect(stack)
    assert otel_sum(points, "loopobs.runs") == runs
    assert otel_sum(points, "loopobs.turns") == runs * turns
    assert otel_sum(points, "loopobs.tool.calls") == runs * tool_turns
    input_tokens = runs * (tool_turns * STEP_USAGE.input_tokens + ANSWER_USAGE.input_tokens)
    assert (
        otel_sum(points, "gen_ai.client.token.usage", **{"gen_ai.token.type": "input"})
        == input_tokens
    )
    reg = stack.prometheus.registry
    assert prom_sum(reg, "loopobs_runs_total") == runs
    assert prom_sum(reg, "loopobs_turns_total") == runs * turns
    assert prom_sum(reg, "loopobs_tool_calls_total") == runs * tool_turns
    assert prom_sum(reg, "loopobs_runs_active") == 0
    assert len(stack.jsonl_lines()) == len(stack.recorder.events)


async def test_observer_raising_in_every_hook_breaks_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Runs complete; others' telemetry is whole; every failure counted, one log per hook."""
    bad = RaisesEverywhere()
    stack = make_stack([bad])
    loop = make_loop(stack, TOOL_TURNS)
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        results = [await loop.run(f"question {i}") for i in range(RUNS)]
    assert all(r.ok for r in results)
    assert all(r.turns == TOOL_TURNS + 1 for r in results)
    assert [r.answer for r in results] == [r.messages[-1].content for r in results]
    _assert_complete(stack, RUNS, TOOL_TURNS)

    failures = loop.observers.failures
    heard = {h for h, _ in stack.recorder.events}
    assert {hook for (name, hook) in failures if name == "RaisesEverywhere"} == heard
    # Exactly one failure per event delivered: the same count the recorder saw.
    assert loop.observers.failure_count == len(stack.recorder.events)
    # Not flooded: at most one record per (observer, hook) within LOG_INTERVAL_S.
    records = [r for r in caplog.records if r.name == "loopobs.observer"]
    assert LOG_INTERVAL_S >= 60
    assert len(records) == len(heard)
    assert all("RaisesEverywhere" in r.getMessage() for r in records)
    # The failures reach both metric paths.
    assert prom_sum(stack.prometheus.registry, "loopobs_observer_errors_total") == len(
        stack.recorder.events
    )
    assert otel_sum(collect(stack), "loopobs.observer.errors") == len(stack.recorder.events)
    stack.close()


async def test_slow_observer_slows_but_never_breaks_concurrent_runs() -> None:
    """A blocking observer delays runs but every run completes with complete telemetry."""
    stack = make_stack([SlowEverywhere()])
    loop = make_loop(stack, TOOL_TURNS)
    results = await asyncio.gather(*(loop.run(f"q{i}") for i in range(RUNS)))
    assert all(r.ok and r.turns == TOOL_TURNS + 1 for r in results)
    assert loop.observers.failure_count == 0
    _assert_complete(stack, RUNS, TOOL_TURNS)
    stack.close()


async def test_observer_raising_in_shutdown_does_not_stop_the_others() -> None:
    """shutdown/force_flush of a set reach every member; the failure comes out as one group."""
    bad = BadShutdown()
    stack = make_stack([bad])
    loop = make_loop(stack, TOOL_TURNS)
    result = await loop.run("q")
    assert result.ok
    assert bad.seen == TOOL_TURNS + 1
    with pytest.raises(ExceptionGroup) as flush_err:
        loop.observers.force_flush(1.0)
    assert [str(e) for e in flush_err.value.exceptions] == ["flush failed"]
    with pytest.raises(ExceptionGroup) as shut_err:
        loop.observers.shutdown(1.0)
    assert [str(e) for e in shut_err.value.exceptions] == ["shutdown failed"]
    assert all(isinstance(e, RuntimeError) for e in shut_err.value.exceptions)
    # Members after the bad one were still shut down: the recorder drops later events.
    assert stack.jsonl._closed
    _assert_complete(stack, 1, TOOL_TURNS)
    stack.tracer_provider.shutdown()
    stack.meter_provider.shutdown()


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    # Exporter threads other tests left retrying may log too; count loopobs's records.
    return [r for r in caplog.records if r.name == "loopobs.observer"]


def test_failure_log_is_rate_limited_and_reports_suppressed(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """10,000 failures in one hook log once; after the interval, one record says how many."""
    clock = [1000.0]
    monkeypatch.setattr("loopobs.contract.observer.time.monotonic", lambda: clock[0])
    bad = RaisesEverywhere()
    observers = ObserverSet([bad])
    event = TurnEndContext(run_id=uuid.uuid4(), time_ns=0, turn=0, success=True)
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        for _ in range(10_000):
            observers.on_turn_end(event)
        assert len(_ours(caplog)) == 1
        clock[0] += LOG_INTERVAL_S + 1
        observers.on_turn_end(event)
    assert len(_ours(caplog)) == 2
    assert "9999 similar failures not logged" in _ours(caplog)[1].getMessage()
    assert observers.failures == {("RaisesEverywhere", "on_turn_end"): 10_001}
