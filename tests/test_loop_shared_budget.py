"""``AgentLoop(shared_budget=...)``: reservations before each call, settled after it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    Amounts,
    Budget,
    BudgetUnavailable,
    Conversation,
    InProcessLedger,
    ModelRates,
    RunStatus,
    SharedBudget,
    StoreUnavailable,
    Usage,
    tool,
)
from loopobs.contract.errors import ModelError
from loopobs.llm import Fail, Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver

PRICES = {"m": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=1_000_000.0)}
"""$1 a token: reservations and costs in round dollars."""


def _answer(tokens: tuple[int, int] = (10, 5)) -> Reply:
    return Reply(text="done", usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]))


def _loop(shared: SharedBudget, replies: list[Any], **kw: Any) -> AgentLoop:
    return AgentLoop(
        ScriptedClient(replies), model="m", detectors=[], shared_budget=shared, prices=PRICES, **kw
    )


async def test_workers_sharing_a_ledger_stay_under_the_tenant_limit() -> None:
    """Two loops (two workers) and one ledger: a tenant's ``model_calls=3`` holds across
    them, and the refused run ends ``budget_exceeded`` naming the tenant's scope."""
    ledger = InProcessLedger()
    shared = SharedBudget(ledger, scopes={"tenant": Budget(model_calls=3)})
    results = []
    for _ in range(2):
        loop = _loop(shared, [_answer(), _answer()])
        for _ in range(2):
            acme = Conversation(attribution={"tenant": "acme"})
            results.append(await loop.run("q", session=acme))
    assert [r.status for r in results] == [RunStatus.COMPLETED] * 3 + [RunStatus.BUDGET_EXCEEDED]
    assert results[-1].error.scope == "tenant:acme"  # type: ignore[union-attr]
    assert (await ledger.spent("tenant:acme")).model_calls == 3
    assert await ledger.reserved("tenant:acme") == Amounts()


async def test_the_worst_case_is_reserved_and_the_rest_released() -> None:
    """A call reserves its estimate plus ``max_tokens``; it commits what it used."""
    ledger = InProcessLedger()
    shared = SharedBudget(ledger, session=Budget(usd=1000.0))
    seen: list[Amounts] = []
    original = ledger.reserve

    async def spy(scopes: Any, amounts: Amounts, *, ttl_s: float) -> Any:
        seen.append(amounts)
        return await original(scopes, amounts, ttl_s=ttl_s)

    ledger.reserve = spy  # type: ignore[method-assign]
    session = Conversation()
    loop = _loop(shared, [_answer((10, 5))], request_options={"max_tokens": 100})
    result = await loop.run("hello", session=session)
    assert result.ok
    assert seen[0].output_tokens == 100
    assert seen[0].model_calls == 1
    assert seen[0].usd == pytest.approx(seen[0].input_tokens + 100)
    spent = await ledger.spent(f"session:{session.id}")
    assert (spent.usd, spent.input_tokens, spent.output_tokens) == (15.0, 10, 5)
    assert await ledger.reserved(f"session:{session.id}") == Amounts()


async def test_a_call_whose_worst_case_does_not_fit_is_not_made() -> None:
    """Room for the actual cost is not enough: the reservation must fit before the call."""
    shared = SharedBudget(session=Budget(usd=50.0))
    client = ScriptedClient([_answer((10, 5))])
    loop = AgentLoop(
        client,
        model="m",
        detectors=[],
        shared_budget=shared,
        prices=PRICES,
        request_options={"max_tokens": 100},
    )
    recorder = RecordingObserver()
    loop.attach(recorder)
    result = await loop.run("hello")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert recorder.of("on_stream_start") == []
    [verdict] = recorder.of("on_budget_exceeded")
    assert (verdict.scope, verdict.limit) == ("shared", "usd")
    assert verdict.scope_key.startswith("session:")


async def test_a_failed_or_cancelled_call_gives_its_reservation_back() -> None:
    """A failed attempt counts as a call but spends no tokens; a cancelled one likewise."""
    ledger = InProcessLedger()
    shared = SharedBudget(ledger, scopes={"tenant": Budget(usd=10_000.0)})
    session = Conversation(attribution={"tenant": "t"})
    failing = _loop(shared, [Fail(ModelError("boom", retryable=False))])
    assert (await failing.run("q", session=session)).status is RunStatus.FAILED
    spent = await ledger.spent("tenant:t")
    assert (spent.model_calls, spent.usd, spent.input_tokens) == (1, 0.0, 0)

    gate = asyncio.Event()

    class Hanging(ScriptedClient):
        async def stream(self, request: Any) -> Any:
            await gate.wait()
            yield  # pragma: no cover

    hanging = AgentLoop(Hanging([]), model="m", detectors=[], shared_budget=shared, prices=PRICES)
    task = asyncio.create_task(hanging.run("q", session=Conversation(attribution={"tenant": "t"})))
    for _ in range(50):
        await asyncio.sleep(0)
        if (await ledger.reserved("tenant:t")).model_calls:
            break
    assert (await ledger.reserved("tenant:t")).model_calls == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await ledger.reserved("tenant:t") == Amounts()
    assert (await ledger.spent("tenant:t")).model_calls == 2


class DownLedger(InProcessLedger):
    name = "redis://127.0.0.1:1/0"
    calls = 0

    async def reserve(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        raise StoreUnavailable(store=self.name, reason="reserve took longer than 0.5s")


async def test_fail_closed_refuses_the_run_and_fail_open_lets_it_through() -> None:
    closed = await _loop(SharedBudget(DownLedger(), session=Budget(usd=1)), [_answer()]).run("q")
    assert closed.status is RunStatus.FAILED
    assert isinstance(closed.error, BudgetUnavailable)
    assert closed.error.store == "redis://127.0.0.1:1/0"
    shared = SharedBudget(DownLedger(), session=Budget(usd=1), on_unavailable="fail_open")
    opened = await _loop(shared, [_answer()]).run("q")
    assert opened.ok
    assert shared.unguarded_calls == 1


async def test_without_a_shared_budget_nothing_is_reserved() -> None:
    DownLedger.calls = 0
    assert (await AgentLoop(ScriptedClient([_answer()]), model="m", detectors=[]).run("q")).ok
    assert DownLedger.calls == 0


async def test_attribution_reaches_run_start_and_is_checked() -> None:
    recorder = RecordingObserver()
    loop = AgentLoop(ScriptedClient([_answer()]), model="m", detectors=[], observers=[recorder])
    await loop.run("q", session=Conversation(attribution={"tenant": "acme", "user": "u-1"}))
    [start] = recorder.of("on_run_start")
    assert start.attribution == {"tenant": "acme", "user": "u-1"}
    with pytest.raises(TypeError):
        Conversation(attribution={"tenant": 5})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="':'"):
        Conversation(attribution={"a:b": "x"})
    with pytest.raises(ValueError, match="at most"):
        Conversation(attribution={str(i): "x" for i in range(17)})


async def test_shared_tool_call_limits_refuse_the_call_and_stop_the_run() -> None:
    """``tool_calls=1`` for the tenant: the second tool call is not run, the run stops."""
    ran: list[str] = []

    @tool
    def look(q: str) -> str:
        """Look something up."""
        ran.append(q)
        return f"seen {q}"

    ledger = InProcessLedger()
    shared = SharedBudget(ledger, scopes={"tenant": Budget(tool_calls=1)})
    calls = (ToolCall("look", {"q": "a"}, id="c1"), ToolCall("look", {"q": "b"}, id="c2"))
    loop = _loop(
        shared,
        [Reply(tool_calls=calls, usage=Usage(input_tokens=1, output_tokens=1)), _answer()],
        tools=[look],
        parallel_tool_calls=False,
    )
    result = await loop.run("q", session=Conversation(attribution={"tenant": str(uuid.uuid4())}))
    assert ran == ["a"]
    assert result.status is RunStatus.BUDGET_EXCEEDED


async def test_an_agent_session_carries_its_attribution_to_every_run() -> None:
    """``AgentSession(attribution=...)``: each run is for the tenant, before and after a reset."""
    from loopobs.sessions.session import AgentSession

    ledger = InProcessLedger()
    shared = SharedBudget(ledger, scopes={"tenant": Budget(model_calls=100)})
    recorder = RecordingObserver()
    loop = _loop(shared, [_answer(), _answer()], observers=[recorder])
    async with AgentSession(loop, attribution={"tenant": "acme"}) as session:
        await (await session.send("one"))
        await session.reset()
        await (await session.send("two"))
    assert [s.attribution for s in recorder.of("on_run_start")] == [{"tenant": "acme"}] * 2
    assert (await ledger.spent("tenant:acme")).model_calls == 2
