"""Budgets: limits on what a run or a session may spend, checked as it spends.

A :class:`Budget` sets any of: USD, input / output / total tokens, tool calls,
model calls, wall time. A :class:`BudgetTracker` holds one scope's
:class:`Spend` (a run, or a session across its runs) and gives the verdicts:

- :meth:`BudgetTracker.before_call` — before a model call, with the request's
  estimated usage and cost: a call that would cross a limit is not made;
- :meth:`BudgetTracker.check` — after a response or a tool call, on what was
  actually used.

A verdict is a :class:`~loopobs.contract.events.BudgetExceededContext` to emit:
``action="stop"`` once when a limit is crossed (value over the limit), and
``action="warn"`` once when the budget's ``warn_at`` share of a limit is reached.

``AgentLoop(budget=...)`` and ``Session(budget=...)`` apply budgets to our loop.
:class:`BudgetGuard` applies one to any loop that emits events — by hand or
through an adapter: it tracks spend from the events, emits
``on_budget_exceeded`` into the sets it is attached to, and keeps the verdict
for the caller to read (:meth:`BudgetGuard.exceeded`) and act on.

USD counts priced model calls only: a call whose model has no known price adds
no dollars (the run's cost is then unknown, and the call is counted in
:attr:`Spend.unpriced_calls`).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Final, Literal, TypeVar
from uuid import UUID

from loopobs.contract.errors import BudgetExceeded
from loopobs.contract.events import (
    BudgetExceededContext,
    BudgetLimit,
    RunEndContext,
    RunStartContext,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    Usage,
)
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PriceLookup, PricesArg, price_lookup, safe_cost

__all__ = ["Budget", "BudgetGuard", "BudgetTracker", "Spend"]

Scope = Literal["run", "session"]

_LIMITS: Final[tuple[BudgetLimit, ...]] = (
    "usd", "input_tokens", "output_tokens", "total_tokens", "tool_calls", "model_calls",
    "wall_time_s",
)

_T = TypeVar("_T")

DEFAULT_MAX_RUNS: Final = 4096
"""Runs (and sessions) a :class:`BudgetGuard` tracks at once; the oldest go first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Limits for one run or one session; ``None`` means no limit.

    ``warn_at`` (a share in (0, 1), e.g. ``0.8``) emits one warning per limit
    when that share of it is used, without stopping.

    Raises:
        ValueError: a limit is negative, or ``warn_at`` is outside (0, 1).
    """

    usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int | None = None
    model_calls: int | None = None
    wall_time_s: float | None = None
    warn_at: float | None = None

    def __post_init__(self) -> None:
        for name, limit in self.limits():
            if limit < 0:
                raise ValueError(f"Budget: {name} must not be negative")
        if self.warn_at is not None and not 0 < self.warn_at < 1:
            raise ValueError("Budget: warn_at must be a share between 0 and 1")

    def limits(self) -> Iterator[tuple[BudgetLimit, float]]:
        """The limits that are set, as (name, setting)."""
        for name in _LIMITS:
            limit = getattr(self, name)
            if limit is not None:
                yield name, float(limit)


@dataclass(slots=True)
class Spend:
    """What a run or a session has used so far."""

    usd: float = 0.0
    """USD of the priced model calls."""
    unpriced_calls: int = 0
    """Model calls whose price is unknown (their dollars are not in :attr:`usd`)."""
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    """Model call attempts started."""
    tool_calls: int = 0
    """Tool call attempts ended."""
    wall_time_s: float = 0.0
    """Time spent running (for a session, summed over its runs)."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_usd(self) -> float | None:
        """The USD total, or ``None`` when some model call's price is unknown."""
        return None if self.unpriced_calls else self.usd

    def value(self, limit: BudgetLimit) -> float:
        """The amount used of ``limit``."""
        return float(getattr(self, limit))

    def add_call(self, usage: Usage | None, cost_usd: float | None) -> None:
        """Count a completed model call's tokens and cost (``None``: price unknown)."""
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.usd += cost_usd


@dataclass(slots=True)
class BudgetTracker:
    """One scope's budget and spend, and the verdicts on them.

    A limit is crossed when its value goes over the setting; each limit stops
    once and warns once — except that every later run of a stopped session gets
    the stop too, at its first check. Not thread-safe: one run (or the guard's lock) drives it.
    """

    budget: Budget
    scope: Scope = "run"
    spend: Spend = field(default_factory=Spend)
    clock: Callable[[], float] = time.monotonic
    _started: float | None = None
    _base_wall_s: float = 0.0
    _warned: set[str] = field(default_factory=set)
    _stopped: BudgetExceededContext | None = None
    _stopped_runs: set[UUID] = field(default_factory=set)

    def start(self) -> None:
        """Start the wall clock (a session's runs add up)."""
        self._started = self.clock()
        self._base_wall_s = self.spend.wall_time_s

    def stop(self) -> None:
        """Stop the wall clock, keeping the time so far in the spend."""
        self._tick()
        self._started = None

    def _tick(self) -> None:
        if self._started is not None:
            self.spend.wall_time_s = self._base_wall_s + (self.clock() - self._started)

    @property
    def stopped(self) -> BudgetExceededContext | None:
        """The stop verdict, once a limit was crossed."""
        return self._stopped

    def before_call(self, run_id: UUID, estimate: Usage,
                    estimated_usd: float | None) -> list[BudgetExceededContext]:
        """Verdicts for making one more model call of ``estimate`` usage and cost.

        The call's tokens and dollars, and one more model call, are added to
        what was used; a stop means the call must not be made.
        """
        spend = self.spend
        extra = {
            "usd": estimated_usd or 0.0,
            "input_tokens": estimate.input_tokens,
            "output_tokens": estimate.output_tokens,
            "total_tokens": estimate.total_tokens,
            "model_calls": 1,
        }
        self._tick()
        return self._verdicts(run_id, lambda name: spend.value(name) + extra.get(name, 0))

    def check(self, run_id: UUID) -> list[BudgetExceededContext]:
        """Verdicts on what was actually used (after a response or a tool call)."""
        self._tick()
        return self._verdicts(run_id, self.spend.value)

    def _verdicts(self, run_id: UUID,
                  value_of: Callable[[BudgetLimit], float]) -> list[BudgetExceededContext]:
        stopped = self._stopped
        if stopped is not None:
            if run_id in self._stopped_runs:
                return []
            self._stopped_runs.add(run_id)
            return [replace(stopped, run_id=run_id, time_ns=time.time_ns())]
        budget = self.budget
        out: list[BudgetExceededContext] = []
        for name, limit in budget.limits():
            value = value_of(name)
            if value > limit:
                self._stopped = BudgetExceededContext(
                    run_id=run_id, time_ns=time.time_ns(), limit=name, value=value,
                    budget=limit, scope=self.scope, action="stop")
                self._stopped_runs.add(run_id)
                return [*out, self._stopped]
            if (budget.warn_at is not None and name not in self._warned
                    and value >= budget.warn_at * limit):
                self._warned.add(name)
                out.append(BudgetExceededContext(
                    run_id=run_id, time_ns=time.time_ns(), limit=name, value=value,
                    budget=limit, scope=self.scope, action="warn"))
        return out


def error_of(verdict: BudgetExceededContext) -> BudgetExceeded:
    """The error a stop verdict ends the run with."""
    return BudgetExceeded(limit=verdict.limit, value=verdict.value, budget=verdict.budget,
                          scope=verdict.scope)


class BudgetGuard(LoopObserver):
    """Applies budgets to a loop that emits events itself (by hand, or through an adapter).

    Spend is tracked per run (``budget``) and per session across its runs
    (``session_budget``) from ``on_stream_start`` (model calls),
    ``on_stream_success`` (tokens and cost) and ``on_tool_post`` (tool calls).
    A call's cost is the event's ``cost_usd``, or — when the emitter left it
    out — the guard's own price lookup (``prices``, as for ``AgentLoop``).

    On a verdict the guard emits ``on_budget_exceeded`` into every set it is
    attached to (while that set is still delivering the event that caused it,
    as detectors do: attach the guard last), and keeps the stop for the caller:
    check :meth:`exceeded` after each step and stop the loop when it returns
    the verdict (its :meth:`error` is the ``BudgetExceeded`` to report). For a
    check before a model call, call :meth:`before_call` with the request's
    estimated usage.
    """

    def __init__(self, budget: Budget | None = None, *, session_budget: Budget | None = None,
                 prices: PricesArg = None, max_runs: int = DEFAULT_MAX_RUNS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if budget is None and session_budget is None:
            raise ValueError("BudgetGuard needs a budget or a session_budget")
        self.budget = budget
        self.session_budget = session_budget
        self._prices: PriceLookup = price_lookup(prices)
        self._max_runs = max_runs
        self._clock = clock
        self._lock = threading.Lock()
        self._targets: tuple[ObserverSet, ...] = ()
        self._runs: OrderedDict[UUID, BudgetTracker] = OrderedDict()
        self._sessions: OrderedDict[UUID, BudgetTracker] = OrderedDict()
        self._run_sessions: dict[UUID, UUID] = {}
        self._stops: OrderedDict[UUID, BudgetExceededContext] = OrderedDict()

    # -- attachment ------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Remember ``observers``: verdicts are emitted into it."""
        with self._lock:
            self._targets = (*self._targets, observers)

    def on_detach(self, observers: ObserverSet) -> None:
        """Stop emitting into ``observers``."""
        with self._lock:
            self._targets = tuple(t for t in self._targets if t is not observers)

    # -- the verdict, for the caller ---------------------------------------------------------
    def exceeded(self, run_id: UUID) -> BudgetExceededContext | None:
        """The stop verdict of ``run_id`` (its run or its session crossed a limit), if any."""
        return self._stops.get(run_id)

    def error(self, run_id: UUID) -> BudgetExceeded | None:
        """The ``BudgetExceeded`` error of ``run_id``'s stop, if any."""
        stop = self._stops.get(run_id)
        return None if stop is None else error_of(stop)

    def spend(self, run_id: UUID) -> Spend | None:
        """What ``run_id`` has used so far (None for a run the guard does not track)."""
        tracker = self._runs.get(run_id)
        return None if tracker is None else tracker.spend

    def session_spend(self, session_id: UUID) -> Spend | None:
        """What the session has used over its runs (when a session budget is set)."""
        tracker = self._sessions.get(session_id)
        return None if tracker is None else tracker.spend

    def before_call(self, run_id: UUID, model: str, provider: str,
                    estimate: Usage) -> BudgetExceededContext | None:
        """Check one more model call of ``estimate`` usage; the stop verdict if it may not run.

        Emits the verdicts like the other checks.
        """
        cost = safe_cost(self._prices, model, provider, estimate)
        with self._lock:
            verdicts = [v for t in self._trackers(run_id)
                        for v in t.before_call(run_id, estimate, cost)]
        self._deliver(run_id, verdicts)
        return self._stops.get(run_id)

    # -- events ----------------------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """Start tracking the run (and its session, which carries over from earlier runs)."""
        with self._lock:
            if self.budget is not None:
                tracker = BudgetTracker(self.budget, "run", clock=self._clock)
                tracker.start()
                _put(self._runs, ctx.run_id, tracker, self._max_runs)
            if self.session_budget is not None:
                self._run_sessions[ctx.run_id] = ctx.session_id
                session = self._sessions.get(ctx.session_id)
                if session is None:
                    session = BudgetTracker(self.session_budget, "session", clock=self._clock)
                _put(self._sessions, ctx.session_id, session, self._max_runs)
                session.start()

    def on_stream_start(self, ctx: StreamStartContext) -> None:
        """Count a model call attempt."""
        with self._lock:
            for tracker in self._trackers(ctx.run_id):
                tracker.spend.model_calls += 1

    def on_stream_success(self, ctx: StreamSuccessContext) -> None:
        """Add the call's tokens and cost, then check the limits."""
        cost = ctx.cost_usd
        usage = Usage(input_tokens=ctx.input_tokens, output_tokens=ctx.output_tokens,
                      cache_read_input_tokens=ctx.cache_read_input_tokens,
                      cache_write_input_tokens=ctx.cache_write_input_tokens,
                      reasoning_output_tokens=ctx.reasoning_output_tokens)
        if cost is None:
            cost = safe_cost(self._prices, ctx.model, ctx.provider, usage,
                             response_model=ctx.response_model)
        with self._lock:
            verdicts = []
            for tracker in self._trackers(ctx.run_id):
                tracker.spend.add_call(usage, cost)
                verdicts += tracker.check(ctx.run_id)
        self._deliver(ctx.run_id, verdicts)

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Count a tool call attempt, then check the limits."""
        with self._lock:
            verdicts = []
            for tracker in self._trackers(ctx.run_id):
                tracker.spend.tool_calls += 1
                verdicts += tracker.check(ctx.run_id)
        self._deliver(ctx.run_id, verdicts)

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Stop the run's clocks and forget the run (the session's spend stays)."""
        with self._lock:
            self._runs.pop(ctx.run_id, None)
            self._stops.pop(ctx.run_id, None)
            session_id = self._run_sessions.pop(ctx.run_id, None)
            session = self._sessions.get(session_id) if session_id is not None else None
            if session is not None:
                session.stop()

    def reset(self) -> None:
        """Forget every run and session."""
        with self._lock:
            self._runs.clear()
            self._sessions.clear()
            self._run_sessions.clear()
            self._stops.clear()

    # -- plumbing --------------------------------------------------------------------------
    def _trackers(self, run_id: UUID) -> list[BudgetTracker]:
        """The run's trackers; lock held."""
        found = []
        run = self._runs.get(run_id)
        if run is not None:
            found.append(run)
        session_id = self._run_sessions.get(run_id)
        if session_id is not None:
            session = self._sessions.get(session_id)
            if session is not None:
                found.append(session)
        return found

    def _deliver(self, run_id: UUID, verdicts: list[BudgetExceededContext]) -> None:
        if not verdicts:
            return
        with self._lock:
            for verdict in verdicts:
                if verdict.action == "stop" and run_id not in self._stops:
                    _put(self._stops, run_id, verdict, self._max_runs)
            targets = self._targets
        for verdict in verdicts:
            for target in targets:
                target.on_budget_exceeded(verdict)


def _put(store: OrderedDict[UUID, _T], key: UUID, value: _T, limit: int) -> None:
    store[key] = value
    store.move_to_end(key)
    while len(store) > limit:
        store.popitem(last=False)
