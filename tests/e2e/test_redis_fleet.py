"""The fleet parts against a real redis-server: shared budgets, claims, session histories.

Worker processes are real processes (``multiprocessing`` with ``spawn``), each with
its own client, as a fleet's workers would be.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time
import uuid
from typing import Any

import pytest

from loopobs import AgentLoop, Budget, BudgetUnavailable, StoreCorrupt, StoreUnavailable
from loopobs.contract.model import AssistantMessage, UserMessage
from loopobs.cost.shared import Amounts, Refusal, ScopeLimit, SharedBudget
from loopobs.llm import Reply, ScriptedClient, ToolCall
from tests.e2e._redis import RedisServer, redis_server

pytestmark = pytest.mark.e2e
__all__ = ["redis_server"]  # the fixture, used by name below

redis_asyncio = pytest.importorskip("redis.asyncio")


def _client(url: str, timeout: float = 1.0) -> Any:
    return redis_asyncio.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


# ---- workers (module level: spawned processes import them) ----


def _spend_worker(
    url: str, tenant: str, limit: float, runs: int, max_tokens: int, out: Any
) -> None:
    """One worker process: ``runs`` concurrent AgentLoop runs for ``tenant``, one model call
    each, every call priced at $0.01 a token, under the tenant's shared ``usd`` limit."""

    async def main() -> tuple[int, int]:
        from loopobs import Conversation, ModelRates, RunStatus, Usage
        from loopobs.redis import RedisLedger

        client = _client(url, 5.0)
        shared = SharedBudget(
            RedisLedger(client, timeout_s=5.0), scopes={"tenant": Budget(usd=limit)}
        )
        prices = {"m": ModelRates(input_per_mtok=10_000.0, output_per_mtok=10_000.0)}

        async def one() -> RunStatus:
            reply = Reply(text="ok", usage=Usage(input_tokens=1, output_tokens=1))
            loop = AgentLoop(
                ScriptedClient([reply]),
                model="m",
                detectors=[],
                prices=prices,
                shared_budget=shared,
                request_options={"max_tokens": max_tokens},
            )
            result = await loop.run("q", session=Conversation(attribution={"tenant": tenant}))
            return result.status

        statuses = await asyncio.gather(*(one() for _ in range(runs)))
        await client.aclose()
        made = sum(s is RunStatus.COMPLETED for s in statuses)
        refused = sum(s is RunStatus.BUDGET_EXCEEDED for s in statuses)
        return made, refused

    out.put(asyncio.run(main()))


async def _run_one_at_a_time(url: str, tenant: str, limit: float, max_tokens: int) -> int:
    """Runs for ``tenant`` one after another until the shared budget refuses one; returns
    how many completed."""
    from loopobs import Conversation, ModelRates, RunStatus, Usage
    from loopobs.redis import RedisLedger

    client = _client(url, 5.0)
    shared = SharedBudget(RedisLedger(client, timeout_s=5.0), scopes={"tenant": Budget(usd=limit)})
    prices = {"m": ModelRates(input_per_mtok=10_000.0, output_per_mtok=10_000.0)}
    made = 0
    try:
        for _ in range(1000):
            loop = AgentLoop(
                ScriptedClient([Reply(text="ok", usage=Usage(input_tokens=1, output_tokens=1))]),
                model="m",
                detectors=[],
                prices=prices,
                shared_budget=shared,
                request_options={"max_tokens": max_tokens},
            )
            result = await loop.run("q", session=Conversation(attribution={"tenant": tenant}))
            if result.status is not RunStatus.COMPLETED:
                assert result.status is RunStatus.BUDGET_EXCEEDED
                return made
            made += 1
        raise AssertionError("the shared budget never refused")
    finally:
        await client.aclose()


def _reserve_and_hang(url: str, scope: str, ready: Any) -> None:
    async def main() -> None:
        from loopobs.redis import RedisLedger

        ledger = RedisLedger(_client(url))
        res = await ledger.reserve(
            [ScopeLimit(scope, Budget(usd=1.0))], Amounts(usd=0.9), ttl_s=1.0
        )
        ready.put(type(res).__name__)
        await asyncio.sleep(3600)

    asyncio.run(main())


def _resume_worker(url: str, checkpoint_json: str, start: Any, out: Any) -> None:
    """One worker process: resume the parked run from its JSON checkpoint, claims on Redis."""

    async def main() -> str:
        from loopobs import CheckpointAlreadyResumed
        from loopobs.loop.checkpoint import Checkpoint
        from loopobs.redis import RedisCheckpointClaims
        from tests._loop_parking_tools import approve

        client = _client(url)
        loop = AgentLoop(
            ScriptedClient([Reply(text="paid")]),
            model="m",
            tools=[approve],
            detectors=[],
            claim_checkpoint=RedisCheckpointClaims(client),
        )
        checkpoint = Checkpoint.model_validate_json(checkpoint_json)
        start.wait(30)
        try:
            result = await loop.resume(checkpoint, input={"approved": True})
            outcome = f"ran:{result.status}"
        except CheckpointAlreadyResumed:
            outcome = "refused"
        await client.aclose()
        return outcome

    out.put(asyncio.run(main()))


def _detector_worker(
    url: str, session_id: str, first: int, last: int, converge: bool, out: Any
) -> None:
    """One worker process: messages ``first:last`` of the looping (or converging)
    conversation (tests/_detector_moves.py), reopening the session from Redis on a fresh
    loop."""
    from loopobs.redis import RedisSessionStore
    from tests._detector_moves import messages, send_all

    async def main() -> Any:
        client = _client(url, 5.0)
        try:
            return await send_all(
                RedisSessionStore(client),
                uuid.UUID(session_id),
                messages(converge=converge)[first:last],
                converge=converge,
            )
        finally:
            await client.aclose()

    out.put(asyncio.run(main()))


def _ctx() -> Any:
    return multiprocessing.get_context("spawn")


# ---- shared budgets ----


async def test_reserve_commit_release_and_refusal(redis_server: RedisServer) -> None:
    """A reservation holds its amounts until committed (the rest released) or released."""
    from loopobs.redis import RedisLedger

    client = _client(redis_server.url)
    ledger = RedisLedger(client)
    scope = [ScopeLimit("tenant:a", Budget(usd=1.0, total_tokens=1000))]
    first = await ledger.reserve(scope, Amounts(usd=0.6, input_tokens=100), ttl_s=30)
    assert type(first).__name__ == "Reservation"
    refused = await ledger.reserve(scope, Amounts(usd=0.6), ttl_s=30)
    assert type(refused).__name__ == "Refusal"
    assert (refused.limit, refused.reserved) == ("usd", 0.6)  # type: ignore[union-attr]
    await ledger.commit(first, Amounts(usd=0.1, input_tokens=80))  # type: ignore[arg-type]
    assert await ledger.spent("tenant:a") == Amounts(usd=0.1, input_tokens=80)
    assert await ledger.reserved("tenant:a") == Amounts()
    second = await ledger.reserve(scope, Amounts(usd=0.6), ttl_s=30)  # fits now
    await ledger.release(second)  # type: ignore[arg-type]
    await ledger.release(second)  # type: ignore[arg-type]  # idempotent
    tokens = await ledger.reserve(scope, Amounts(output_tokens=950), ttl_s=30)
    assert isinstance(tokens, Refusal)
    assert tokens.limit == "total_tokens"
    assert await ledger.reconcile("tenant:a")
    await client.aclose()


async def test_the_ledger_folds_old_entries_and_still_reconciles(redis_server: RedisServer) -> None:
    """Past ``max_entries`` old ledger entries are folded into a sum: totals still add up."""
    from loopobs.redis import RedisLedger

    client = _client(redis_server.url)
    ledger = RedisLedger(client, max_entries=5)
    for i in range(23):
        res = await ledger.reserve([ScopeLimit("k")], Amounts(usd=0.01 * i), ttl_s=30)
        await ledger.commit(res, Amounts(usd=0.01 * i, model_calls=1))  # type: ignore[arg-type]
    assert await client.xlen("loopobs:budget:k:ledger") == 5
    spent = await ledger.spent("k")
    assert spent.model_calls == 23
    assert spent.usd == pytest.approx(0.01 * sum(range(23)))
    assert await ledger.reconcile("k")
    await client.aclose()


@pytest.mark.slow
def test_eight_workers_never_spend_past_a_shared_budget(redis_server: RedisServer) -> None:
    """8 worker processes × 50 concurrent AgentLoop runs share one tenant ``Budget(usd=X)``
    on one Redis: committed spend never passes X, every run either completed or was
    refused, and the part of a reservation a call did not use went back (more calls fit
    than the worst cases alone would allow)."""
    ctx = _ctx()
    limit = 3.0
    for repetition in range(2):
        out = ctx.Queue()
        tenant = f"acme-{repetition}"
        workers = [
            ctx.Process(target=_spend_worker, args=(redis_server.url, tenant, limit, 50, 40, out))
            for _ in range(8)
        ]
        for w in workers:
            w.start()
        results = [out.get(timeout=180) for _ in workers]
        for w in workers:
            w.join(30)
        made = sum(m for m, _ in results)
        refused = sum(r for _, r in results)

        async def totals(tenant: str = tenant) -> tuple[Amounts, Amounts, bool]:
            from loopobs.redis import RedisLedger

            client = _client(redis_server.url)
            ledger = RedisLedger(client)
            spent = await ledger.spent(f"tenant:{tenant}")
            held = await ledger.reserved(f"tenant:{tenant}")
            ok = await ledger.reconcile(f"tenant:{tenant}")
            await client.aclose()
            return spent, held, ok

        spent, held, reconciled = asyncio.run(totals())
        assert made + refused == 400
        assert spent.usd <= limit + 1e-9
        assert spent.model_calls == made
        assert spent.usd == pytest.approx(made * 0.02)
        assert held == Amounts()
        assert reconciled
        # How many of the burst's calls fit depends on how the 400 runs interleave (on a
        # loaded machine all of them may reserve before the first commits), so the
        # released remainders are shown without a race: runs one after another, until the
        # first refusal, use the budget to within one worst case (40 output tokens and a
        # few input tokens, under $0.50) — where reservations never given back would have
        # stopped them after 7 calls.
        after_burst = asyncio.run(_run_one_at_a_time(redis_server.url, tenant, limit, 40))
        spent, held, reconciled = asyncio.run(totals())
        assert spent.usd <= limit + 1e-9
        assert spent.usd > limit - 0.50
        assert spent.model_calls == made + after_burst
        assert made + after_burst > limit / 0.40 + 1
        assert held == Amounts()
        assert reconciled


def test_a_killed_worker_s_reservation_expires(redis_server: RedisServer) -> None:
    """``kill -9`` of a worker holding a reservation: once its TTL passes, the budget is
    whole again for everyone else."""
    ctx = _ctx()
    ready = ctx.Queue()
    worker = ctx.Process(target=_reserve_and_hang, args=(redis_server.url, "tenant:k", ready))
    worker.start()
    assert ready.get(timeout=60) == "Reservation"
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(10)

    async def after() -> tuple[str, str]:
        from loopobs.redis import RedisLedger

        client = _client(redis_server.url)
        ledger = RedisLedger(client)
        scope = [ScopeLimit("tenant:k", Budget(usd=1.0))]
        blocked = await ledger.reserve(scope, Amounts(usd=0.5), ttl_s=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if (await ledger.reserved("tenant:k")) == Amounts():
                break
            await asyncio.sleep(0.1)
        freed = await ledger.reserve(scope, Amounts(usd=0.9), ttl_s=30)
        await client.aclose()
        return type(blocked).__name__, type(freed).__name__

    assert asyncio.run(after()) == ("Refusal", "Reservation")


async def test_redis_down_fail_closed_refuses_fail_open_counts_and_restart_recovers(
    redis_server: RedisServer,
) -> None:
    """Redis stopped: ``fail_closed`` refuses within the deadline naming the store;
    ``fail_open`` lets the call through and counts it; Redis started again on the same
    port: the same clients work again, without a restart of the worker."""
    from loopobs.redis import RedisLedger

    client = _client(redis_server.url, timeout=0.3)
    closed = SharedBudget(RedisLedger(client, timeout_s=0.5), scopes={"tenant": Budget(usd=1)})
    opened = SharedBudget(
        RedisLedger(client, timeout_s=0.5),
        scopes={"tenant": Budget(usd=1)},
        on_unavailable="fail_open",
    )
    scopes = closed.scopes_for("s1", {"tenant": "t"})
    assert await closed.reserve(scopes, Amounts(usd=0.1)) is not None
    redis_server.stop()
    started = time.monotonic()
    with pytest.raises(BudgetUnavailable) as caught:
        await closed.reserve(scopes, Amounts(usd=0.1))
    assert time.monotonic() - started < 5
    assert caught.value.store == f"redis://127.0.0.1:{redis_server.port}/0"
    assert await opened.reserve(scopes, Amounts(usd=0.1)) is None
    assert await opened.reserve(scopes, Amounts(usd=0.1)) is None
    assert opened.unguarded_calls == 2
    assert closed.refused_calls == 1
    redis_server.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            res = await closed.reserve(scopes, Amounts(usd=0.1))
            break
        except BudgetUnavailable:
            assert time.monotonic() < deadline, "no recovery after Redis came back"
            await asyncio.sleep(0.2)
    assert res is not None
    await client.aclose()


# ---- exactly-once resume ----


def test_eight_processes_resuming_one_checkpoint_one_resumes(redis_server: RedisServer) -> None:
    """A run parks on a human gate; eight worker processes resume its checkpoint at once with
    Redis claims: exactly one runs it, the seven others get ``CheckpointAlreadyResumed``."""
    from tests._loop_parking_tools import approve

    pay = Reply(tool_calls=(ToolCall("approve", {"amount": 2}),))
    loop = AgentLoop(ScriptedClient([pay]), model="m", tools=[approve], detectors=[])
    parked = asyncio.run(loop.run("pay the bill"))
    assert parked.checkpoint is not None
    ctx = _ctx()
    start, out = ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(
            target=_resume_worker,
            args=(redis_server.url, parked.checkpoint.model_dump_json(), start, out),
        )
        for _ in range(8)
    ]
    for w in workers:
        w.start()
    start.set()
    outcomes = sorted(out.get(timeout=120) for _ in workers)
    for w in workers:
        w.join(30)
    assert outcomes == ["ran:completed"] + ["refused"] * 7


# ---- session histories ----


async def test_a_session_reopens_on_another_worker_with_its_history(
    redis_server: RedisServer,
) -> None:
    """An ``AgentSession`` on a Redis store, closed, then opened with a new loop and a new
    client (another worker): the history is there, and the next run continues it."""
    from loopobs.redis import RedisSessionStore
    from loopobs.sessions.session import AgentSession

    sid = uuid.uuid4()
    first_client = _client(redis_server.url)
    loop = AgentLoop(ScriptedClient([Reply(text="hello there")]), model="m", detectors=[])
    async with AgentSession(loop, store=RedisSessionStore(first_client), session_id=sid) as s:
        await (await s.send("hi"))
    await first_client.aclose()

    second_client = _client(redis_server.url)
    store = RedisSessionStore(second_client)
    history = await store.load(sid)
    assert [type(m) for m in history] == [UserMessage, AssistantMessage]
    assert history[0].content == "hi"
    assert history[1].content == "hello there"
    other = AgentLoop(ScriptedClient([Reply(text="again")]), model="m", detectors=[])
    async with AgentSession(other, store=store, session_id=sid) as s:
        assert [m.content for m in s.history()] == ["hi", "hello there"]
        await (await s.send("more"))
    assert len(await store.load(sid)) == 4
    await second_client.aclose()


@pytest.mark.parametrize("converge", [False, True], ids=["tool-loop", "same-answer"])
def test_a_looping_session_moved_to_another_worker_is_stopped_on_time(
    redis_server: RedisServer, converge: bool
) -> None:
    """Worker 1 (its own process, hash seed 1) runs the first half of a looping
    conversation (a tool loop, or the same answer again) on a Redis store; worker 2 (hash
    seed 2, fresh detectors) reopens it and runs the rest: the loop is warned about and
    stopped at the same steps as in a conversation that never moved."""
    from loopobs.sessions.stores import MemoryStore
    from tests._detector_moves import SENDS, messages, send_all

    unmoved, _ = asyncio.run(
        send_all(MemoryStore(), uuid.uuid4(), messages(converge=converge), converge=converge)
    )
    stopped = "converged" if converge else "loop_detected"
    stop = next(i for i, (status, _) in enumerate(unmoved) if status == stopped)
    half = stop // 2 + 1
    sid = str(uuid.uuid4())
    ctx = _ctx()
    out = ctx.Queue()
    verdicts: list[Any] = []
    saved = os.environ.get("PYTHONHASHSEED")
    try:
        for seed, (first, last) in enumerate([(0, half), (half, SENDS)], start=1):
            os.environ["PYTHONHASHSEED"] = str(seed)  # each worker salts hash() its own way
            worker = ctx.Process(
                target=_detector_worker,
                args=(redis_server.url, sid, first, last, converge, out),
            )
            worker.start()
            part, errors = out.get(timeout=120)
            worker.join(30)
            assert worker.exitcode == 0
            assert errors == 0
            verdicts.extend(tuple(v) for v in part)
    finally:
        if saved is None:
            os.environ.pop("PYTHONHASHSEED", None)
        else:
            os.environ["PYTHONHASHSEED"] = saved
    assert [(status, tuple(tuple(d) for d in found)) for status, found in verdicts] == unmoved
    assert verdicts[stop][0] == stopped


async def test_a_session_store_that_is_down_fails_clearly(redis_server: RedisServer) -> None:
    """Redis down: load and append raise ``StoreUnavailable`` within the deadline; a torn
    entry is reported by its index."""
    from loopobs.redis import RedisSessionStore

    client = _client(redis_server.url, timeout=0.3)
    store = RedisSessionStore(client, timeout_s=0.5)
    sid = uuid.uuid4()
    await client.rpush(store.key(sid), b'{"role": "user", "content": "ok"}', b"{torn")
    with pytest.raises(StoreCorrupt, match="entry 2 is not a stored message"):
        await store.load(sid)
    redis_server.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable):
        await store.append(sid, [UserMessage(content="x")])
    with pytest.raises(StoreUnavailable):
        await store.load(sid)
    assert time.monotonic() - started < 5
    await client.aclose()
