"""AgentSession: the ops channel, bounded queues, stores, and what it emits."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from loopobs import (
    AgentLoop,
    AgentSession,
    FileStore,
    Interrupted,
    MemoryStore,
    QueueFull,
    SessionClosed,
    SessionUpdate,
    ToolResultMessage,
    UserMessage,
    tool,
)
from loopobs.exporters import MetricsObserver
from loopobs.llm.scripted import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, check_contract, metric_points


def echo_client() -> ScriptedClient:
    """Answers every call with the last user message, upper-cased."""

    def step(request: object) -> Reply:
        users = [m for m in request.messages if isinstance(m, UserMessage)]  # type: ignore[attr-defined]
        return Reply(text=users[-1].content.upper() if users else "")

    return ScriptedClient(step)


async def test_send_runs_a_turn_and_persists_each_message_once() -> None:
    store = MemoryStore()
    rec = RecordingObserver()
    loop = AgentLoop(echo_client(), model="m", observers=[rec])
    async with AgentSession(loop, store=store) as session:
        first = await (await session.send("hello"))
        second = await (await session.send("again"))
        assert (first.answer, second.answer) == ("HELLO", "AGAIN")
        history = session.history()
    stored = store.messages[session.id]
    assert stored == history
    users = [m.content for m in stored if isinstance(m, UserMessage)]
    assert users == ["hello", "again"]  # each user message persisted exactly once
    assert check_contract(rec.events) == []


async def test_a_file_store_survives_the_session(tmp_path: Path) -> None:
    loop = AgentLoop(echo_client(), model="m")
    async with AgentSession(loop, store=FileStore(tmp_path)) as session:
        await (await session.send("remember me"))
    lines = (tmp_path / f"{session.id}.jsonl").read_text().splitlines()
    assert len(lines) == 2  # the user message and the answer, once each (flushed on close)
    async with AgentSession(loop, store=FileStore(tmp_path), session_id=session.id) as again:
        assert [m.content for m in again.history()] == ["remember me", "REMEMBER ME"]
        await (await again.send("more"))
    lines = (tmp_path / f"{session.id}.jsonl").read_text().splitlines()
    assert len(lines) == 4


async def test_inject_hint_reaches_the_next_model_call_but_not_the_history() -> None:
    client = echo_client()
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m", observers=[rec])
    async with AgentSession(loop) as session:
        session.inject("be brief")
        session.inject("earlier question", kind="user")
        await (await session.send("now"))
        history = session.history()
    request = client.requests[0].messages
    assert [(m.role, m.content) for m in request] == [
        ("user", "earlier question"),
        ("user", "now"),
        ("system", "be brief"),
    ]
    assert [m.content for m in history] == ["earlier question", "now", "NOW"]
    hint = rec.of("on_context_provider")
    assert [(h.provider, h.outcome, h.text) for h in hint] == [("injected_hint", "ok", "be brief")]


async def test_interrupt_ends_the_run_as_interrupted_and_the_session_goes_on() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def slow() -> str:
        """Waits."""
        started.set()
        await release.wait()
        return "never"

    client = ScriptedClient([Reply(tool_calls=(ToolCall("slow", {}),)), Reply(text="second")])
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m", tools=[slow], observers=[rec])
    async with AgentSession(loop) as session:
        pending = await session.send("start")
        await started.wait()
        assert session.interrupt()
        with pytest.raises(Interrupted):
            await pending
        assert not session.interrupt()  # nothing running now
        result = await (await session.send("next"))
        assert result.answer == "second"
        history = session.history()
    assert rec.of("on_run_end")[0].status == "interrupted"
    assert check_contract(rec.events) == []
    results = [m for m in history if isinstance(m, ToolResultMessage)]
    assert len(results) == 1
    assert results[0].is_error


async def test_ask_user_waits_for_reply_and_times_out() -> None:
    client = ScriptedClient(
        [
            Reply(tool_calls=(ToolCall("ask_user", {"question": "which city?"}, id="q1"),)),
            Reply(text="noted"),
            Reply(tool_calls=(ToolCall("ask_user", {"question": "are you there?"}, id="q2"),)),
            Reply(text="no answer"),
        ]
    )
    loop = AgentLoop(client, model="m")
    updates: list[SessionUpdate] = []
    async with AgentSession(loop, ask_user_timeout=0.05) as session:
        asked = asyncio.Event()

        async def watch() -> None:
            async for update in session.subscribe():
                updates.append(update)
                if update.kind == "ask_user" and update.call_id == "q1":
                    asked.set()
                    assert session.reply("q1", "Zürich")

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)  # the subscriber is registered before the first send
        session.ask_user_timeout = 30
        first = await (await session.send("plan a trip"))
        assert asked.is_set()
        session.ask_user_timeout = 0.05
        second = await (await session.send("hello?"))
    await watcher
    tools = [m for m in first.messages if isinstance(m, ToolResultMessage)]
    assert tools[0].content == "Zürich"
    late = [m for m in second.messages if isinstance(m, ToolResultMessage)][-1]
    assert late.is_error
    assert "did not answer" in late.content
    kinds = [u.kind for u in updates]
    assert kinds[-1] == "closed"
    assert "run_end" in kinds
    assert "message" in kinds


async def test_reset_discards_the_old_epoch_and_clears_the_store() -> None:
    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits forever."""
        started.set()
        await asyncio.Event().wait()
        return ""

    client = ScriptedClient([Reply(tool_calls=(ToolCall("wait", {}),)), Reply(text="fresh")])
    store = MemoryStore()
    rec = RecordingObserver()
    loop = AgentLoop(client, model="m", tools=[wait], observers=[rec])
    async with AgentSession(loop, store=store) as session:
        running = await session.send("old")
        queued = await session.send("also old")
        await started.wait()
        await session.reset()
        with pytest.raises(SessionClosed):
            await running
        with pytest.raises(SessionClosed):
            await queued
        assert session.epoch == 1
        assert session.history() == []
        result = await (await session.send("new"))
        assert result.answer == "fresh"
    assert [m.content for m in store.messages[session.id]] == ["new", "fresh"]
    reset = rec.of("on_session_reset")[0]
    assert (reset.epoch, reset.discarded, reset.run_id) == (1, 2, session.id)
    assert check_contract(rec.events) == []


async def _blocked_session(policy: str, rec: RecordingObserver, *observers: object):  # type: ignore[no-untyped-def]
    gate = asyncio.Event()
    started = asyncio.Event()

    @tool
    async def hold() -> str:
        """Holds the worker."""
        started.set()
        await gate.wait()
        return "released"

    client = ScriptedClient(
        lambda request: (
            Reply(text="ok")
            if request.messages[-1].role == "tool"
            else Reply(tool_calls=(ToolCall("hold", {}),))
        )
    )
    loop = AgentLoop(client, model="m", tools=[hold], observers=[rec, *observers])  # type: ignore[list-item]
    session = AgentSession(loop, queue_size=2, queue_policy=policy)  # type: ignore[arg-type]
    await session.start()
    first = await session.send("1")
    await started.wait()  # the worker holds "1"; the inbox is empty
    return session, gate, first


async def test_reject_policy_refuses_when_full_with_events_and_a_counter(
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    rec = RecordingObserver()
    session, gate, first = await _blocked_session("reject", rec, MetricsObserver(meter_provider))
    queued = [await session.send("2"), await session.send("3")]
    with pytest.raises(QueueFull):
        await session.send("4")
    with pytest.raises(QueueFull):
        await session.send("5")
    gate.set()
    for future in (first, *queued):
        assert (await future).ok
    await session.close()
    outcomes = [c.outcome for c in rec.of("on_backpressure")]
    assert outcomes == ["saturated", "rejected", "rejected"]
    assert check_contract(rec.events) == []
    counts = {
        p.attributes["loopobs.queue.outcome"]: p.value
        for p in metric_points(metric_reader)["loopobs.session.queue.events"]
    }
    assert counts == {"saturated": 1, "rejected": 2}


async def test_drop_oldest_policy_discards_the_oldest_queued_message() -> None:
    rec = RecordingObserver()
    session, gate, first = await _blocked_session("drop_oldest", rec)
    oldest = await session.send("2")
    kept = [await session.send("3"), await session.send("4")]
    with pytest.raises(SessionClosed):
        await oldest
    gate.set()
    assert (await first).ok
    for future in kept:
        assert (await future).ok
    await session.close()
    assert [c.outcome for c in rec.of("on_backpressure")] == ["saturated", "dropped"]
    users = [m.content for m in session.history() if isinstance(m, UserMessage)]
    assert users == ["1", "3", "4"]


async def test_block_policy_waits_for_room() -> None:
    rec = RecordingObserver()
    session, gate, first = await _blocked_session("block", rec)
    queued = [await session.send("2"), await session.send("3")]
    waiting = asyncio.create_task(session.send("4"))
    await asyncio.sleep(0)
    assert not waiting.done()  # the inbox is full: send waits
    gate.set()
    fourth = await waiting
    for future in (first, *queued, fourth):
        assert (await future).ok
    await session.close()
    assert [c.outcome for c in rec.of("on_backpressure")] == ["saturated"]


async def test_close_interrupts_persists_and_refuses_more(tmp_path: Path) -> None:
    started = asyncio.Event()

    @tool
    async def wait() -> str:
        """Waits forever."""
        started.set()
        await asyncio.Event().wait()
        return ""

    client = ScriptedClient([Reply(tool_calls=(ToolCall("wait", {}),))])
    loop = AgentLoop(client, model="m", tools=[wait])
    session = await AgentSession(loop, store=FileStore(tmp_path)).start()
    running = await session.send("work")
    await started.wait()
    await session.close()
    with pytest.raises(SessionClosed):
        await running
    with pytest.raises(SessionClosed):
        await session.send("late")
    lines = (tmp_path / f"{session.id}.jsonl").read_text().splitlines()
    assert len(lines) == 3  # user, assistant with the call, the interrupted call's result


def test_threads_building_the_first_sessions_share_one_ask_user_tool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tool is built once however many threads ask first: a session refuses another."""
    import threading

    from loopobs.sessions import session as session_module

    monkeypatch.setattr(session_module, "_ask_user_built", [])
    start = threading.Barrier(4)
    tools: list[object] = []

    def first_use() -> None:
        start.wait()
        tools.append(session_module._ask_user_tool())

    threads = [threading.Thread(target=first_use) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tools) == 4
    assert all(tool is tools[0] for tool in tools)
