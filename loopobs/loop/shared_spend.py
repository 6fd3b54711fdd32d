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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from loopobs.contract.events import Usage
from loopobs.cost.pricing import PriceLookup, safe_cost
from loopobs.cost.shared import Amounts, Reservation, ScopeLimit, SharedBudget

__all__ = ["OUTPUT_TOKEN_OPTIONS", "SharedSpend"]

OUTPUT_TOKEN_OPTIONS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
"""Request options that cap a call's output tokens, in the order they are read."""

_log = logging.getLogger("loopobs.budget")


class SharedSpend:
    """One run's reservations against a :class:`~loopobs.cost.shared.SharedBudget`."""

    __slots__ = ("_budget", "_prices", "_scopes", "_tools_limited", "_unpriced_noted")

    def __init__(
        self,
        budget: SharedBudget,
        *,
        session_id: object,
        attribution: Mapping[str, str],
        prices: PriceLookup,
    ) -> None:
        self._budget = budget
        self._prices = prices
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
        if cost is None and not self._unpriced_noted and self._usd_limited():
            self._unpriced_noted = True
            _log.warning(
                "shared budget: model %r has no price; its calls reserve and "
                "commit no dollars (USD limits do not apply to them)",
                model,
            )
        worst = Amounts(
            usd=cost or 0.0, input_tokens=input_tokens, output_tokens=output_tokens, model_calls=1
        )
        return await self._budget.reserve(self._scopes, worst)

    def _usd_limited(self) -> bool:
        return any(s.budget is not None and s.budget.usd is not None for s in self._scopes)

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
        await asyncio.shield(self._budget.commit(reservation, spent))

    async def release(self, reservation: Reservation | None) -> None:
        """Give a reservation back whole (its call was never attempted); never raises."""
        if reservation is not None:
            await asyncio.shield(self._budget.release(reservation))

    async def reserve_tool_call(self) -> Reservation | None:
        """Reserve one tool call when a scope limits tool calls (else nothing is done)."""
        if not self._tools_limited:
            return None
        return await self._budget.reserve(self._scopes, Amounts(tool_calls=1))
