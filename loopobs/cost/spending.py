"""One run's spending for ``AgentLoop``: prices its model calls, adds up its and its session's
spend, and checks their budgets, emitting every verdict as ``on_budget_exceeded``.

The verdicts reach the loop's policy like detector verdicts do, so one path
applies a stop; the driver calls :meth:`RunSpending.before_call` before each
model call and :meth:`RunSpending.check` after each response and tool call.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol
from uuid import UUID

from loopobs.contract.events import BudgetExceededContext, Usage
from loopobs.contract.observer import ObserverSet
from loopobs.cost.budget import Budget, BudgetTracker, Spend
from loopobs.cost.pricing import PriceLookup, safe_cost

__all__ = ["RunSpending", "SpendingAccount"]

logger = logging.getLogger("loopobs.budget")


class SpendingAccount(Protocol):
    """What a run's spending needs of its conversation (``loopobs.loop.run.Session`` is one)."""

    @property
    def spend(self) -> Spend:
        """What the conversation's runs spent together."""
        ...

    @property
    def budget_tracker(self) -> BudgetTracker | None:
        """The tracker of the conversation's own budget, if it has one."""
        ...


class RunSpending:
    """The spend of one run and of its session, and the budgets over them."""

    __slots__ = ("_emit", "_last_output_tokens", "_prices", "_run_id", "_session_spend",
                 "_started", "_trackers", "_unpriced_noted", "_usd_limited", "spend")

    def __init__(self, *, run_id: UUID, prices: PriceLookup, budget: Budget | None,
                 session: SpendingAccount, emit: ObserverSet) -> None:
        self._run_id = run_id
        self._prices = prices
        self._emit = emit
        self.spend = Spend()
        """What this run used."""
        self._session_spend = session.spend
        trackers = []
        if budget is not None:
            trackers.append(BudgetTracker(budget, "run", spend=self.spend))
        session_tracker = session.budget_tracker
        if session_tracker is not None:
            trackers.append(session_tracker)
        self._trackers = tuple(trackers)
        self._usd_limited = any(t.budget.usd is not None for t in trackers)
        self._last_output_tokens = 0
        self._unpriced_noted = False
        self._started = time.monotonic()
        for tracker in self._trackers:
            tracker.start()

    @property
    def budgeted(self) -> bool:
        """Whether a run or session budget applies (else the checks do nothing)."""
        return bool(self._trackers)

    def model_call(self) -> None:
        """Count a model call attempt (run and session)."""
        self.spend.model_calls += 1
        self._session_spend.model_calls += 1

    def tool_call(self) -> None:
        """Count a tool call attempt (run and session)."""
        self.spend.tool_calls += 1
        self._session_spend.tool_calls += 1

    def price(self, model: str, provider: str, usage: Usage | None,
              response_model: str | None = None) -> float | None:
        """Price a completed call and add it to the run's and the session's spend.

        ``None`` (the cost is unknown) when the model has no price or the provider
        reported no usage.
        """
        cost = None
        if usage is not None:
            cost = safe_cost(self._prices, model, provider, usage, response_model=response_model)
            self._last_output_tokens = usage.output_tokens
        self.spend.add_call(usage, cost)
        self._session_spend.add_call(usage, cost)
        if cost is None and self._usd_limited and not self._unpriced_noted:
            self._unpriced_noted = True
            logger.warning("run %s: a call to %s (%s) has no known price; it does not count "
                           "toward the USD budget (give the loop prices=...)", self._run_id,
                           model, provider)
        return cost

    def before_call(self, model: str, provider: str, input_tokens: int) -> None:
        """Check one more call of ``input_tokens`` (estimated) against the budgets.

        The previous call's output tokens stand in for the output; the estimate is
        priced for ``model`` when a budget limits dollars.
        """
        if not self._trackers:
            return
        estimate = Usage(input_tokens=input_tokens, output_tokens=self._last_output_tokens)
        cost = safe_cost(self._prices, model, provider, estimate) if self._usd_limited else None
        self._deliver([v for t in self._trackers
                       for v in t.before_call(self._run_id, estimate, cost)])

    def check(self) -> None:
        """Check what was used against the budgets (after a response or a tool call)."""
        if self._trackers:
            self._deliver([v for t in self._trackers for v in t.check(self._run_id)])

    def finish(self) -> None:
        """Stop the clocks: the run's wall time, added to the session's."""
        elapsed = time.monotonic() - self._started
        self.spend.wall_time_s = elapsed
        session_tracked = False
        for tracker in self._trackers:
            tracker.stop()
            session_tracked = session_tracked or tracker.scope == "session"
        if not session_tracked:
            self._session_spend.wall_time_s += elapsed

    def _deliver(self, verdicts: list[BudgetExceededContext]) -> None:
        emit = self._emit
        for verdict in verdicts:
            emit.on_budget_exceeded(verdict)
