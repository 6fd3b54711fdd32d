"""A run's side of a shared budget: reserve before each call, settle after it.

:class:`SharedSpend` is built per run when ``AgentLoop(shared_budget=...)`` is set
(nothing at all is done without one). For each model call attempt the model call
:meth:`reserves <SharedSpend.reserve_model_call>` the worst case — the estimated input
tokens of the request really sent plus the request's ``max_tokens`` (else the budget's
``assumed_output_tokens``), priced for the model — in the session's scope and one per
entry of the conversation's ``attribution``, and the attempt is not made when it does not fit
(:class:`~loopobs.contract.errors.BudgetExceeded`) or the ledger cannot answer under
``fail_closed`` (:class:`~loopobs.contract.errors.BudgetUnavailable`). When the attempt
ends the reservation is :meth:`settled <SharedSpend.settle>`: the attempt counts as a
model call (as it does in a run's own budget) with what the provider reported (also
for a call cut off after reporting); the rest of its worst case is released. Tool calls
reserve one ``tool_calls`` each when a scope limits them.

Each ledger step is an ``on_shared_budget`` event (its outcome, the store's latency,
what was reserved and committed, reservations found expired) when an observer listens,
and a USD limit that meets a model with no price is one ``on_budget_unpriced`` event per
run (``scope="shared"``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping

from loopobs.contract.errors import BudgetExceeded, BudgetUnavailable
from loopobs.contract.events import (
    BudgetUnpricedContext,
    SharedBudgetContext,
    SharedBudgetOperation,
    SharedBudgetOutcome,
    Usage,
)
from loopobs.contract.observer import ObserverSet
from loopobs.cost.pricing import PriceLookup, safe_cost
from loopobs.cost.shared import Amounts, Reservation, ScopeLimit, SharedBudget

__all__ = ["OUTPUT_TOKEN_OPTIONS", "SharedSpend"]

OUTPUT_TOKEN_OPTIONS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""Request options that cap a call's output tokens, in the order they are read."""

_log = logging.getLogger("loopobs.budget")


class SharedSpend:
    """One run's reservations against a :class:`~loopobs.cost.shared.SharedBudget`."""

    __slots__ = (
        "_budget",
        "_observers",
        "_prices",
        "_run_id",
        "_scopes",
        "_tools_limited",
        "_unpriced_noted",
    )

    def __init__(
        self,
        budget: SharedBudget,
        *,
        session_id: object,
        attribution: Mapping[str, str],
        prices: PriceLookup,
        observers: ObserverSet | None = None,
        run_id: uuid.UUID | None = None,
    ) -> None:
        self._budget = budget
        self._prices = prices
        self._observers = observers
        self._run_id = run_id if run_id is not None else uuid.uuid4()
        self._scopes: list[ScopeLimit] = budget.scopes_for(session_id, attribution)
        self._tools_limited = any(
            s.budget is not None and s.budget.tool_calls is not None for s in self._scopes
        )
        self._unpriced_noted = False

    @property
    def scopes(self) -> list[ScopeLimit]:
        """The scopes this run's calls count against."""
        return list(self._scopes)

    def _output_cap(self, options: Mapping[str, object]) -> int:
        for name in OUTPUT_TOKEN_OPTIONS:
            value = options.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return self._budget.assumed_output_tokens

    async def reserve_model_call(
        self, model: str, provider: str, input_tokens: int, options: Mapping[str, object]
    ) -> Reservation | None:
        """Reserve the worst case of one model call attempt.

        Returns None when the call goes through unguarded (``fail_open`` outage).

        Raises:
            BudgetExceeded: a scope has no room for it; the call must not be made.
            BudgetUnavailable: the ledger did not answer and the policy is ``fail_closed``.
        """
        output_tokens = self._output_cap(options)
        cost = safe_cost(
            self._prices,
            model,
            provider,
            Usage(input_tokens=input_tokens, output_tokens=output_tokens),
        )
        if cost is None and not self._unpriced_noted and self._usd_limit() is not None:
            self._unpriced(model, provider)
        worst = Amounts(
            usd=cost or 0.0, input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1
        )
        return await self._reserve(worst)

    async def _reserve(self, amounts: Amounts) -> Reservation | None:
        started = time.perf_counter()
        try:
            held = await self._budget.reserve(self._scopes, amounts)
        except BudgetExceeded as exc:
            self._note("reserve", "refused", started, amounts.usd, scope_key=exc.scope or "")
            raise
        except BudgetUnavailable:
            self._note("reserve", "error", started, amounts.usd)
            raise
        self._note("reserve", "ok" if held is not None else "unguarded", started, amounts.usd)
        return held

    def _note(
        self,
        operation: SharedBudgetOperation,
        outcome: SharedBudgetOutcome,
        started: float,
        reserved_usd: float,
        committed_usd: float | None = None,
        scope_key: str = "",
    ) -> None:
        """One ``on_shared_budget`` event, built only when an observer listens."""
        observers = self._observers
        if observers is None or not observers.listens("on_shared_budget"):
            return
        observers.on_shared_budget(
            SharedBudgetContext(
                run_id=self._run_id,
                time_ns=time.time_ns(),
                operation=operation,
                outcome=outcome,
                store=self._budget.ledger.name,
                duration_ms=(time.perf_counter() - started) * 1000.0,
                reserved_usd=reserved_usd,
                committed_usd=committed_usd,
                expired=self._budget.take_expired(),
                scope_key=scope_key,
            )
        )

    def _usd_limit(self) -> float | None:
        for scope in self._scopes:
            if scope.budget is not None and scope.budget.usd is not None:
                return float(scope.budget.usd)
        return None

    def _unpriced(self, model: str, provider: str) -> None:
        self._unpriced_noted = True
        _log.warning(
            "shared budget: model %r has no price; its calls reserve and "
            "commit no dollars (USD limits do not apply to them)",
            model,
        )
        observers = self._observers
        if observers is not None and observers.listens("on_budget_unpriced"):
            observers.on_budget_unpriced(
                BudgetUnpricedContext(
                    run_id=self._run_id,
                    time_ns=time.time_ns(),
                    model=model,
                    provider=provider,
                    scope="shared",
                    budget=self._usd_limit() or 0.0,
                )
            )

    async def settle(
        self,
        reservation: Reservation | None,
        usage: Usage | None,
        cost_usd: float | None,
        *,
        tool_calls: int = 0,
    ) -> None:
        """Commit an attempt: the calls it counts (it was made, whatever its outcome) and
        what the provider reported (nothing, when it reported nothing); the rest of the
        reservation is released in the same step. Shielded, so a second cancellation
        cannot leave the reservation open (its TTL is the last resort); never raises."""
        if reservation is None:
            return
        spent = Amounts(
            usd=cost_usd or 0.0,
            input_tokens=usage.input_tokens if usage is not None else 0,
            output_tokens=usage.output_tokens if usage is not None else 0,
            model_calls=reservation.amounts.model_calls,
            tool_calls=tool_calls,
        )
        started = time.perf_counter()
        answered = await asyncio.shield(self._budget.commit(reservation, spent))
        self._note(
            "commit",
            "ok" if answered else "error",
            started,
            reservation.amounts.usd,
            committed_usd=spent.usd,
        )

    async def release(self, reservation: Reservation | None) -> None:
        """Give a reservation back whole (its call was never attempted); never raises."""
        if reservation is not None:
            started = time.perf_counter()
            answered = await asyncio.shield(self._budget.release(reservation))
            self._note("release", "ok" if answered else "error", started, reservation.amounts.usd)

    async def reserve_tool_call(self) -> Reservation | None:
        """Reserve one tool call when a scope limits tool calls (else nothing is done)."""
        if not self._tools_limited:
            return None
        return await self._reserve(Amounts(tool_calls=1))
