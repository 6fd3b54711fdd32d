"""AgentLoop: the order of events in a run, RunResult, sessions, and observer plumbing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from loopobs import (
    AgentLoop,
    Budget,
    Conversation,
    LoopObserver,
    RunEndContext,
    RunStatus,
    SessionBusy,
    ToolPreContext,
)
from loopobs.contract.events import CONTEXT_TYPES, RunStartContext, TurnStartContext
from loopobs.contract.model import UserMessage
from loopobs.cost import spending
from loopobs.cost.shared import InProcessLedger, SharedBudget
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.loop import (
    compaction,
    context_providers,
    driver,
    model_call,
    parking,
    shared_spend,
    tool_phase,
)
from loopobs.sessions import session
from loopobs.testing import RecordingObserver, assert_contract, check_contract
from tests._loop_support import Raising, checked, make_loop, names, scripted_usage, search, u

TOOL_TURN = Reply(
    text="let me look",
    thinking="hmm",
    tool_calls=(
        ToolCall("search", {"query": "a"}, id="c1"),
        ToolCall("add", {"a": 1, "b": 2}, id="c2"),
    ),
    usage=u(10, 5),
)
ANSWER = Reply(text="the answer is 3", usage=u(20, 7))


async def test_event_order_of_a_tool_using_run() -> None:
    """A run with one tool turn then an answer emits the documented sequence."""
    loop, rec, _ = make_loop([TOOL_TURN, ANSWER])
    result = await loop.run("question")
    events = checked(rec, result)
    assert names(events) == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_tool_call_received",
        "on_tool_call_received",
        "on_tool_pre",
        "on_tool_pre",
        "on_tool_post",
        "on_tool_post",
        "on_turn_end",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    hooks = [h for h, _ in events]
    first_delta = hooks.index("on_thinking_delta")
    assert hooks.index("on_stream_start") < first_delta < hooks.index("on_stream_success")
    assert "".join(c.delta for c in rec.of("on_text_delta", result.run_id)) == (
        "let me look" + "the answer is 3"
    )


async def test_run_result_fields() -> None:
    """RunResult carries status, answer, messages, turns, summed usage, session and run id."""
    loop, rec, _ = make_loop([TOOL_TURN, ANSWER], system_prompt="be brief")
    result = await loop.run("question")
    assert result.status is RunStatus.COMPLETED
    assert result.ok
    assert result.answer == "the answer is 3"
    assert result.turns == 2
    assert result.usage == scripted_usage([TOOL_TURN, ANSWER])
    assert result.error is None
    assert result.checkpoint is None
    roles = [m.role for m in result.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant"]
    tool_results = [m for m in result.messages if m.role == "tool"]
    assert [m.content for m in tool_results] == ["results for a (limit 3)", "3"]
    start: RunStartContext = rec.of("on_run_start")[0]
    end: RunEndContext = rec.of("on_run_end")[0]
    assert start.run_id == end.run_id == result.run_id
    assert start.session_id == result.session.id
    assert start.instructions == "be brief"
    assert (start.agent, start.model, start.resumed_from) == ("agent", "m1", None)
    assert (end.success, end.status, end.total_turns) == (True, "completed", 2)
    assert (end.input_tokens, end.output_tokens) == (30, 12)
    turn_ends = rec.of("on_turn_end")
    assert [(t.turn, t.input_tokens, t.output_tokens) for t in turn_ends] == [
        (0, 10, 5),
        (1, 20, 7),
    ]
    responses = rec.of("on_response")
    assert [r.tool_calls for r in responses] == [2, 0]


async def test_turn_numbers_keep_counting_across_runs_of_a_session() -> None:
    """A follow-up run on the same session continues the turn numbers and the messages."""
    loop, rec, client = make_loop([TOOL_TURN, ANSWER, Reply(text="again", usage=u(1, 1))])
    first = await loop.run("question")
    second = await loop.run("follow-up", session=first.session)
    assert second.session is first.session
    assert second.run_id != first.run_id
    assert [t.turn for t in rec.of("on_turn_start", second.run_id)] == [2]
    assert second.turns == 1
    assert second.usage == u(1, 1)
    assert client.requests[-1].messages[-1] == UserMessage(content="follow-up")
    assert len(client.requests[-1].messages) == len(first.messages) + 1
    query: TurnStartContext = rec.of("on_turn_start", second.run_id)[0]
    assert query.query == "follow-up"
    assert_contract(rec.events)


async def test_run_accepts_a_list_of_messages() -> None:
    """run() takes messages to append instead of a question."""
    loop, _, client = make_loop([ANSWER])
    result = await loop.run([UserMessage(content="one"), UserMessage(content="two")])
    assert result.ok
    assert [m.content for m in client.requests[0].messages] == ["one", "two"]


async def test_a_busy_session_refuses_a_second_run() -> None:
    """A second concurrent run on the same session raises SessionBusy; the first completes."""
    client = ScriptedClient([ANSWER], latency_s=0.01)
    loop = AgentLoop(client, model="m1", detectors=[])
    session = Conversation()
    first = asyncio.create_task(loop.run("a", session=session))
    await asyncio.sleep(0)
    with pytest.raises(SessionBusy, match="already has a run in progress"):
        await loop.run("b", session=session)
    assert (await first).ok
    assert [m.content for m in session.messages] == ["a", "the answer is 3"]
    assert not session.busy


async def test_max_turns_ends_the_run() -> None:
    """A model that never stops calling tools ends the run with status max_turns."""
    call = Reply(tool_calls=(ToolCall("search", {"query": "x"}),), usage=u(1, 1))
    loop, rec, client = make_loop([call] * 5, max_turns=3)
    result = await loop.run("q")
    assert result.status is RunStatus.MAX_TURNS
    assert result.turns == 3
    assert "3 turns" in str(result.error)
    assert client.remaining == 2
    assert result.usage == u(3, 3)
    end: RunEndContext = rec.of("on_run_end")[0]
    assert (end.status, end.success, end.total_turns) == ("max_turns", False, 3)
    assert_contract(rec.events)


def test_run_sync_runs_without_an_event_loop() -> None:
    """run_sync() drives a run to completion from synchronous code."""
    loop, rec, _ = make_loop([TOOL_TURN, ANSWER])
    result = loop.run_sync("question")
    assert result.ok
    assert result.answer == "the answer is 3"
    assert_contract(rec.events)


async def test_run_sync_refuses_inside_a_running_loop() -> None:
    """run_sync() inside an event loop raises rather than deadlocking."""
    loop, _, _ = make_loop([ANSWER])
    with pytest.raises(RuntimeError, match="await run"):
        loop.run_sync("question")


async def test_attach_and_detach() -> None:
    """attach() adds an observer for later events; detach() stops them."""
    loop, _, _ = make_loop([ANSWER, ANSWER])
    late = RecordingObserver()
    loop.attach(late)
    assert late in loop.observers
    first = await loop.run("q")
    loop.detach(late)
    await loop.run("q")
    assert late.run_ids() == [first.run_id]


async def test_switch_model_fires_at_the_next_model_call() -> None:
    """switch_model() changes the model of the next call and fires on_model_switched there."""
    loop, rec, client = make_loop([TOOL_TURN, ANSWER])

    class Switcher(LoopObserver):
        def on_tool_post(self, ctx: Any) -> None:
            loop.switch_model("m3")

    loop.attach(Switcher())
    result = await loop.run("q")
    assert [r.model for r in client.requests] == ["m1", "m3"]
    events = names(checked(rec, result))
    switch = events.index("on_model_switched")
    assert events[switch - 1] == "on_turn_end"
    assert events[switch + 1] == "on_turn_start"
    ctx = rec.of("on_model_switched")[0]
    assert (ctx.from_model, ctx.to_model) == ("m1", "m3")
    assert [s.model for s in rec.of("on_stream_success")] == ["m1", "m3"]


async def test_contexts_are_built_only_for_hooks_someone_listens_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With an observer of on_run_end only, no other context class is ever constructed."""
    built: list[str] = []
    patched: set[str] = set()
    for hook, cls in CONTEXT_TYPES.items():
        name = cls.__name__

        def counting(*args: Any, _cls: Any = cls, _hook: str = hook, **kwargs: Any) -> Any:
            built.append(_hook)
            return _cls(*args, **kwargs)

        for module in (
            compaction,
            driver,
            model_call,
            parking,
            tool_phase,
            context_providers,
            session,
            spending,
            shared_spend,
        ):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, counting)
                patched.add(hook)
    # every context the loop emits itself is built in one of the phase modules (a shared
    # budget's refusal too) or by its spending (budgets, the shared ledger's steps); the
    # detectors build two others
    assert len(patched) == len(CONTEXT_TYPES) - 2

    class EndOnly(LoopObserver):
        def __init__(self) -> None:
            self.ends: list[RunEndContext] = []

        def on_run_end(self, ctx: RunEndContext) -> None:
            self.ends.append(ctx)

    end_only = EndOnly()
    client = ScriptedClient([TOOL_TURN, ANSWER])

    async def provider(query: str) -> str:
        return "context"

    loop = AgentLoop(
        client,
        model="m1",
        tools=[search, _add()],
        observers=[end_only],
        detectors=[],
        context_providers=[provider],
        # m1 has no price: a USD limit it meets (here and in the shared ledger) and every
        # ledger step would be events, had anyone listened.
        budget=Budget(usd=100.0),
        shared_budget=SharedBudget(InProcessLedger(), session=Budget(usd=100.0)),
    )
    result = await loop.run("q")
    assert result.ok
    assert built == ["on_run_end"]
    assert [e.status for e in end_only.ends] == ["completed"]
    assert loop.observers.listening == frozenset({"on_run_end"})


def _add() -> Any:
    from tests._loop_support import add

    return add


async def test_an_observer_raising_in_every_hook_never_breaks_a_run() -> None:
    """A run with an always-raising observer gives the same result and events as without it."""
    steps = [TOOL_TURN, ANSWER]
    plain_loop, plain_rec, _ = make_loop(list(steps))
    plain = await plain_loop.run("question")
    loop, rec, _ = make_loop(list(steps))
    raising = Raising()
    loop.observers.add(raising)
    loop.observers.remove(rec)
    loop.observers.add(rec)  # after the raising one: it still gets every event
    result = await loop.run("question")
    assert (result.status, result.answer, result.turns, result.usage) == (
        plain.status,
        plain.answer,
        plain.turns,
        plain.usage,
    )
    assert result.messages == plain.messages
    assert names(rec.events) == names(plain_rec.events)
    assert loop.observers.failure_count == len(rec.events)


def test_check_contract_accepts_interleaved_runs_and_reports_violations() -> None:
    """check_contract passes a valid interleaving and names each kind of violation."""
    a, b = uuid.uuid4(), uuid.uuid4()
    sid = uuid.uuid4()
    good = [
        ("on_run_start", RunStartContext(run_id=a, time_ns=1, session_id=sid)),
        ("on_run_start", RunStartContext(run_id=b, time_ns=1, session_id=sid)),
        ("on_turn_start", TurnStartContext(run_id=a, time_ns=2, turn=0)),
        ("on_tool_pre", ToolPreContext(run_id=a, time_ns=3, turn=0, tool="t", tool_call_id="x")),
        ("on_run_end", RunEndContext(run_id=b, time_ns=4, success=True)),
    ]
    assert check_contract(good) == [
        f"run {a}: no on_run_end",
        f"run {a}: turn 0 has no on_turn_end",
    ]
    with pytest.raises(AssertionError, match="2 event contract violation"):
        assert_contract(good)
    late_pre = (
        "on_tool_pre",
        ToolPreContext(run_id=b, time_ns=5, turn=0, tool="t", tool_call_id="y"),
    )
    problems = check_contract([*good, late_pre])
    assert any("after the run's on_run_end" in p for p in problems)
    from loopobs.contract.events import TurnEndContext

    unpaired = [
        *good[:1],
        good[2],
        good[3],
        ("on_turn_end", TurnEndContext(run_id=a, time_ns=6, turn=0, success=True)),
        ("on_run_end", RunEndContext(run_id=a, time_ns=7, success=True)),
    ]
    assert check_contract(unpaired) == [
        f"event 3 (on_turn_end) of run {a}: tool call 'x' (t) attempt 0 has no on_tool_post"
    ]
