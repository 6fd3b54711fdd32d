"""Resuming is safe against tampered checkpoints and happens at most once per checkpoint."""

from __future__ import annotations

import asyncio
import datetime as dt
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    Checkpoint,
    CheckpointAlreadyResumed,
    Conversation,
    InvalidResumeInput,
    RunStatus,
    SessionBusy,
    Sleep,
    Suspend,
    tool,
)
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver

UTC = dt.timezone.utc
WAKE = dt.datetime(2030, 1, 1, tzinfo=UTC)
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
payments: list[int] = []


@tool
def approve(amount: int) -> Suspend:
    """Ask a person."""
    return Suspend("approve?", SCHEMA)


@tool
def pay(amount: int) -> str:
    """A side effect that must happen once."""
    payments.append(amount)
    return "paid"


@tool
def wait() -> Sleep:
    """Sleep until WAKE."""
    return Sleep(WAKE)


@pytest.fixture(autouse=True)
def _no_payments() -> Iterator[None]:
    payments.clear()
    yield
    payments.clear()


def paying_loop(rec: RecordingObserver | None = None, **kwargs: Any) -> AgentLoop:
    """Each resume: the model pays once, then answers."""

    def script(request: Any) -> Reply:
        from loopobs import ToolResultMessage

        last = request.messages[-1]
        if isinstance(last, ToolResultMessage) and last.name == "approve":
            return Reply(tool_calls=(ToolCall("pay", {"amount": 40}),))
        if isinstance(last, ToolResultMessage):
            return Reply(text="done")
        return Reply(tool_calls=(ToolCall("approve", {"amount": 40}, id="p1"),))

    return AgentLoop(
        ScriptedClient(script),
        model="m1",
        tools=[approve, pay, wait],
        detectors=[],
        observers=[rec] if rec else [],
        **kwargs,
    )


async def parked(loop: AgentLoop) -> Checkpoint:
    result = await loop.run("pay 40")
    assert result.checkpoint is not None
    return result.checkpoint


# -- tampered checkpoints ------------------------------------------------------------------
def tamper(cp: Checkpoint, **update: Any) -> Checkpoint:
    """A checkpoint edited in its JSON form, as an attacker or a bug would: it still loads."""
    data = {**cp.model_dump(mode="json"), **update}
    return Checkpoint.model_validate(data)


@pytest.mark.parametrize(
    "change",
    [
        "parked id outside the wave",
        "rerun id outside the wave",
        "results of another wave",
        "no wave at all",
        "sleep without wake_at",
        "naive wake_at",
        "schema not a schema",
        "schema with a bad pattern",
    ],
)
async def test_a_tampered_checkpoint_is_invalid_resume_input(change: str) -> None:
    """Each tampering is refused as InvalidResumeInput, and nothing runs or changes."""
    rec = RecordingObserver()
    loop = paying_loop(rec)
    cp = await parked(loop)
    parked_call = cp.parked.model_dump()
    cases: dict[str, dict[str, Any]] = {
        "parked id outside the wave": {"parked": {**parked_call, "id": "zz"}},
        "rerun id outside the wave": {"rerun": [{**parked_call, "id": "zz"}]},
        "results of another wave": {"results": [None, None, None]},
        "no wave at all": {"messages": []},
        "sleep without wake_at": {"kind": "sleep", "wake_at": None},
        "naive wake_at": {"kind": "sleep", "wake_at": "2030-01-01T00:00:00"},
        "schema not a schema": {"input_schema": {"type": 5}},
        "schema with a bad pattern": {"input_schema": {"propertyNames": {"pattern": "("}}},
    }
    tampered = tamper(cp, **cases[change])
    events = len(rec.events)
    with pytest.raises(InvalidResumeInput):
        await loop.resume(tampered, {"ok": True}, now=WAKE)
    assert len(rec.events) == events
    assert payments == []
    # the untampered checkpoint is not used up by the refusal
    assert (await loop.resume(cp, {"ok": True})).status is RunStatus.COMPLETED


async def test_a_remote_ref_is_never_fetched() -> None:
    """A schema pointing at a URL is refused without any request to it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "object"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        loop = paying_loop()
        cp = await parked(loop)
        url = f"http://127.0.0.1:{server.server_address[1]}/schema.json"
        with pytest.raises(InvalidResumeInput):
            await loop.resume(tamper(cp, input_schema={"$ref": url}), {"ok": True})
        assert hits == []
    finally:
        server.shutdown()
        server.server_close()


async def test_a_naive_now_is_refused_clearly() -> None:
    """resume(now=<naive>) is InvalidResumeInput naming ``now``, not a TypeError."""
    loop = AgentLoop(
        ScriptedClient([Reply(tool_calls=(ToolCall("wait"),))]),
        model="m1",
        tools=[wait],
        detectors=[],
    )
    cp = await parked(loop)
    with pytest.raises(InvalidResumeInput, match="now"):
        await loop.resume(cp, now=dt.datetime(2031, 1, 1))


# -- at most once ----------------------------------------------------------------------------
async def test_a_checkpoint_resumes_once() -> None:
    """The second resume of the same checkpoint (or of a copy read from JSON) is refused."""
    loop = paying_loop()
    cp = await parked(loop)
    first = await loop.resume(cp, {"ok": True})
    assert first.status is RunStatus.COMPLETED
    with pytest.raises(CheckpointAlreadyResumed) as info:
        await loop.resume(cp, {"ok": True})
    assert info.value.run_id == str(cp.run_id)
    copy = Checkpoint.model_validate_json(cp.model_dump_json())
    with pytest.raises(CheckpointAlreadyResumed):
        await loop.resume(copy, {"ok": True})
    # another loop in the same process refuses it too
    with pytest.raises(CheckpointAlreadyResumed):
        await paying_loop().resume(copy, {"ok": True})
    assert payments == [40]


async def test_concurrent_resumes_run_one() -> None:
    """Three resumes at once, each on its own session copy: one runs, two are refused."""
    loop = paying_loop()
    cp = await parked(loop)
    outcomes = await asyncio.gather(
        *(loop.resume(cp, {"ok": True}) for _ in range(3)), return_exceptions=True
    )
    completed = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, CheckpointAlreadyResumed)]
    assert len(completed) == 1
    assert len(refused) == 2
    assert payments == [40]


async def test_refusals_before_the_run_do_not_use_the_checkpoint() -> None:
    """Invalid input, an early wake or a busy session leave the checkpoint resumable."""
    loop = paying_loop()
    cp = await parked(loop)
    with pytest.raises(InvalidResumeInput):
        await loop.resume(cp, {"ok": "yes"})
    session = Conversation(id=cp.session_id, messages=list(cp.messages), turn=cp.turn)
    session.busy = True
    with pytest.raises(SessionBusy):
        await loop.resume(cp, {"ok": True}, session=session)
    session.busy = False
    assert (await loop.resume(cp, {"ok": True}, session=session)).ok


async def test_a_claim_hook_lets_a_shared_store_decide() -> None:
    """The hook is asked once per resume; False refuses (nothing runs); async hooks work."""
    asked: list[Checkpoint] = []
    store: set[str] = {"taken-elsewhere"}

    async def claim(checkpoint: Checkpoint) -> bool:
        asked.append(checkpoint)
        key = str(checkpoint.run_id)
        if key in store:
            return False
        store.add(key)
        return True

    worker_a = paying_loop(claim_checkpoint=claim)
    cp = await parked(worker_a)
    store.add(str(cp.run_id))  # another process claimed it first
    with pytest.raises(CheckpointAlreadyResumed):
        await worker_a.resume(cp, {"ok": True})
    assert payments == []
    assert [c.run_id for c in asked] == [cp.run_id]

    cp2 = await parked(worker_a)
    assert (await worker_a.resume(cp2, {"ok": True})).ok
    assert str(cp2.run_id) in store
    assert payments == [40]


async def test_a_failing_claim_hook_leaves_the_checkpoint_resumable() -> None:
    """A store that cannot answer (raises) refuses this resume but does not use it up."""
    calls = 0

    def flaky(checkpoint: Checkpoint) -> bool:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("store down")
        return True

    loop = paying_loop(claim_checkpoint=flaky)
    cp = await parked(loop)
    with pytest.raises(ConnectionError):
        await loop.resume(cp, {"ok": True})
    assert (await loop.resume(cp, {"ok": True})).ok
    assert payments == [40]
