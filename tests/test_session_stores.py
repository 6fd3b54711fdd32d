"""AgentSession and its stores when the store fails, hangs or finds a torn file.

Every failure ends what needed the store with a clear error (``StoreFailed``,
``StoreCorrupt`` naming the file and line) and the session goes on serving;
nothing hangs (store calls are bounded by ``store_timeout``) and nothing
buffered is lost.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import TypeVar

import pytest

from loopobs import (
    AgentLoop,
    AgentSession,
    AssistantMessage,
    FileStore,
    MemoryStore,
    Message,
    StoreCorrupt,
    StoreFailed,
    UserMessage,
)
from loopobs.sessions import stores
from tests.test_session import echo_client

HANG_GUARD_S = 30.0
_T = TypeVar("_T")


class FailingStore(MemoryStore):
    """A memory store whose flush (or close) raises while ``failing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.failing = False

    async def flush(self) -> None:
        if self.failing:
            raise OSError("No space left on device")

    async def close(self) -> None:
        if self.failing:
            raise OSError("No space left on device")


async def guarded(awaitable: Awaitable[_T]) -> _T:
    """``awaitable``, under a hang guard far longer than any deadline the tests check."""
    return await asyncio.wait_for(awaitable, HANG_GUARD_S)


async def test_a_failed_flush_fails_that_send_and_the_session_keeps_serving() -> None:
    store = FailingStore()
    async with AgentSession(AgentLoop(echo_client(), model="m"), store=store) as session:
        store.failing = True
        with pytest.raises(StoreFailed, match="flush failed: OSError: No space") as caught:
            await guarded(await session.send("first"))
        assert caught.value.operation == "flush"
        assert caught.value.result.answer == "FIRST"  # the run happened; saving it failed
        store.failing = False
        second = await guarded(await session.send("second"))
        assert second.answer == "SECOND"  # the worker survived the failure
    users = [m.content for m in store.messages[session.id] if isinstance(m, UserMessage)]
    assert users == ["first", "second"]  # appended once each


async def test_a_hung_store_fails_the_send_at_store_timeout() -> None:
    class HungStore(MemoryStore):
        async def flush(self) -> None:
            await asyncio.Event().wait()

    session = AgentSession(
        AgentLoop(echo_client(), model="m"), store=HungStore(), store_timeout=0.2
    )
    await session.start()
    with pytest.raises(StoreFailed, match=r"flush did not finish within 0\.2s"):
        await guarded(await session.send("hello"))
    with pytest.raises(StoreFailed):
        await guarded(session.close())


async def test_close_with_a_failing_store_still_delivers_closed() -> None:
    store = FailingStore()
    session = AgentSession(AgentLoop(echo_client(), model="m"), store=store)
    await session.start()
    updates: list[str] = []

    async def first_update() -> None:
        # An async generator registers its queue on the first __anext__.
        async for update in session.subscribe():
            updates.append(update.kind)

    follower = asyncio.create_task(first_update())
    await asyncio.sleep(0)  # the subscriber's queue is registered
    await guarded(await session.send("hi"))
    store.failing = True
    with pytest.raises(StoreFailed):
        await guarded(session.close())
    await guarded(follower)
    assert updates[-1] == "closed"


async def test_file_store_keeps_buffered_messages_when_a_write_fails(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    sid = uuid.uuid4()
    messages: list[Message] = [UserMessage(content="keep me"), AssistantMessage(content="KEEP ME")]
    await store.append(sid, messages)
    store.path(sid).mkdir()  # the file cannot be opened: the write fails
    with pytest.raises(IsADirectoryError):
        await store.flush()
    store.path(sid).rmdir()
    await store.append(sid, [UserMessage(content="later")])
    await store.flush()
    assert [m.content for m in await FileStore(tmp_path).load(sid)] == [
        "keep me",
        "KEEP ME",
        "later",
    ]


async def test_a_failed_fsync_cuts_its_batch_back_so_a_retry_writes_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileStore(tmp_path)
    sid = uuid.uuid4()
    await store.append(sid, [UserMessage(content="one")])
    await store.flush()
    await store.append(sid, [UserMessage(content="two")])

    def broken_fsync(fd: int) -> None:
        raise OSError("I/O error")

    with monkeypatch.context() as patch:
        patch.setattr("os.fsync", broken_fsync)
        with pytest.raises(OSError, match="I/O error"):
            await store.flush()
    assert store.path(sid).read_text().count("\n") == 1  # the failed batch was cut back
    await store.flush()
    assert [m.content for m in await FileStore(tmp_path).load(sid)] == ["one", "two"]


def _whole(text: str) -> str:
    return stores._message_adapter().dump_json(UserMessage(content=text)).decode()


async def test_a_torn_last_line_loads_what_is_whole_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sid = uuid.uuid4()
    path = tmp_path / f"{sid}.jsonl"
    path.write_text(_whole("one") + "\n" + _whole("two") + "\n" + _whole("three")[:15])
    store = FileStore(tmp_path)
    with caplog.at_level(logging.WARNING, logger="loopobs.sessions"):
        loaded = await store.load(sid)
    assert [m.content for m in loaded] == ["one", "two"]
    assert store.torn == {sid: 3}
    assert f"{path}:3: the last line is torn" in caplog.text
    # The next write cuts the torn tail off: the file is whole again.
    await store.append(sid, [UserMessage(content="four")])
    await store.flush()
    again = FileStore(tmp_path)
    assert [m.content for m in await again.load(sid)] == ["one", "two", "four"]
    assert again.torn == {}


async def test_a_whole_last_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    sid = uuid.uuid4()
    (tmp_path / f"{sid}.jsonl").write_text(_whole("one") + "\n" + _whole("two"))
    store = FileStore(tmp_path)
    assert [m.content for m in await store.load(sid)] == ["one", "two"]
    await store.append(sid, [UserMessage(content="three")])
    await store.flush()
    assert [m.content for m in await FileStore(tmp_path).load(sid)] == ["one", "two", "three"]


async def test_a_malformed_line_inside_the_file_names_file_and_line(tmp_path: Path) -> None:
    sid = uuid.uuid4()
    path = tmp_path / f"{sid}.jsonl"
    path.write_text(_whole("one") + '\n{"role": 5}\n' + _whole("three") + "\n")
    with pytest.raises(StoreCorrupt, match=rf"{path}:2: not a stored message") as caught:
        await FileStore(tmp_path).load(sid)
    assert (caught.value.path, caught.value.line) == (str(path), 2)
    session = AgentSession(
        AgentLoop(echo_client(), model="m"), store=FileStore(tmp_path), session_id=sid
    )
    with pytest.raises(StoreCorrupt):
        await session.start()


@pytest.mark.parametrize("text", [123, None, b"bytes", ["a list"]])
async def test_send_and_inject_refuse_what_is_not_text(text: object) -> None:
    store = MemoryStore()
    async with AgentSession(AgentLoop(echo_client(), model="m"), store=store) as session:
        with pytest.raises(TypeError, match="must be text"):
            await session.send(text)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="must be text"):
            session.inject(text)  # type: ignore[arg-type]
        assert (await guarded(await session.send("fine"))).answer == "FINE"
    assert [m.content for m in store.messages[session.id]] == ["fine", "FINE"]


async def test_reset_while_an_append_is_in_flight_does_not_bring_the_old_messages_back() -> None:
    class SlowStore(MemoryStore):
        def __init__(self) -> None:
            super().__init__()
            self.entered = asyncio.Event()
            self.release = asyncio.Event()

        async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
            self.entered.set()
            await self.release.wait()
            await super().append(session_id, messages)

    store = SlowStore()
    async with AgentSession(AgentLoop(echo_client(), model="m"), store=store) as session:
        reply = await session.send("old conversation")
        await guarded(store.entered.wait())  # the run ended; its append is in flight
        resetting = asyncio.create_task(session.reset())
        for _ in range(10):  # let the reset get as far as it can
            await asyncio.sleep(0)
        store.release.set()
        await guarded(resetting)
        await guarded(asyncio.gather(reply, return_exceptions=True))
        assert session.history() == []
    assert store.messages.get(session.id, []) == []
    reloaded = AgentSession(AgentLoop(echo_client(), model="m"), store=store, session_id=session.id)
    await reloaded.start()
    assert reloaded.history() == []
    await reloaded.close()


async def test_a_last_line_torn_inside_a_character_is_torn_too(tmp_path: Path) -> None:
    sid = uuid.uuid4()
    whole = _whole("one") + "\n"
    cut = stores._message_adapter().dump_json(UserMessage(content="☕☕☕")).split("☕".encode())[0]
    (tmp_path / f"{sid}.jsonl").write_bytes(whole.encode() + cut + "☕".encode()[:2])
    store = FileStore(tmp_path)
    assert [m.content for m in await store.load(sid)] == ["one"]
    assert store.torn == {sid: 2}


async def test_a_session_whose_run_failed_keeps_that_error_when_the_store_fails_too() -> None:
    from loopobs import Interrupted, tool
    from loopobs.llm.scripted import Reply, ScriptedClient, ToolCall

    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Waits."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    store = FailingStore()
    loop = AgentLoop(
        ScriptedClient([Reply(tool_calls=(ToolCall("slow", {}),))]), model="m", tools=[slow]
    )
    async with AgentSession(loop, store=store) as session:
        store.failing = True
        reply = await session.send("go")
        await guarded(started.wait())
        session.interrupt()
        with pytest.raises(Interrupted):
            await guarded(reply)
        store.failing = False


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_store_timeout_must_be_a_positive_finite_number(bad: float) -> None:
    with pytest.raises(ValueError, match="store_timeout"):
        AgentSession(AgentLoop(echo_client(), model="m"), store_timeout=bad)
