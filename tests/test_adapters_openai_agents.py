"""The OpenAI Agents SDK adapter on real ``Runner`` runs, driven by an offline ``Model``."""

from __future__ import annotations

import asyncio
import importlib
import logging
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunContextWrapper,
    RunHooks,
    SQLiteSession,
    TResponseInputItem,
    function_tool,
    input_guardrail,
    set_trace_processors,
    set_tracing_disabled,
)
from agents.exceptions import AgentsException
from agents.exceptions import MaxTurnsExceeded as AgentsMaxTurns
from openai import AsyncOpenAI

from loopobs import (
    Budget,
    BudgetGuard,
    LoopDetected,
    LoopObserver,
    ModelRates,
    RepetitionDetector,
    ToolExecutionError,
    Usage,
)
from loopobs import tool as loopobs_tool
from loopobs.adapters import RunStopped
from loopobs.adapters.openai_agents import AgentsAdapter, AgentsRunStopped
from loopobs.contract.events import EventContext
from loopobs.llm.scripted import Reply, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._adapter_checks import Stack, agent_loop_sums
from tests._agents_model import (
    CACHED_TOKENS,
    INPUT_TOKENS,
    OUTPUT_TOKENS,
    REASONING_TOKENS,
    ScriptModel,
    message,
    tool_call,
)
from tests._openai_server import Reply as ServedReply
from tests._openai_server import ScriptedServer


@pytest.fixture(autouse=True)
def _sdk_tracing_exports_nothing() -> Iterator[None]:
    """SDK tracing on (as by default) but with no processor: it would export to OpenAI."""
    set_trace_processors([])
    set_tracing_disabled(False)
    yield
    set_tracing_disabled(False)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def _search(q: str) -> str:
    """Search the web."""
    return f"results for {q}"


search = function_tool(_search, name_override="search")


@function_tool
def broken(q: str) -> str:
    """A tool that always raises."""
    raise ValueError(f"cannot handle {q}")


def _agent(model: ScriptModel, **kwargs: Any) -> Agent[Any]:
    return Agent(name="researcher", model=model, tools=[search], **kwargs)


def _looping_model(calls: int) -> ScriptModel:
    return ScriptModel([[tool_call("search", {"q": "same"}, f"c{i}")] for i in range(calls)])


async def test_a_run_is_one_trace_with_the_models_usage_and_equal_metrics(
    stack: Stack, tmp_path: Path
) -> None:
    """Two tool calls then an answer: one invoke_agent trace, the SDK's usage, OTel = Prometheus,
    and the metric totals AgentLoop gives for the same script."""
    model = ScriptModel(
        [
            [tool_call("search", {"q": "paris"}, "c1"), tool_call("search", {"q": "rome"}, "c2")],
            [message("Paris and Rome are sunny.")],
        ]
    )
    adapter = AgentsAdapter(stack.observers)
    result = await adapter.run(_agent(model), "Weather in Paris and Rome?")

    assert result.final_output == "Paris and Rome are sunny."
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert rec.hooks() == [
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
    sdk_usage = result.context_wrapper.usage
    (end,) = rec.of("on_run_end")
    assert (end.status, end.input_tokens, end.output_tokens) == (
        "completed",
        sdk_usage.input_tokens,
        sdk_usage.output_tokens,
    )
    assert end.input_tokens == 2 * INPUT_TOKENS
    for ok in rec.of("on_stream_success"):
        assert (
            ok.model,
            ok.input_tokens,
            ok.output_tokens,
            ok.cache_read_input_tokens,
            ok.reasoning_output_tokens,
        ) == ("script-1", INPUT_TOKENS, OUTPUT_TOKENS, CACHED_TOKENS, REASONING_TOKENS)
    received = rec.of("on_tool_call_received")
    assert [(r.tool_call_id, dict(r.input)) for r in received] == [
        ("c1", {"q": "paris"}),
        ("c2", {"q": "rome"}),
    ]
    posts = {p.tool_call_id: p for p in rec.of("on_tool_post")}
    assert posts["c1"].result == "results for paris"
    assert not posts["c1"].is_error
    assert rec.of("on_response")[-1].text == "Paris and Rome are sunny."

    stack.check_run(
        usage=Usage(input_tokens=2 * INPUT_TOKENS, output_tokens=2 * OUTPUT_TOKENS),
        chats=2,
        tools=2,
    )
    stack.check_metrics_agree()
    assert stack.finished("invoke_agent")[0].name == "invoke_agent researcher"
    # the same script through AgentLoop: the same metric totals on both paths
    usage = Usage(
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        cache_read_input_tokens=CACHED_TOKENS,
        reasoning_output_tokens=REASONING_TOKENS,
    )
    script = [
        Reply(
            tool_calls=(
                ToolCall("search", {"q": "paris"}, "c1"),
                ToolCall("search", {"q": "rome"}, "c2"),
            ),
            usage=usage,
        ),
        Reply(text="Paris and Rome are sunny.", usage=usage),
    ]
    reference = await asyncio.to_thread(
        agent_loop_sums,
        tmp_path,
        script,
        [loopobs_tool(name="search")(_search)],
        "Weather in Paris and Rome?",
    )
    assert stack.metric_sums() == reference


async def test_a_handoff_is_a_tool_call_and_a_model_switch(stack: Stack) -> None:
    """The handoff call gets its pre/post pair; the new agent's model is a model switch."""
    billing = Agent(name="billing", model=ScriptModel([[message("Refunded.")]], model="script-2"))
    triage = Agent(
        name="triage",
        handoffs=[billing],
        model=ScriptModel([[tool_call("transfer_to_billing", {}, "h1")]]),
    )
    result = await AgentsAdapter(stack.observers).run(triage, "refund please")

    assert result.final_output == "Refunded."
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    (pre,) = rec.of("on_tool_pre")
    assert (pre.tool, pre.tool_call_id) == ("transfer_to_billing", "h1")
    (switch,) = rec.of("on_model_switched")
    assert (switch.from_model, switch.to_model) == ("script-1", "script-2")
    hooks = rec.hooks()
    at = hooks.index("on_model_switched")
    assert hooks[at - 1 : at + 2] == ["on_turn_end", "on_model_switched", "on_turn_start"]
    assert [s.model for s in rec.of("on_stream_start")] == ["script-1", "script-2"]
    assert rec.of("on_run_start")[0].agent == "triage"
    stack.check_run(
        usage=Usage(input_tokens=2 * INPUT_TOKENS, output_tokens=2 * OUTPUT_TOKENS),
        chats=2,
        tools=1,
    )
    assert [s.name for s in stack.finished("execute_tool")] == ["execute_tool transfer_to_billing"]


async def test_a_runaway_tool_loop_is_stopped_through_a_run_hook(stack: Stack) -> None:
    """stop: RunStopped leaves the SDK's next on_llm_start; no further model call is made."""
    model = _looping_model(50)
    adapter = AgentsAdapter(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with pytest.raises(RunStopped) as info:
        await adapter.run(_agent(model), "loop forever")

    assert isinstance(info.value, LoopDetected)
    assert re.search(r"search\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    assert model.calls == 5  # the sixth call never reached the model
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert [d.action for d in rec.of("on_loop_detected")] == ["warn", "stop"]
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("loop_detected", False)
    assert isinstance(end.error, RunStopped)
    stack.check_nothing_open()
    assert adapter.active_runs == 0


async def test_warn_leaves_the_run_alone(stack: Stack) -> None:
    """A warn-only detector reports the loop; the run goes on to its answer."""
    model = ScriptModel([*_looping_model(6).steps, [message("gave up searching")]])
    adapter = AgentsAdapter(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=0)]
    )
    result = await adapter.run(_agent(model), "loop a while")

    assert result.final_output == "gave up searching"
    rec = stack.recorder
    assert [d.action for d in rec.of("on_loop_detected")] == ["warn"]
    assert rec.of("on_run_end")[0].status == "completed"
    assert_contract(stack.recorder.events)


async def test_cancelling_a_run_closes_everything(stack: Stack) -> None:
    """A run cancelled inside a model call: stream failure, run cancelled, nothing left open."""
    entered = asyncio.Event()

    async def hang() -> list[Any]:
        entered.set()
        await asyncio.Event().wait()
        return []

    model = ScriptModel([[tool_call("search", {"q": "x"}, "c1")], hang])
    adapter = AgentsAdapter(stack.observers)
    task = asyncio.create_task(adapter.run(_agent(model), "hang"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert rec.hooks()[-4:] == ["on_stream_start", "on_stream_failure", "on_turn_end", "on_run_end"]
    assert rec.of("on_run_end")[0].status == "cancelled"
    stack.check_nothing_open()
    assert adapter.active_runs == 0


@pytest.mark.parametrize("tracing", [True, False])
async def test_a_tool_exception_the_sdk_reports_to_the_model(stack: Stack, tracing: bool) -> None:
    """The SDK turns a tool's exception into a message for the model: the run goes on. With
    SDK tracing on, the call is an error (its function span failed); off, an output."""
    set_tracing_disabled(not tracing)
    model = ScriptModel([[tool_call("broken", {"q": "x"}, "c1")], [message("sorry")]])
    agent = Agent(name="researcher", model=model, tools=[broken, search])
    result = await AgentsAdapter(stack.observers).run(agent, "break")

    assert result.final_output == "sorry"
    (post,) = stack.recorder.of("on_tool_post")
    assert "error occurred" in (post.result or "")
    assert post.is_error is tracing
    assert post.outcome == ("error" if tracing else "output")
    if tracing:
        assert isinstance(post.error, ToolExecutionError)
        assert post.error.tool == "broken"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_a_tool_exception_that_ends_the_run(stack: Stack) -> None:
    """A tool without an error function raises through the SDK: run failed, all closed."""
    raising = function_tool(
        lambda q: (_ for _ in ()).throw(ValueError(q)),
        name_override="raising",
        failure_error_function=None,
    )
    model = ScriptModel([[tool_call("raising", {"q": "boom"}, "c1")], [message("unreached")]])
    agent = Agent(name="researcher", model=model, tools=[raising])
    with pytest.raises(Exception, match="boom"):
        await AgentsAdapter(stack.observers).run(agent, "break")

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    (end,) = rec.of("on_run_end")
    assert end.status == "failed"
    assert "boom" in str(end.error)
    (post,) = rec.of("on_tool_post")
    assert post.is_error
    stack.check_nothing_open()


async def test_a_model_error_fails_the_stream_and_the_run(stack: Stack) -> None:
    """The model raises: on_stream_failure carries it, the run ends failed."""
    model = ScriptModel([RuntimeError("provider unavailable")])
    with pytest.raises(RuntimeError):
        await AgentsAdapter(stack.observers).run(_agent(model), "hi")

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    (failure,) = rec.of("on_stream_failure")
    assert "provider unavailable" in str(failure.error)
    assert rec.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def test_max_turns_ends_the_run_with_its_status(stack: Stack) -> None:
    """The SDK's MaxTurnsExceeded propagates; the run ends with status max_turns."""
    model = _looping_model(5)
    adapter = AgentsAdapter(stack.observers, detectors=[])
    with pytest.raises(AgentsMaxTurns):
        await adapter.run(_agent(model), "loop", max_turns=2)

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "max_turns"
    stack.check_nothing_open()


async def test_a_guardrail_trip_ends_the_run_naming_the_guardrail(stack: Stack) -> None:
    """An input guardrail's tripwire reaches the caller; the run ends failed, guardrail named."""

    @input_guardrail
    async def no_secrets(
        ctx: RunContextWrapper[Any], agent: Agent[Any], data: str | list[TResponseInputItem]
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info=None, tripwire_triggered=True)

    model = ScriptModel([[message("should not matter")]])
    agent = _agent(model, input_guardrails=[no_secrets])
    with pytest.raises(InputGuardrailTripwireTriggered):
        await AgentsAdapter(stack.observers).run(agent, "my password is hunter2")

    assert_contract(stack.recorder.events)
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "failed"
    assert "no_secrets" in str(end.error)
    stack.check_nothing_open()


async def test_a_streamed_run_is_reported_like_a_plain_one(stack: Stack) -> None:
    """run_streamed: same events, same usage, and the run ends when the SDK's task ends."""
    model = ScriptModel([[tool_call("search", {"q": "x"}, "c1")], [message("streamed answer")]])
    adapter = AgentsAdapter(stack.observers)
    result = adapter.run_streamed(_agent(model), "stream it")
    events = [e async for e in result.stream_events()]
    await asyncio.sleep(0)  # the done callback of the SDK's run task

    assert events
    assert result.final_output == "streamed answer"
    assert_contract(stack.recorder.events)
    stack.check_run(
        usage=Usage(input_tokens=2 * INPUT_TOKENS, output_tokens=2 * OUTPUT_TOKENS),
        chats=2,
        tools=1,
    )
    stack.check_metrics_agree()


async def test_a_streamed_run_stopped_by_the_policy(stack: Stack) -> None:
    """In a streamed run, stream_events() raises RunStopped; nothing is left open."""
    adapter = AgentsAdapter(
        stack.observers, detectors=[RepetitionDetector(warn_after=2, stop_after=3)]
    )
    result = adapter.run_streamed(_agent(_looping_model(20)), "loop")
    with pytest.raises(RunStopped):
        async for _ in result.stream_events():
            pass
    await asyncio.sleep(0)

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "loop_detected"
    stack.check_nothing_open()


async def test_a_streamed_run_cancelled_by_the_caller(stack: Stack) -> None:
    """result.cancel() mid-stream: the run ends cancelled, nothing open."""
    model = _looping_model(20)
    adapter = AgentsAdapter(stack.observers, detectors=[])
    result = adapter.run_streamed(_agent(model), "loop")
    async for _ in result.stream_events():
        if model.calls >= 2:
            result.cancel()
    task = result.run_loop_task
    assert task is not None
    await asyncio.gather(task, return_exceptions=True)
    await asyncio.sleep(0)

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")
    stack.check_nothing_open()
    assert adapter.active_runs == 0


class _Exploding(LoopObserver):
    """Raises from every hook it has."""

    def on_run_start(self, ctx: EventContext) -> None:
        raise RuntimeError("observer bug")

    on_turn_start = on_stream_start = on_stream_success = on_tool_pre = on_tool_post = (
        on_turn_end
    ) = on_run_end = on_run_start


async def test_observer_failures_never_reach_the_run(caplog: pytest.LogCaptureFixture) -> None:
    """An observer raising everywhere: the SDK's run completes, the others still see it all."""
    recorder = RecordingObserver()
    model = ScriptModel([[tool_call("search", {"q": "x"}, "c1")], [message("fine")]])
    with caplog.at_level(logging.ERROR):
        result = await AgentsAdapter([_Exploding(), recorder]).run(_agent(model), "hi")
    assert result.final_output == "fine"
    assert_contract(recorder.events)
    assert recorder.of("on_run_end")[0].status == "completed"


async def test_the_callers_own_hooks_still_run(stack: Stack) -> None:
    """hooks= given by the caller are called after the adapter's, for every hook."""
    seen: list[str] = []

    class Mine(RunHooks[Any]):
        async def on_llm_start(self, *args: Any) -> None:
            seen.append("llm_start")

        async def on_tool_end(self, *args: Any) -> None:
            seen.append("tool_end")

    model = ScriptModel([[tool_call("search", {"q": "x"}, "c1")], [message("done")]])
    await AgentsAdapter(stack.observers).run(_agent(model), "hi", hooks=Mine())
    assert seen == ["llm_start", "tool_end", "llm_start"]
    assert_contract(stack.recorder.events)


def test_run_sync_reports_the_run(stack: Stack) -> None:
    """run_sync for code without an event loop."""
    model = ScriptModel([[message("sync answer")]])
    result = AgentsAdapter(stack.observers).run_sync(_agent(model), "hi")
    assert result.final_output == "sync answer"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_without_the_sdk_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the adapter without openai-agents: one line saying what to install."""
    monkeypatch.setitem(sys.modules, "agents", None)
    monkeypatch.delitem(sys.modules, "loopobs.adapters.openai_agents", raising=False)
    with pytest.raises(ImportError) as info:
        importlib.import_module("loopobs.adapters.openai_agents")
    message_ = str(info.value)
    assert "\n" not in message_
    assert "pip install 'loopobs[openai-agents]'" in message_


@function_tool(needs_approval=True)
def refund(amount: int) -> str:
    """Refund an amount."""
    return f"refunded {amount}"


async def test_a_tool_awaiting_approval_parks_the_run(stack: Stack) -> None:
    """needs_approval: the run ends suspended on a human gate; the approved resume completes."""
    model = ScriptModel([[tool_call("refund", {"amount": 5}, "c1")], [message("refunded")]])
    agent = Agent(name="support", model=model, tools=[refund])
    adapter = AgentsAdapter(stack.observers)
    parked = await adapter.run(agent, "refund me")

    assert parked.interruptions
    (gate,) = stack.recorder.of("on_suspended")
    assert (gate.tool, gate.tool_call_id, gate.kind) == ("refund", "c1", "human")
    assert stack.recorder.of("on_run_end")[0].status == "suspended"
    state = parked.to_state()
    state.approve(parked.interruptions[0])
    resumed = await adapter.run(agent, state)
    assert resumed.final_output == "refunded"
    assert [e.status for e in stack.recorder.of("on_run_end")] == ["suspended", "completed"]
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_concurrent_runs_keep_their_own_state(stack: Stack) -> None:
    """One adapter, several runs at once: each a run of its own, all contract-true."""
    adapter = AgentsAdapter(stack.observers)

    def agent() -> Agent[Any]:
        return _agent(ScriptModel([[tool_call("search", {"q": "x"}, "c1")], [message("ok")]]))

    results = await asyncio.gather(*(adapter.run(agent(), f"q{i}") for i in range(5)))
    assert [r.final_output for r in results] == ["ok"] * 5
    assert len(stack.recorder.run_ids()) == 5
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_runs_of_one_sdk_session_share_a_loopobs_session(stack: Stack) -> None:
    """Two runs with the same SDK session: one loopobs session, turn numbers keep counting."""
    session = SQLiteSession("conversation-1")  # in memory
    adapter = AgentsAdapter(stack.observers)
    for answer in ("first", "second"):
        model = ScriptModel([[tool_call("search", {"q": answer}, "c1")], [message(answer)]])
        result = await adapter.run(_agent(model), f"{answer} question", session=session)
        assert result.final_output == answer

    rec = stack.recorder
    assert [t.turn for t in rec.of("on_turn_start")] == [0, 1, 2, 3]
    assert len({s.session_id for s in rec.of("on_run_start")}) == 1
    assert_contract(rec.events)


async def test_an_adapter_bug_never_reaches_the_run(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook of the adapter that raises is logged; the SDK's run completes; the contract holds."""
    import loopobs.adapters.openai_agents as adapter_module

    def broken(response: Any) -> Any:
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(adapter_module, "_read_response", broken)
    model = ScriptModel([[tool_call("search", {"q": "x"}, "c1")], [message("fine")]])
    with caplog.at_level(logging.ERROR, logger="loopobs.adapters"):
        result = await AgentsAdapter(stack.observers).run(_agent(model), "hi")
    assert result.final_output == "fine"
    assert "adapter bug" in caplog.text
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_cancelling_a_run_inside_a_tool_closes_everything(stack: Stack) -> None:
    """A run cancelled while its tool runs: the tool call ends as an error, the run cancelled."""
    entered = asyncio.Event()

    async def _wait(q: str) -> str:
        entered.set()
        await asyncio.Event().wait()
        return q

    wait = function_tool(_wait, name_override="wait")
    model = ScriptModel([[tool_call("wait", {"q": "x"}, "c1")], [message("unreached")]])
    agent = Agent(name="researcher", model=model, tools=[wait])
    task = asyncio.create_task(AgentsAdapter(stack.observers).run(agent, "hang"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert_contract(stack.recorder.events)
    (post,) = stack.recorder.of("on_tool_post")
    assert post.is_error
    assert stack.recorder.of("on_run_end")[0].status == "cancelled"
    stack.check_nothing_open()


async def test_a_streamed_run_whose_tool_raises(stack: Stack) -> None:
    """run_streamed with a tool raising through the SDK: stream_events() raises, all closed."""

    def _explode(q: str) -> str:
        raise ValueError(f"exploded on {q}")

    explode = function_tool(_explode, name_override="explode", failure_error_function=None)
    model = ScriptModel([[tool_call("explode", {"q": "x"}, "c1")], [message("unreached")]])
    agent = Agent(name="researcher", model=model, tools=[explode])
    result = AgentsAdapter(stack.observers).run_streamed(agent, "go")
    with pytest.raises(Exception, match="exploded on x"):
        async for _ in result.stream_events():
            pass
    await asyncio.sleep(0)

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def test_a_budget_stops_the_run_before_the_model_call_past_it(stack: Stack) -> None:
    """A BudgetGuard among the detectors: RunStopped (budget_exceeded) from on_llm_start,
    and the model call past the budget is never made."""
    model = _looping_model(20)
    adapter = AgentsAdapter(stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))])
    with pytest.raises(RunStopped) as caught:
        await adapter.run(_agent(model), "loop")
    assert caught.value.status == "budget_exceeded"
    assert model.calls == 3
    assert stack.recorder.of("on_run_end")[0].status == "budget_exceeded"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_implausible_usage_is_refused() -> None:
    """The SDK's usage with a negative and an absurd count: both unknown in the run's events."""
    from agents.usage import Usage as AgentsUsage

    from loopobs.adapters import RunTracker
    from loopobs.adapters.openai_agents import _usage
    from loopobs.testing import RecordingObserver

    recorder = RecordingObserver()
    tracker = RunTracker([recorder], detectors=[])
    run = tracker.start_run()
    run.model_start("k", model="m")
    run.model_end("k", usage=_usage(AgentsUsage(input_tokens=-5, output_tokens=2**70)))
    run.end()
    (ok,) = recorder.of("on_stream_success")
    assert (ok.input_tokens, ok.output_tokens) == (0, 0)
    assert tracker.rejected_token_counts == 2


async def test_prices_price_each_call(stack: Stack) -> None:
    """prices= as on every adapter (docs/adapters.md): the run's cost at the user's rates."""
    model = ScriptModel([[tool_call("search", {"q": "paris"}, "c1")], [message("Sunny.")]])
    adapter = AgentsAdapter(
        stack.observers, prices={"script-1": ModelRates(input_per_mtok=1.0, output_per_mtok=10.0)}
    )
    await adapter.run(_agent(model), "Weather?")
    (end,) = stack.recorder.of("on_run_end")
    assert end.cost_usd == pytest.approx(
        ModelRates(input_per_mtok=1.0, output_per_mtok=10.0).usd(
            Usage(input_tokens=2 * INPUT_TOKENS, output_tokens=2 * OUTPUT_TOKENS)
        )
    )
    assert end.cost_usd > 0


# -- against the SDK's own OpenAI chat model and a scripted server on 127.0.0.1 ------------------


def _served(server: ScriptedServer, **settings: Any) -> Agent[Any]:
    """The SDK's OpenAIChatCompletionsModel against ``server`` (an OpenAI-compatible endpoint,
    so the SDK asks for stream usage only when ModelSettings(include_usage=True) says so)."""
    client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    return Agent(
        name="researcher",
        model=OpenAIChatCompletionsModel("gpt-test", client),
        tools=[search],
        model_settings=ModelSettings(**settings),
    )


def _served_replies(usage: bool = True) -> list[ServedReply]:
    return [
        ServedReply(calls=[("c1", "search", {"q": "paris"})], usage=(120, 15) if usage else None),
        ServedReply("Sunny in Paris.", usage=(160, 9) if usage else None),
    ]


async def _run_served(adapter: AgentsAdapter, agent: Agent[Any], streamed: bool) -> Any:
    if not streamed:
        return await adapter.run(agent, "Weather in Paris?")
    result = adapter.run_streamed(agent, "Weather in Paris?")
    async for _ in result.stream_events():
        pass
    await asyncio.sleep(0)  # the done callback of the SDK's run task
    return result


def _chat_attributes(stack: Stack, name: str) -> list[object]:
    return [(s.attributes or {}).get(name) for s in stack.finished("chat")]


@pytest.mark.parametrize("streamed", [True, False])
async def test_served_usage_is_reported_per_call_exactly(stack: Stack, streamed: bool) -> None:
    """Runner.run_streamed with stream_options usage chunks (and Runner.run): each call's tokens
    are the ones the server served, on the events, the chat spans and the run; and
    gen_ai.request.stream says what the SDK did."""
    with ScriptedServer(_served_replies(), usage_when_asked=True) as server:
        adapter = AgentsAdapter(stack.observers)
        result = await _run_served(adapter, _served(server, include_usage=True), streamed)
    assert result.final_output.strip() == "Sunny in Paris."
    assert [bool(r.get("stream")) for r in server.requests] == [streamed, streamed]
    if streamed:
        assert [r["stream_options"] for r in server.requests] == [{"include_usage": True}] * 2
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert [
        (s.input_tokens, s.output_tokens, s.usage_reported) for s in rec.of("on_stream_success")
    ] == [
        (120, 15, True),
        (160, 9, True),
    ]
    assert [s.stream for s in rec.of("on_stream_start")] == [streamed, streamed]
    assert _chat_attributes(stack, "gen_ai.usage.input_tokens") == [120, 160]
    assert _chat_attributes(stack, "gen_ai.usage.output_tokens") == [15, 9]
    assert _chat_attributes(stack, "gen_ai.request.stream") == [streamed, streamed]
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    stack.check_metrics_agree()


@pytest.mark.parametrize("streamed", [True, False])
async def test_usage_the_server_did_not_report_is_unknown_not_zero(
    stack: Stack, streamed: bool
) -> None:
    """No usage served (a stream the SDK asked no usage for; a completion without it): the calls'
    usage is unknown (no token counts on the chat spans, usage None, cost unknown), never 0/0."""
    prices = {"gpt-test": ModelRates(input_per_mtok=1.0, output_per_mtok=1.0)}
    with ScriptedServer(_served_replies(usage=streamed), usage_when_asked=True) as server:
        adapter = AgentsAdapter(stack.observers, prices=prices)
        # streamed: the server holds usage back because the SDK does not ask for it
        await _run_served(adapter, _served(server), streamed)
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert [s.usage_reported for s in rec.of("on_stream_success")] == [False, False]
    assert [s.cost_usd for s in rec.of("on_stream_success")] == [None, None]
    assert [r.usage for r in rec.of("on_response")] == [None, None]
    assert _chat_attributes(stack, "gen_ai.usage.input_tokens") == [None, None]
    assert _chat_attributes(stack, "gen_ai.usage.output_tokens") == [None, None]
    assert rec.of("on_run_end")[0].cost_usd is None
    stack.check_nothing_open()


@pytest.mark.parametrize("tracing", [True, False])
@pytest.mark.parametrize("streamed", [False, True])
async def test_a_span_the_tool_opens_is_a_child_of_its_execute_tool_span(
    stack: Stack, streamed: bool, tracing: bool
) -> None:
    """The user's tool opens a span with the user's tracer: it nests under that call's
    execute_tool span, in the run's trace, for async and sync tools called in parallel, with SDK
    tracing on or off."""
    set_tracing_disabled(not tracing)
    tracer = stack.tracer_provider.get_tracer("user-app")

    async def _lookup(q: str) -> str:
        with tracer.start_as_current_span(f"lookup {q}"):
            await asyncio.sleep(0)
            return f"found {q}"

    def _fetch(q: str) -> str:
        with tracer.start_as_current_span(f"fetch {q}"):
            return f"fetched {q}"

    lookup = function_tool(_lookup, name_override="lookup")
    fetch = function_tool(_fetch, name_override="fetch")
    model = ScriptModel(
        [
            [
                tool_call("lookup", {"q": "a"}, "c1"),
                tool_call("fetch", {"q": "b"}, "c2"),
                tool_call("lookup", {"q": "c"}, "c3"),
            ],
            [message("done")],
        ]
    )
    agent = Agent(name="researcher", model=model, tools=[lookup, fetch])
    adapter = AgentsAdapter(stack.observers)
    if streamed:
        result = adapter.run_streamed(agent, "go")
        async for _ in result.stream_events():
            pass
        await asyncio.sleep(0)
    else:
        await adapter.run(agent, "go")

    (root,) = stack.finished("invoke_agent")
    tools = {(s.attributes or {})["gen_ai.tool.call.id"]: s for s in stack.finished("execute_tool")}
    for name, call_id in (("lookup a", "c1"), ("fetch b", "c2"), ("lookup c", "c3")):
        (span,) = stack.finished(name)
        tool_span = tools[call_id]
        assert span.parent is not None
        assert span.parent.span_id == tool_span.context.span_id, name
        assert span.context.trace_id == root.context.trace_id
    stack.check_nothing_open()


async def test_a_span_opened_inside_the_model_call_is_a_child_of_its_chat_span(
    stack: Stack,
) -> None:
    """A span opened while the model call runs (as an HTTP client instrumentation would) nests
    under that call's chat span; outside any call, spans keep the caller's parent."""
    tracer = stack.tracer_provider.get_tracer("http-client")

    class Instrumented(ScriptModel):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            with tracer.start_as_current_span(f"POST /v1/responses #{self.calls + 1}"):
                return await super().get_response(*args, **kwargs)

    model = Instrumented([[tool_call("search", {"q": "x"}, "c1")], [message("ok")]])
    with tracer.start_as_current_span("request") as request:
        await AgentsAdapter(stack.observers).run(_agent(model), "hi")
        after = tracer.start_span("after the run")
        after.end()

    chats = stack.finished("chat")
    for i, chat in enumerate(chats, start=1):
        (http,) = stack.finished(f"POST /v1/responses #{i}")
        assert http.parent is not None
        assert http.parent.span_id == chat.context.span_id
    (root,) = stack.finished("invoke_agent")
    assert root.parent is not None
    assert root.parent.span_id == request.get_span_context().span_id
    (later,) = stack.finished("after the run")
    assert later.parent is not None
    assert later.parent.span_id == request.get_span_context().span_id


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_stop_hands_back_the_partial_run_as_the_sdk_does(
    stack: Stack, streamed: bool
) -> None:
    """RunStopped (a loop) carries the SDK's run_data, as MaxTurnsExceeded does: the input, the
    items and the raw responses of the run so far."""
    model = _looping_model(50)
    adapter = AgentsAdapter(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )

    async def run() -> None:
        if streamed:
            result = adapter.run_streamed(_agent(model), "loop forever")
            async for _ in result.stream_events():
                pass
        else:
            await adapter.run(_agent(model), "loop forever")

    with pytest.raises(RunStopped) as info:
        await run()
    await asyncio.sleep(0)

    stop = info.value
    assert isinstance(stop, AgentsRunStopped)
    assert isinstance(stop, AgentsException)
    assert stop.status == "loop_detected"
    data = stop.run_data
    assert data is not None
    assert data.input == "loop forever"
    assert len(data.raw_responses) == 5 == model.calls
    assert [r.response_id for r in data.raw_responses] == [f"resp_{i}" for i in range(1, 6)]
    calls = [i for i in data.new_items if i.type == "tool_call_item"]
    outputs = [i for i in data.new_items if i.type == "tool_call_output_item"]
    assert len(calls) == len(outputs) == 5
    assert outputs[-1].output == "results for same"
    assert data.last_agent.name == "researcher"
    # the telemetry records the stop itself, a plain RunStopped
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "loop_detected"
    assert type(end.error) is RunStopped
    assert str(end.error) == str(stop)
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_a_budget_stop_hands_back_the_partial_run(stack: Stack) -> None:
    """A budget stop carries run_data too."""
    model = _looping_model(20)
    adapter = AgentsAdapter(stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))])
    with pytest.raises(AgentsRunStopped) as info:
        await adapter.run(_agent(model), "loop")
    assert info.value.status == "budget_exceeded"
    assert info.value.run_data is not None
    assert len(info.value.run_data.raw_responses) == 3
