"""Shared budgets in one process: the ledger protocol's semantics, and the failure policy."""

from __future__ import annotations

import asyncio
import logging
import math

import pytest

from loopobs import Budget, BudgetExceeded, BudgetUnavailable, StoreUnavailable
from loopobs.cost.shared import (
    Amounts,
    InProcessLedger,
    Refusal,
    Reservation,
    ScopeLimit,
    SharedBudget,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_reservations_count_until_they_expire() -> None:
    """Open reservations take room; past their TTL they stop counting (a killed worker)."""
    clock = Clock()
    ledger = InProcessLedger(clock=clock)
    scope = [ScopeLimit("s", Budget(usd=1.0))]
    held = await ledger.reserve(scope, Amounts(usd=0.8), ttl_s=10)
    assert isinstance(held, Reservation)
    refused = await ledger.reserve(scope, Amounts(usd=0.3), ttl_s=10)
    assert isinstance(refused, Refusal)
    assert (refused.committed, refused.reserved, refused.requested) == (0.0, 0.8, 0.3)
    clock.now = 10.0
    assert isinstance(await ledger.reserve(scope, Amounts(usd=0.3), ttl_s=10), Reservation)
    assert ledger.expired == 1


async def test_commit_spends_what_was_used_and_releases_the_rest() -> None:
    ledger = InProcessLedger()
    scope = [ScopeLimit("s", Budget(usd=1.0)), ScopeLimit("tenant:a")]
    res = await ledger.reserve(scope, Amounts(usd=0.9, model_calls=1), ttl_s=60)
    assert isinstance(res, Reservation)
    await ledger.commit(res, Amounts(usd=0.2, model_calls=1))
    for key in ("s", "tenant:a"):
        assert await ledger.spent(key) == Amounts(usd=0.2, model_calls=1)
        assert await ledger.reserved(key) == Amounts()
        assert ledger.reconcile(key)
    assert isinstance(await ledger.reserve(scope, Amounts(usd=0.8), ttl_s=60), Reservation)


async def test_a_refusal_in_one_scope_reserves_nothing_anywhere() -> None:
    ledger = InProcessLedger()
    scopes = [ScopeLimit("a", Budget(usd=10)), ScopeLimit("b", Budget(model_calls=0))]
    assert isinstance(await ledger.reserve(scopes, Amounts(usd=1, model_calls=1), ttl_s=5), Refusal)
    assert await ledger.reserved("a") == Amounts()


async def test_the_ledger_stays_bounded_and_adds_up() -> None:
    ledger = InProcessLedger(max_entries=4)
    for i in range(50):
        res = await ledger.reserve([ScopeLimit("s")], Amounts(usd=0.5), ttl_s=5)
        assert isinstance(res, Reservation)
        await ledger.commit(res, Amounts(usd=0.01 * i, input_tokens=i))
    assert ledger.reconcile("s")
    assert (await ledger.spent("s")).input_tokens == sum(range(50))


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_amounts_refuse_non_finite_or_negative_numbers(bad: float) -> None:
    with pytest.raises(ValueError, match="usd"):
        Amounts(usd=bad)


class DownLedger(InProcessLedger):
    name = "redis://10.0.0.1:6379/0"

    def __init__(self) -> None:
        super().__init__()
        self.down = True

    async def reserve(self, scopes, amounts, *, ttl_s):  # type: ignore[no-untyped-def]
        if self.down:
            raise StoreUnavailable(store=self.name, reason="reserve took longer than 0.5s")
        return await super().reserve(scopes, amounts, ttl_s=ttl_s)


async def test_fail_closed_refuses_naming_the_store() -> None:
    budget = SharedBudget(DownLedger(), session=Budget(usd=1))
    with pytest.raises(BudgetUnavailable) as caught:
        await budget.reserve(budget.scopes_for("s1"), Amounts(usd=0.1))
    assert caught.value.store == "redis://10.0.0.1:6379/0"
    assert (budget.refused_calls, budget.store_errors) == (1, 1)


async def test_fail_open_lets_calls_through_counted_and_logs_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ledger = DownLedger()
    budget = SharedBudget(ledger, session=Budget(usd=1), on_unavailable="fail_open")
    scopes = budget.scopes_for("s1", {"tenant": "acme"})
    assert [s.key for s in scopes] == ["session:s1", "tenant:acme"]
    with caplog.at_level(logging.WARNING, logger="loopobs.budget"):
        for _ in range(3):
            assert await budget.reserve(scopes, Amounts(usd=0.1)) is None
        ledger.down = False
        res = await budget.reserve(scopes, Amounts(usd=0.1))
        await budget.commit(res, Amounts(usd=0.1))
    assert budget.unguarded_calls == 3
    messages = [r.getMessage() for r in caplog.records]
    assert sum("unavailable" in m for m in messages) == 1
    assert sum("answers again" in m for m in messages) == 1


async def test_a_full_scope_raises_budget_exceeded_with_its_name() -> None:
    budget = SharedBudget(scopes={"tenant": Budget(model_calls=2)})
    scopes = budget.scopes_for("s1", {"tenant": "acme"})
    for _ in range(2):
        await budget.commit(
            await budget.reserve(scopes, Amounts(model_calls=1)), Amounts(model_calls=1)
        )
    with pytest.raises(BudgetExceeded) as caught:
        await budget.reserve(scopes, Amounts(model_calls=1))
    assert (caught.value.scope, caught.value.limit) == ("tenant:acme", "model_calls")


async def test_concurrent_reservations_never_overcommit() -> None:
    budget = SharedBudget(session=Budget(usd=1.0))
    scopes = budget.scopes_for("s")

    async def one() -> bool:
        try:
            res = await budget.reserve(scopes, Amounts(usd=0.3))
        except BudgetExceeded:
            return False
        await asyncio.sleep(0)
        await budget.commit(res, Amounts(usd=0.3))
        return True

    assert sum(await asyncio.gather(*(one() for _ in range(20)))) == 3
    assert (await budget.ledger.spent("session:s")).usd == pytest.approx(0.9)
