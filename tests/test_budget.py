"""Budgets: limits, verdicts before and after spending, and BudgetGuard for hand-emitted loops."""

from __future__ import annotations

import uuid

import pytest

from loopobs import (
    Budget,
    BudgetExceeded,
    BudgetExceededContext,
    BudgetGuard,
    BudgetTracker,
    LoopError,
    ObserverSet,
    RunEndContext,
    RunStartContext,
    Spend,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    Usage,
)
from loopobs.testing import RecordingObserver
from tests._ast import compile_source

RUN = uuid.UUID(int=1)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_budget_refuses_negative_limits_and_a_bad_warning_share() -> None:
    """Limits are non-negative; warn_at is a share strictly between 0 and 1."""
    with pytest.raises(ValueError, match="usd"):
        Budget(usd=-1)
    with pytest.raises(ValueError, match="warn_at"):
        Budget(usd=1, warn_at=1.0)
    assert list(Budget(usd=0.5, tool_calls=3).limits()) == [("usd", 0.5), ("tool_calls", 3.0)]


def test_spend_cost_is_unknown_once_a_call_is_unpriced() -> None:
    """Dollars add up over priced calls; one unpriced call makes the total unknown."""
    spend = Spend()
    costs = [spend.cost_usd]
    spend.add_call(Usage(input_tokens=10, output_tokens=2), 0.25)
    spend.add_call(Usage(input_tokens=5, output_tokens=1), 0.5)
    costs.append(spend.cost_usd)
    assert spend.total_tokens == 18
    spend.add_call(Usage(input_tokens=5), None)
    costs.append(spend.cost_usd)
    assert costs == [0.0, 0.75, None]
    assert spend.usd == 0.75
    assert spend.unpriced_calls == 1


def test_a_call_that_would_cross_the_limit_is_refused_before_it_is_made() -> None:
    """before_call adds the call's estimate: the projected value over the limit is a stop."""
    tracker = BudgetTracker(Budget(usd=0.01))
    tracker.spend.add_call(Usage(input_tokens=100), 0.008)
    assert tracker.before_call(RUN, Usage(input_tokens=100), 0.001) == []
    (stop,) = tracker.before_call(RUN, Usage(input_tokens=100), 0.003)
    assert (stop.limit, stop.action, stop.scope, stop.budget) == ("usd", "stop", "run", 0.01)
    assert stop.value == pytest.approx(0.011)
    assert tracker.stopped is stop
    assert tracker.before_call(RUN, Usage(), 0.0) == []  # a limit stops once per run


def test_counts_stop_past_their_limit_not_at_it() -> None:
    """model_calls=2 allows two calls; the third is refused. Tool calls check what happened."""
    tracker = BudgetTracker(Budget(model_calls=2, tool_calls=1))
    for _ in range(2):
        assert tracker.before_call(RUN, Usage(), None) == []
        tracker.spend.model_calls += 1
    tracker.spend.tool_calls = 1
    assert tracker.check(RUN) == []
    (stop,) = tracker.before_call(RUN, Usage(), None)
    assert (stop.limit, stop.value, stop.budget) == ("model_calls", 3.0, 2.0)


def test_the_warning_share_warns_once_per_limit_without_stopping() -> None:
    """warn_at=0.8: one warn verdict per limit when 80 % is used; the stop comes later."""
    tracker = BudgetTracker(Budget(total_tokens=1000, tool_calls=10, warn_at=0.8))
    tracker.spend.input_tokens = 850
    (warn,) = tracker.check(RUN)
    assert (warn.limit, warn.action, warn.value) == ("total_tokens", "warn", 850.0)
    tracker.spend.input_tokens = 900
    assert tracker.check(RUN) == []
    tracker.spend.output_tokens = 200
    (stop,) = tracker.check(RUN)
    assert (stop.limit, stop.action, stop.value) == ("total_tokens", "stop", 1100.0)


def test_wall_time_adds_up_over_a_sessions_runs() -> None:
    """A session's wall time is the sum of its runs' running time, not the time between them."""
    clock = Clock()
    tracker = BudgetTracker(Budget(wall_time_s=10), "session", clock=clock)
    tracker.start()
    clock.now += 6
    tracker.stop()
    clock.now += 1000  # idle between runs
    tracker.start()
    clock.now += 3
    assert tracker.check(RUN) == []
    clock.now += 2
    (stop,) = tracker.check(RUN)
    assert (stop.limit, stop.scope, stop.value) == ("wall_time_s", "session", 11.0)


def test_a_stopped_session_stops_each_later_run_once() -> None:
    """Every new run of an exhausted session gets its own stop verdict, at its first check."""
    tracker = BudgetTracker(Budget(usd=1.0), "session")
    tracker.spend.add_call(None, 1.5)
    first = tracker.check(RUN)
    later_run = uuid.UUID(int=2)
    (again,) = tracker.before_call(later_run, Usage(), 0.0)
    assert first[0].run_id == RUN
    assert again.run_id == later_run
    assert (again.limit, again.value) == ("usd", 1.5)
    assert tracker.check(later_run) == []


def test_budget_exceeded_names_the_limit_the_value_and_the_budget() -> None:
    """The error is a LoopError with structured fields that survive its dict encoding."""
    error = BudgetExceeded(limit="usd", value=0.0123, budget=0.01, scope="session")
    assert str(error) == "session budget exceeded: usd 0.0123 > 0.01"
    assert isinstance(error, LoopError)
    assert LoopError.from_dict(error.to_dict()) == error


# -- BudgetGuard on a hand-emitted loop ------------------------------------------------------


class HandLoop:
    """A loop that is not ours: emits events and asks the guard after each step."""

    def __init__(self, guard: BudgetGuard, session_id: uuid.UUID | None = None) -> None:
        self.recorder = RecordingObserver()
        self.observers = ObserverSet([self.recorder, guard])
        self.guard = guard
        self.run_id = uuid.uuid4()
        self.session_id = session_id or uuid.uuid4()
        self.t = 0
        self.observers.on_run_start(
            RunStartContext(
                run_id=self.run_id, time_ns=self.tick(), session_id=self.session_id, model="gpt-4o"
            )
        )

    def tick(self) -> int:
        self.t += 1
        return self.t

    def call(self, input_tokens: int, output_tokens: int, cost: float | None = None) -> None:
        self.observers.on_stream_start(
            StreamStartContext(
                run_id=self.run_id, time_ns=self.tick(), turn=0, model="gpt-4o", provider="openai"
            )
        )
        self.observers.on_stream_success(
            StreamSuccessContext(
                run_id=self.run_id,
                time_ns=self.tick(),
                turn=0,
                model="gpt-4o",
                provider="openai",
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost,
            )
        )

    def tool(self) -> None:
        self.observers.on_tool_post(
            ToolPostContext(
                run_id=self.run_id, time_ns=self.tick(), tool_call_id="c", turn=0, tool="t"
            )
        )

    def end(self) -> None:
        self.observers.on_run_end(
            RunEndContext(run_id=self.run_id, time_ns=self.tick(), success=True)
        )


def test_guard_stops_a_hand_emitted_loop_and_the_caller_reads_the_verdict() -> None:
    """The guard counts from the events, emits on_budget_exceeded, and keeps the stop."""
    guard = BudgetGuard(Budget(usd=0.05, warn_at=0.5))
    loop = HandLoop(guard)
    steps = 0
    while guard.exceeded(loop.run_id) is None:
        loop.call(1000, 100, cost=0.02)
        steps += 1
    assert steps == 3
    stop = guard.exceeded(loop.run_id)
    assert stop is not None
    assert stop.value == pytest.approx(0.06)
    error = guard.error(loop.run_id)
    assert isinstance(error, BudgetExceeded)
    assert error.limit == "usd"
    events = loop.recorder.of("on_budget_exceeded")
    assert [(e.action, e.limit) for e in events] == [("warn", "usd"), ("stop", "usd")]
    spend = guard.spend(loop.run_id)
    assert spend is not None
    assert spend.model_calls == 3
    assert spend.total_tokens == 3300
    loop.end()
    assert guard.exceeded(loop.run_id) is None
    assert guard.spend(loop.run_id) is None


def test_guard_prices_calls_the_emitter_left_unpriced() -> None:
    """An event without cost_usd is priced by the guard's own lookup."""
    guard = BudgetGuard(Budget(usd=1.0), prices={"gpt-4o": 0.4})
    loop = HandLoop(guard)
    loop.call(10, 1)
    loop.call(10, 1)
    assert guard.exceeded(loop.run_id) is None
    loop.call(10, 1)
    stop = guard.exceeded(loop.run_id)
    assert stop is not None
    assert stop.value == pytest.approx(1.2)


def test_guard_checks_before_a_call_and_after_each_tool_call() -> None:
    """before_call refuses a call over the limit; tool calls count after each one."""
    guard = BudgetGuard(Budget(input_tokens=5_000, tool_calls=2))
    loop = HandLoop(guard)
    loop.call(3_000, 10, cost=0.0)
    assert guard.before_call(loop.run_id, "gpt-4o", "openai", Usage(input_tokens=1_000)) is None
    stop = guard.before_call(loop.run_id, "gpt-4o", "openai", Usage(input_tokens=2_500))
    assert stop is not None
    assert (stop.limit, stop.value) == ("input_tokens", 5_500.0)

    other = HandLoop(guard)
    other.tool()
    other.tool()
    assert guard.exceeded(other.run_id) is None
    other.tool()
    stop = guard.exceeded(other.run_id)
    assert stop is not None
    assert stop.limit == "tool_calls"


def test_guard_session_budget_spans_runs() -> None:
    """session_budget adds up over the runs of one session; other sessions are untouched."""
    guard = BudgetGuard(session_budget=Budget(model_calls=3))
    session = uuid.uuid4()
    first = HandLoop(guard, session)
    first.call(1, 1, cost=0.0)
    first.call(1, 1, cost=0.0)
    first.end()
    second = HandLoop(guard, session)
    second.call(1, 1, cost=0.0)
    assert guard.exceeded(second.run_id) is None
    second.call(1, 1, cost=0.0)
    stop = guard.exceeded(second.run_id)
    assert stop is not None
    assert stop.scope == "session"
    assert stop.value == 4.0
    spend = guard.session_spend(session)
    assert spend is not None
    assert spend.model_calls == 4
    fresh = HandLoop(guard)
    fresh.call(1, 1, cost=0.0)
    assert guard.exceeded(fresh.run_id) is None


def test_guard_needs_a_budget_and_its_failures_never_reach_the_loop() -> None:
    """A guard without any budget is refused; the set isolates observers after the guard."""
    with pytest.raises(ValueError, match="budget"):
        BudgetGuard()

    class Boom(RecordingObserver):
        def on_budget_exceeded(self, ctx: BudgetExceededContext) -> None:
            raise RuntimeError("observer bug")

    guard = BudgetGuard(Budget(usd=0.0))
    loop = HandLoop(guard)
    loop.observers.add(Boom())
    loop.call(1, 1, cost=0.01)
    assert guard.exceeded(loop.run_id) is not None
    assert loop.observers.failure_count == 1


def test_the_emit_by_hand_budget_example_stops_before_the_crossing_call() -> None:
    """docs/budgets.md's BudgetGuard example runs as written and stops before the call."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "budgets.md").read_text("utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "BudgetGuard(" in b]
    namespace: dict[str, object] = {}
    exec(compile_source(block, "budgets.md"), namespace)
    error = namespace["error"]
    assert isinstance(error, BudgetExceeded)
    assert (error.limit, error.budget) == ("usd", 0.05)
    assert namespace["turn"] == 3  # three calls made; the fourth would have crossed
    spend = namespace["guard"].spend(namespace["run_id"])  # type: ignore[attr-defined]
    assert spend.usd <= 0.05
    assert spend.model_calls == 3
