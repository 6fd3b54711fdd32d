"""The one budget path: a run's spending, priced, added up and checked against its budgets.

:class:`RunSpending` is one run's accounting. Whoever drives a run tells it what
happens, in this order for each model call:

- :meth:`RunSpending.before_call` — the call is about to be made, with the estimated
  usage of the request really sent; a ``stop`` verdict means it must not be made
  (the step where a shared, fleet-wide budget would reserve the call's worst case);
- :meth:`RunSpending.model_call` — the attempt started;
- :meth:`RunSpending.price` (or :meth:`RunSpending.add_call` for a call its emitter
  priced) — the call reported its usage, whether it then completed or was cut off:
  what was reported is what it cost (where a reservation would be committed);
- :meth:`RunSpending.check` — after the response and after each tool call
  (:meth:`RunSpending.tool_call`);
- :meth:`RunSpending.finish` — the run ended (its clocks stop).

``AgentLoop`` drives it from its phases. :class:`BudgetGuard` drives it from the
events of a loop that is not ours (emitted by hand or by an adapter), so both
count, price and check the same way, and a new limit is taught in one place.
Every verdict is a :class:`~loopobs.contract.events.BudgetExceededContext`; a
stop reaches the run's policy (``loopobs.loop.policy``), which ends the run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar
from uuid import UUID

from loopobs.contract.errors import BudgetExceeded
from loopobs.contract.events import (
    BudgetExceededContext,
    BudgetUnpricedContext,
    RunEndContext,
    RunStartContext,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    Usage,
)
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.contract.token_counts import plausible_token_count, plausible_usage
from loopobs.cost.budget import Budget, BudgetTracker, Spend, error_of
from loopobs.cost.pricing import PriceLookup, PricesArg, known_cost, price_lookup, safe_cost

__all__ = ["DEFAULT_MAX_RUNS", "BudgetGuard", "RunSpending", "SpendingAccount"]

logger = logging.getLogger("loopobs.budget")

DEFAULT_MAX_RUNS: Final = 4096
"""Runs (and sessions) a :class:`BudgetGuard` tracks at once; the oldest go first."""

Deliver = Callable[[BudgetExceededContext], None]
DeliverUnpriced = Callable[[BudgetUnpricedContext], None]

_T = TypeVar("_T")

_COUNTS: Final = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_write_input_tokens",
    "reasoning_output_tokens",
)


class SpendingAccount(Protocol):
    """What a run's spending needs of its conversation (``loopobs.Conversation`` is one)."""

    @property
    def spend(self) -> Spend:
        """What the conversation's runs spent together."""
        ...

    @property
    def budget_tracker(self) -> BudgetTracker | None:
        """The tracker of the conversation's own budget, if it has one."""
        ...


@dataclass(slots=True)
class _Account:
    """A session as a :class:`BudgetGuard` knows it: its spend and its budget's tracker."""

    budget_tracker: BudgetTracker | None
    spend: Spend = field(default_factory=Spend)


class RunSpending:
    """The spend of one run and of its session, and the budgets over them.

    ``emit`` receives every verdict as it is decided (an observer set, or a function
    such as its ``on_budget_exceeded``); every check also returns its verdicts. A run made
    with ``branch_of`` is a branch of another (parallel branches of one framework
    run): it adds to that run's spend and is checked against that run's budget.
    Not thread-safe: one run (or the guard's lock) drives it.
    """

    __slots__ = (
        "_branch",
        "_clock",
        "_emit",
        "_last_output_tokens",
        "_on_unpriced",
        "_prices",
        "_run_id",
        "_run_tracker",
        "_session",
        "_started",
        "_trackers",
        "_unpriced_noted",
        "_usd_limited",
        "spend",
    )

    spend: Spend
    """What this run used (shared with the run it is a branch of)."""
    _run_tracker: BudgetTracker | None
    _session: SpendingAccount | None

    def __init__(
        self,
        *,
        run_id: UUID,
        prices: PriceLookup,
        budget: Budget | None,
        session: SpendingAccount | None,
        emit: Deliver | ObserverSet | None = None,
        clock: Callable[[], float] = time.monotonic,
        branch_of: RunSpending | None = None,
        on_unpriced: DeliverUnpriced | None = None,
    ) -> None:
        self._run_id = run_id
        self._prices = prices
        self._emit = emit.on_budget_exceeded if isinstance(emit, ObserverSet) else emit
        if (
            on_unpriced is None
            and isinstance(emit, ObserverSet)
            and emit.listens("on_budget_unpriced")
        ):
            on_unpriced = emit.on_budget_unpriced
        self._on_unpriced = on_unpriced
        self._clock = clock
        self._branch = branch_of is not None
        if branch_of is not None:
            self.spend = branch_of.spend
            self._run_tracker = branch_of._run_tracker
            self._session = branch_of._session
        else:
            self.spend = Spend()
            self._run_tracker = (
                BudgetTracker(budget, "run", spend=self.spend, clock=clock)
                if budget is not None
                else None
            )
            self._session = session
        session_tracker = self._session.budget_tracker if self._session is not None else None
        self._trackers = tuple(t for t in (self._run_tracker, session_tracker) if t is not None)
        self._usd_limited = any(t.budget.usd is not None for t in self._trackers)
        self._last_output_tokens = 0
        self._unpriced_noted = False
        self._started = clock()
        for tracker in self._trackers:
            tracker.start()

    @property
    def budgeted(self) -> bool:
        """Whether a run or session budget applies (else the checks do nothing)."""
        return bool(self._trackers)

    @property
    def stopped(self) -> BudgetExceededContext | None:
        """The stop verdict of the run's or its session's budget, once one was crossed."""
        for tracker in self._trackers:
            if tracker.stopped is not None:
                return tracker.stopped
        return None

    def estimate(self, input_tokens: int) -> Usage:
        """The usage to check before a call of ``input_tokens`` (estimated) input tokens.

        The previous call's output tokens stand in for the output.
        """
        return Usage(input_tokens=input_tokens, output_tokens=self._last_output_tokens)

    def before_call(
        self, model: str, provider: str, estimate: Usage
    ) -> list[BudgetExceededContext]:
        """Check one more call to ``model`` of ``estimate`` usage against the budgets.

        One more model call, the estimate's tokens and (when a budget limits dollars)
        its price for ``model`` are added to what was used; a ``stop`` among the
        verdicts means the call must not be made.
        """
        if not self._trackers:
            return []
        estimate, _ = plausible_usage(estimate)
        cost = safe_cost(self._prices, model, provider, estimate) if self._usd_limited else None
        return self._deliver(
            [v for t in self._trackers for v in t.before_call(self._run_id, estimate, cost)]
        )

    def model_call(self) -> None:
        """Count a model call attempt (run and session)."""
        self.spend.model_calls += 1
        if self._session is not None:
            self._session.spend.model_calls += 1

    def tool_call(self) -> None:
        """Count a tool call attempt (run and session)."""
        self.spend.tool_calls += 1
        if self._session is not None:
            self._session.spend.tool_calls += 1

    def price(
        self,
        model: str,
        provider: str,
        usage: Usage | None,
        response_model: str | None = None,
        *,
        known: bool = True,
    ) -> float | None:
        """Price a call's reported usage and add it to the run's and the session's spend.

        For a call that completed, and for one cut off after it reported its usage.
        ``known=False`` says some reported count was implausible (and dropped): the
        cost is then unknown. Returns the cost; ``None`` (unknown) when the model has
        no price, the usage is implausible, or the provider reported none.
        """
        cost = None
        if usage is not None and known:
            cost = safe_cost(self._prices, model, provider, usage, response_model=response_model)
        self.add_call(usage, cost, model=model, provider=provider)
        return cost

    def add_call(
        self, usage: Usage | None, cost_usd: float | None, *, model: str = "", provider: str = ""
    ) -> None:
        """Add a call's usage and its cost as priced elsewhere (``None``: unknown)."""
        if usage is not None:
            self._last_output_tokens = usage.output_tokens
        self.spend.add_call(usage, cost_usd)
        if self._session is not None:
            self._session.spend.add_call(usage, cost_usd)
        if cost_usd is None and self._usd_limited and not self._unpriced_noted:
            self._unpriced(model, provider)

    def _unpriced(self, model: str, provider: str) -> None:
        """Once per run: a USD limit met a call with no known price (a warning and an event)."""
        self._unpriced_noted = True
        logger.warning(
            "run %s: a call to %s (%s) has no known price; it does not count "
            "toward the USD budget, which cannot apply to it (give the loop prices=...)",
            self._run_id,
            model,
            provider,
        )
        deliver = self._on_unpriced
        if deliver is None:
            return
        now = time.time_ns()
        for tracker in self._trackers:
            usd = tracker.budget.usd
            if usd is not None:
                deliver(
                    BudgetUnpricedContext(
                        run_id=self._run_id,
                        time_ns=now,
                        model=model,
                        provider=provider,
                        scope=tracker.scope,
                        budget=float(usd),
                    )
                )

    def check(self) -> list[BudgetExceededContext]:
        """Check what was used against the budgets (after a response or a tool call)."""
        if not self._trackers:
            return []
        return self._deliver([v for t in self._trackers for v in t.check(self._run_id)])

    def finish(self) -> None:
        """Stop the clocks: the run's wall time, added to the session's."""
        elapsed = self._clock() - self._started
        if not self._branch:
            self.spend.wall_time_s = elapsed
        session_tracked = False
        for tracker in self._trackers:
            tracker.stop()
            session_tracked = session_tracked or tracker.scope == "session"
        if not session_tracked and not self._branch and self._session is not None:
            self._session.spend.wall_time_s += elapsed

    def _deliver(self, verdicts: list[BudgetExceededContext]) -> list[BudgetExceededContext]:
        emit = self._emit
        if emit is not None:
            for verdict in verdicts:
                emit(verdict)
        return verdicts


class BudgetGuard(LoopObserver):
    """Applies budgets to a loop that emits events itself (by hand, or through an adapter).

    Spend is tracked per run (``budget``) and per session across its runs
    (``session_budget``) from ``on_stream_start`` (model calls),
    ``on_stream_success`` (tokens and cost) and ``on_tool_post`` (tool calls), by
    the same :class:`RunSpending` that ``AgentLoop`` runs on. A call's cost is the
    event's ``cost_usd``, or — when the emitter left it out — the guard's own price
    lookup (``prices``, as for ``AgentLoop``); a cost or a token count that is not
    a finite, plausible number is unknown, never counted as a number.

    On a verdict the guard emits ``on_budget_exceeded`` into every set it is
    attached to (while that set is still delivering the event that caused it,
    as detectors do: attach the guard last), and keeps the stop for the caller:
    check :meth:`exceeded` after each step and stop the loop when it returns
    the verdict (its :meth:`error` is the ``BudgetExceeded`` to report). For a
    check before a model call, call :meth:`before_call` with the request's
    estimated usage.
    """

    def __init__(
        self,
        budget: Budget | None = None,
        *,
        session_budget: Budget | None = None,
        prices: PricesArg = None,
        max_runs: int = DEFAULT_MAX_RUNS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if budget is None and session_budget is None:
            raise ValueError("BudgetGuard needs a budget or a session_budget")
        self.budget = budget
        self.session_budget = session_budget
        self._prices: PriceLookup = price_lookup(prices)
        self._max_runs = max_runs
        self._clock = clock
        self._lock = threading.Lock()
        self._targets: tuple[ObserverSet, ...] = ()
        self._runs: OrderedDict[UUID, RunSpending] = OrderedDict()
        self._sessions: OrderedDict[UUID, _Account] = OrderedDict()
        self._branches: OrderedDict[UUID, UUID] = OrderedDict()
        self._stops: OrderedDict[UUID, BudgetExceededContext] = OrderedDict()
        self._unpriced: list[BudgetUnpricedContext] = []
        """``on_budget_unpriced`` events decided under the lock, delivered after it."""

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
        spending = self._runs.get(run_id)
        return None if spending is None else spending.spend

    def session_spend(self, session_id: UUID) -> Spend | None:
        """What the session has used over its runs (when a session budget is set)."""
        account = self._sessions.get(session_id)
        return None if account is None else account.spend

    def branch(self, run_id: UUID, *, of: UUID) -> None:
        """Announce that ``run_id``, about to start, is a branch of the running run ``of``.

        Call it before the branch's ``on_run_start``. The branch then adds to that
        run's spend and is stopped by its budget (a stop of either stops both, each
        at its next check): parallel branches of one graph run share its budget.
        """
        with self._lock:
            _put(self._branches, run_id, of, self._max_runs)

    def before_call(
        self, run_id: UUID, model: str, provider: str, estimate: Usage
    ) -> BudgetExceededContext | None:
        """Check one more model call of ``estimate`` usage; the stop verdict if it may not run.

        Emits the verdicts like the other checks.
        """
        with self._lock:
            spending = self._runs.get(run_id)
            verdicts = (
                spending.before_call(model, provider, estimate) if spending is not None else []
            )
        self._deliver(run_id, verdicts)
        return self._stops.get(run_id)

    # -- events ----------------------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """Start tracking the run (and its session, which carries over from earlier runs)."""
        with self._lock:
            parent_id = self._branches.pop(ctx.run_id, None)
            parent = self._runs.get(parent_id) if parent_id is not None else None
            if parent is not None:
                spending = RunSpending(
                    run_id=ctx.run_id,
                    prices=self._prices,
                    budget=None,
                    session=None,
                    clock=self._clock,
                    branch_of=parent,
                    on_unpriced=self._unpriced.append,
                )
            else:
                spending = RunSpending(
                    run_id=ctx.run_id,
                    prices=self._prices,
                    budget=self.budget,
                    session=self._account(ctx.session_id),
                    clock=self._clock,
                    on_unpriced=self._unpriced.append,
                )
            _put(self._runs, ctx.run_id, spending, self._max_runs)

    def on_stream_start(self, ctx: StreamStartContext) -> None:
        """Count a model call attempt."""
        with self._lock:
            spending = self._runs.get(ctx.run_id)
            if spending is not None:
                spending.model_call()

    def on_stream_success(self, ctx: StreamSuccessContext) -> None:
        """Add the call's tokens and cost, then check the limits."""
        counts = {name: plausible_token_count(getattr(ctx, name)) for name in _COUNTS}
        usage = Usage(
            input_tokens=counts["input_tokens"] or 0,
            output_tokens=counts["output_tokens"] or 0,
            cache_read_input_tokens=counts["cache_read_input_tokens"] or 0,
            cache_write_input_tokens=counts["cache_write_input_tokens"] or 0,
            reasoning_output_tokens=counts["reasoning_output_tokens"] or 0,
        )
        known = None not in counts.values()
        with self._lock:
            spending = self._runs.get(ctx.run_id)
            if spending is None:
                return
            if ctx.cost_usd is not None:
                spending.add_call(
                    usage, known_cost(ctx.cost_usd), model=ctx.model, provider=ctx.provider
                )
            else:
                spending.price(ctx.model, ctx.provider, usage, ctx.response_model, known=known)
            verdicts = spending.check()
            unpriced, self._unpriced[:] = list(self._unpriced), []
            targets = self._targets
        for note in unpriced:
            for target in targets:
                target.on_budget_unpriced(note)
        self._deliver(ctx.run_id, verdicts)

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Count a tool call attempt, then check the limits."""
        with self._lock:
            spending = self._runs.get(ctx.run_id)
            if spending is None:
                return
            spending.tool_call()
            verdicts = spending.check()
        self._deliver(ctx.run_id, verdicts)

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Stop the run's clocks and forget the run (the session's spend stays)."""
        with self._lock:
            spending = self._runs.pop(ctx.run_id, None)
            self._stops.pop(ctx.run_id, None)
            self._branches.pop(ctx.run_id, None)
            if spending is not None:
                spending.finish()

    def reset(self) -> None:
        """Forget every run and session."""
        with self._lock:
            self._runs.clear()
            self._sessions.clear()
            self._branches.clear()
            self._stops.clear()

    # -- plumbing --------------------------------------------------------------------------
    def _account(self, session_id: UUID) -> _Account | None:
        """The session's account when a session budget is set; lock held."""
        if self.session_budget is None:
            return None
        account = self._sessions.get(session_id)
        if account is None:
            account = _Account(None)
            account.budget_tracker = BudgetTracker(
                self.session_budget, "session", spend=account.spend, clock=self._clock
            )
        _put(self._sessions, session_id, account, self._max_runs)
        return account

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
