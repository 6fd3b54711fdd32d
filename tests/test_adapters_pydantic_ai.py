"""The pydantic-ai adapter on real agent runs, driven by its TestModel and FunctionModel."""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import re
import sys
from collections.abc import AsyncIterator, Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import (
    Agent,
    DeferredToolRequests,
    DeferredToolResults,
    ModelRetry,
    UsageLimitExceeded,
    UsageLimits,
)
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage

from loopobs import (
    Budget,
    BudgetGuard,
    ConvergenceDetector,
    LoopDetected,
    LoopObserver,
    ModelRates,
    RepetitionDetector,
    ToolExecutionError,
    Usage,
)
from loopobs import tool as loopobs_tool
from loopobs.adapters import RunStopped
from loopobs.adapters.pydantic_ai import LoopobsCapability
from loopobs.contract.events import EventContext
from loopobs.llm.scripted import Reply, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._adapter_checks import Stack, agent_loop_sums

USAGE = RequestUsage(
    input_tokens=30, output_tokens=6, cache_read_tokens=10, output_reasoning_tokens=2
)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def search(q: str) -> str:
    """Search the web."""
    return f"results for {q}"


def _agent(model: Any, capability: LoopobsCapability, **kwargs: Any) -> Agent[None, Any]:
    agent: Agent[None, Any] = Agent(model, name="researcher", capabilities=[capability], **kwargs)
    agent.tool_plain(search)
    return agent


def _looping(calls: list[int]) -> FunctionModel:
    """A model that asks for the same search forever, counting its calls in ``calls``."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(
            parts=[ToolCallPart("search", {"q": "same"}, tool_call_id=f"c{len(calls)}")],
            usage=USAGE,
        )

    return FunctionModel(respond, model_name="looper")


def _script(*responses: ModelResponse) -> FunctionModel:
    queue = list(responses)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return queue.pop(0)

    return FunctionModel(respond, model_name="scripted")


async def test_a_run_is_one_trace_with_the_models_usage_and_equal_metrics(stack: Stack) -> None:
    """TestModel calls the tool, then answers: one trace, its usage, OTel = Prometheus, a log."""
    capability = LoopobsCapability(stack.observers)
    result = await _agent(TestModel(), capability).run("Weather in Paris?")

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert rec.hooks() == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_tool_call_received",
        "on_tool_pre",
        "on_tool_post",
        "on_turn_end",
        "on_turn_start",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    usage = result.usage
    (end,) = rec.of("on_run_end")
    assert (end.status, end.input_tokens, end.output_tokens) == (
        "completed",
        usage.input_tokens,
        usage.output_tokens,
    )
    assert rec.of("on_stream_start")[0].model == "test"
    (post,) = rec.of("on_tool_post")
    assert post.result == "results for a"
    assert rec.of("on_response")[-1].text == result.output

    stack.check_run(
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        chats=2,
        tools=1,
    )
    stack.check_metrics_agree()
    assert stack.finished("invoke_agent")[0].name == "invoke_agent researcher"


async def test_cached_and_reasoning_tokens_are_the_models(stack: Stack) -> None:
    """A FunctionModel reporting cache reads and reasoning: the stream success carries them."""
    model = _script(
        ModelResponse(
            parts=[TextPart("hi")], usage=USAGE, provider_response_id="resp_1", finish_reason="stop"
        )
    )
    await _agent(model, LoopobsCapability(stack.observers)).run("hello")
    (ok,) = stack.recorder.of("on_stream_success")
    assert (
        ok.input_tokens,
        ok.output_tokens,
        ok.cache_read_input_tokens,
        ok.reasoning_output_tokens,
    ) == (30, 6, 10, 2)
    assert (ok.response_id, ok.response_model, ok.finish_reason) == ("resp_1", "scripted", "stop")
    assert_contract(stack.recorder.events)


async def test_a_runaway_tool_loop_is_stopped_through_a_capability_hook(stack: Stack) -> None:
    """stop: RunStopped leaves wrap_tool_execute after the fifth repeat; agent.run raises it."""
    calls: list[int] = []
    capability = LoopobsCapability(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with pytest.raises(RunStopped) as info:
        await _agent(_looping(calls), capability).run("loop forever")

    assert isinstance(info.value, LoopDetected)
    assert re.search(r"search\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    assert len(calls) == 5  # no model call after the stop
    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert [d.action for d in rec.of("on_loop_detected")] == ["warn", "stop"]
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("loop_detected", False)
    stack.check_nothing_open()
    assert capability.active_runs == 0


async def test_warn_leaves_the_run_alone(stack: Stack) -> None:
    """A warn-only detector reports the loop; the run goes on to its answer."""
    loop = [
        ModelResponse(parts=[ToolCallPart("search", {"q": "same"}, tool_call_id=f"c{i}")])
        for i in range(6)
    ]
    model = _script(*loop, ModelResponse(parts=[TextPart("gave up")]))
    capability = LoopobsCapability(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=0)]
    )
    result = await _agent(model, capability).run("loop a while")

    assert result.output == "gave up"
    assert [d.action for d in stack.recorder.of("on_loop_detected")] == ["warn"]
    assert stack.recorder.of("on_run_end")[0].status == "completed"
    assert_contract(stack.recorder.events)


async def test_cancelling_a_run_closes_everything(stack: Stack) -> None:
    """A run cancelled inside a model call: stream failure, run cancelled, nothing open."""
    entered = asyncio.Event()

    async def hang(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    capability = LoopobsCapability(stack.observers)
    task = asyncio.create_task(_agent(FunctionModel(hang), capability).run("hang"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    assert rec.hooks()[-4:] == ["on_stream_start", "on_stream_failure", "on_turn_end", "on_run_end"]
    assert rec.of("on_run_end")[0].status == "cancelled"
    stack.check_nothing_open()
    assert capability.active_runs == 0


async def test_a_tool_asking_for_a_retry_is_an_error_attempt(stack: Stack) -> None:
    """ModelRetry from a tool: an error outcome with the retry message; the run goes on and
    the model's new call (in the next turn, even under the same id) is a call of its own."""
    tries: list[int] = []

    def flaky(q: str) -> str:
        tries.append(1)
        if len(tries) == 1:
            raise ModelRetry("try a narrower query")
        return "ok"

    model = _script(
        ModelResponse(parts=[ToolCallPart("flaky", {"q": "x"}, tool_call_id="c1")]),
        ModelResponse(parts=[ToolCallPart("flaky", {"q": "y"}, tool_call_id="c1")]),
        ModelResponse(parts=[TextPart("done")]),
    )
    agent: Agent[None, str] = Agent(
        model, name="researcher", capabilities=[LoopobsCapability(stack.observers)]
    )
    agent.tool_plain(retries=2)(flaky)
    assert (await agent.run("go")).output == "done"

    assert_contract(stack.recorder.events)
    first, second = stack.recorder.of("on_tool_post")
    assert (first.is_error, first.outcome, first.attempt) == (True, "error", 0)
    assert isinstance(first.error, ToolExecutionError)
    assert "try a narrower query" in (first.result or "")
    assert (second.is_error, second.attempt, second.result) == (False, 0, "ok")
    assert second.turn == first.turn + 1
    assert first.error.error_type == "ModelRetry"
    stack.check_nothing_open()


async def test_a_tool_exception_ends_the_run(stack: Stack) -> None:
    """A tool raising: pydantic-ai propagates it; tool post is an error, the run failed."""

    def broken(q: str) -> str:
        raise ValueError(f"cannot handle {q}")

    model = _script(ModelResponse(parts=[ToolCallPart("broken", {"q": "x"}, tool_call_id="c1")]))
    agent: Agent[None, str] = Agent(
        model, name="researcher", capabilities=[LoopobsCapability(stack.observers)]
    )
    agent.tool_plain(broken)
    with pytest.raises(ValueError, match="cannot handle x"):
        await agent.run("break")

    assert_contract(stack.recorder.events)
    rec = stack.recorder
    (post,) = rec.of("on_tool_post")
    assert post.is_error
    assert rec.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def test_a_model_error_fails_the_stream_and_the_run(stack: Stack) -> None:
    """The model raises: on_stream_failure carries it, the run ends failed."""

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("provider unavailable")

    with pytest.raises(RuntimeError):
        await _agent(FunctionModel(down), LoopobsCapability(stack.observers)).run("hi")

    assert_contract(stack.recorder.events)
    (failure,) = stack.recorder.of("on_stream_failure")
    assert "provider unavailable" in str(failure.error)
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def test_a_usage_limit_ends_the_run(stack: Stack) -> None:
    """pydantic-ai's own guard (request_limit) ends the run failed; nothing left open."""
    calls: list[int] = []
    capability = LoopobsCapability(stack.observers, detectors=[])
    with pytest.raises(UsageLimitExceeded):
        await _agent(_looping(calls), capability).run(
            "loop", usage_limits=UsageLimits(request_limit=3)
        )

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


async def _stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    if len(messages) == 1:
        yield {0: DeltaToolCall(name="search", json_args='{"q": "x"}', tool_call_id="c1")}
        return
    for word in ("streamed ", "answer"):
        yield word


async def test_a_streamed_run_is_reported_like_a_plain_one(stack: Stack) -> None:
    """run_stream: same events, the run ends when the stream is done."""
    agent = _agent(
        FunctionModel(stream_function=_stream, model_name="streamer"),
        LoopobsCapability(stack.observers),
    )
    async with agent.run_stream("stream it") as result:
        text = "".join([chunk async for chunk in result.stream_text(delta=True)])
    assert text == "streamed answer"

    usage = result.usage
    stack.check_run(
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        chats=2,
        tools=1,
    )
    stack.check_metrics_agree()


async def test_leaving_a_stream_early_closes_everything(stack: Stack) -> None:
    """The caller leaves run_stream before the end: the run ends, nothing open."""
    agent = _agent(FunctionModel(stream_function=_stream), LoopobsCapability(stack.observers))
    async with agent.run_stream("stream it") as result:
        async for _ in result.stream_text(delta=True):
            break

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")
    stack.check_nothing_open()


async def test_an_iter_run_is_reported(stack: Stack) -> None:
    """agent.iter() node by node: the same run."""
    agent = _agent(TestModel(), LoopobsCapability(stack.observers))
    async with agent.iter("hi") as run:
        async for _ in run:
            pass
    usage = run.usage
    stack.check_run(
        usage=Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        chats=2,
        tools=1,
    )


class Forecast(BaseModel):
    city: str
    sunny: bool


async def test_a_structured_result_is_the_responses_text_not_a_tool_call(stack: Stack) -> None:
    """The output tool's arguments are the final answer's text; no tool call is reported."""
    agent = _agent(
        TestModel(call_tools=[]), LoopobsCapability(stack.observers), output_type=Forecast
    )
    result = await agent.run("forecast")
    rec = stack.recorder
    assert not rec.of("on_tool_call_received")
    (response,) = rec.of("on_response")
    assert response.tool_calls == 0
    assert Forecast.model_validate_json(response.text) == result.output
    assert_contract(stack.recorder.events)


async def test_concurrent_runs_keep_their_own_state(stack: Stack) -> None:
    """One capability, several runs at once: each is a run of its own, all contract-true."""
    capability = LoopobsCapability(stack.observers)
    agent = _agent(TestModel(), capability)
    await asyncio.gather(*(agent.run(f"q{i}") for i in range(5)))
    assert len(stack.recorder.run_ids()) == 5
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


class _Exploding(LoopObserver):
    """Raises from every hook it has."""

    def on_run_start(self, ctx: EventContext) -> None:
        raise RuntimeError("observer bug")

    on_turn_start = on_stream_start = on_stream_success = on_tool_pre = on_tool_post = (
        on_turn_end
    ) = on_run_end = on_run_start


async def test_observer_failures_never_reach_the_run(caplog: pytest.LogCaptureFixture) -> None:
    """An observer raising everywhere: the run completes; the others still see all of it."""
    recorder = RecordingObserver()
    with caplog.at_level(logging.ERROR):
        result = await _agent(TestModel(), LoopobsCapability([_Exploding(), recorder])).run("hi")
    assert result.output
    assert_contract(recorder.events)
    assert recorder.of("on_run_end")[0].status == "completed"


def test_without_pydantic_ai_the_import_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing the adapter without pydantic-ai-slim: one line saying what to install."""
    monkeypatch.setitem(sys.modules, "pydantic_ai", None)
    monkeypatch.delitem(sys.modules, "loopobs.adapters.pydantic_ai", raising=False)
    # pytest re-parses the module it imports next; CPython 3.11.7's ast.parse fails with
    # "AST constructor recursion depth mismatch" if the GC runs finalizers in the middle,
    # so leave it no garbage from the tests before.
    gc.collect()
    with pytest.raises(ImportError) as info:
        importlib.import_module("loopobs.adapters.pydantic_ai")
    message = str(info.value)
    assert "\n" not in message
    assert "pip install 'loopobs[pydantic-ai]'" in message


async def test_a_tool_awaiting_approval_parks_the_run(stack: Stack) -> None:
    """requires_approval: the run ends suspended on a human gate; the approved resume completes."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"amount": 5}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("refunded")])

    agent: Agent[None, str | DeferredToolRequests] = Agent(
        FunctionModel(respond),
        name="support",
        output_type=[str, DeferredToolRequests],
        capabilities=[LoopobsCapability(stack.observers)],
    )

    @agent.tool_plain(requires_approval=True)
    def refund(amount: int) -> str:
        return f"refunded {amount}"

    parked = await agent.run("refund me")
    assert isinstance(parked.output, DeferredToolRequests)
    (gate,) = stack.recorder.of("on_suspended")
    assert (gate.tool, gate.tool_call_id, gate.kind) == ("refund", "c1", "human")
    resumed = await agent.run(
        message_history=parked.all_messages(),
        deferred_tool_results=DeferredToolResults(approvals={"c1": True}),
    )
    assert resumed.output == "refunded"
    assert [e.status for e in stack.recorder.of("on_run_end")] == ["suspended", "completed"]
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_a_run_stream_events_run_is_reported(stack: Stack) -> None:
    """run_stream_events: the same run, ended when the event stream is exhausted."""
    agent = _agent(FunctionModel(stream_function=_stream), LoopobsCapability(stack.observers))
    async with agent.run_stream_events("stream it") as events:
        seen = [event async for event in events]
    assert seen
    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "completed"
    stack.check_nothing_open()


async def test_a_conversation_is_one_session_and_converged_answers_are_reported(
    stack: Stack,
) -> None:
    """Runs of one conversation_id: turn numbers keep counting; the same answer again and again
    is detected (a convergence stop has no run left to stop: the run completes)."""
    model = _script(*(ModelResponse(parts=[TextPart("It is sunny in Paris.")]) for _ in range(3)))
    capability = LoopobsCapability(
        stack.observers, detectors=[ConvergenceDetector(consecutive=3, action="stop")]
    )
    agent = _agent(model, capability)
    for _ in range(3):
        result = await agent.run("weather?", conversation_id="conv-1")
        assert result.output == "It is sunny in Paris."

    rec = stack.recorder
    assert [t.turn for t in rec.of("on_turn_start")] == [0, 1, 2]
    assert len({s.session_id for s in rec.of("on_run_start")}) == 1
    (detection,) = rec.of("on_convergence_detected")
    assert (detection.action, detection.consecutive) == ("stop", 3)
    assert [e.status for e in rec.of("on_run_end")] == ["completed"] * 3
    assert_contract(rec.events)


async def _thinking_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaThinkingCalls]:
    yield {0: DeltaThinkingPart(content="let me think")}
    for word in ("streamed ", "answer"):
        yield word


@pytest.mark.parametrize("streamed", [False, True])
async def test_deltas_are_reported_when_asked_for(stack: Stack, streamed: bool) -> None:
    """deltas=True: thinking and text deltas inside the model call, and a time to first token;
    under agent.run() too (pydantic-ai then streams the request)."""
    agent = _agent(
        FunctionModel(stream_function=_thinking_stream),
        LoopobsCapability(stack.observers, deltas=True),
    )
    if streamed:
        async with agent.run_stream("think") as result:
            assert await result.get_output() == "streamed answer"
    else:
        assert (await agent.run("think")).output == "streamed answer"

    rec = stack.recorder
    assert [c.delta for c in rec.of("on_thinking_delta")] == ["let me think"]
    assert "".join(c.delta for c in rec.of("on_text_delta")) == "streamed answer"
    hooks = rec.hooks()
    first, success = hooks.index("on_thinking_delta"), hooks.index("on_stream_success")
    assert hooks.index("on_stream_start") < first < success
    (ok,) = rec.of("on_stream_success")
    assert ok.time_to_first_token_ms is not None
    assert_contract(rec.events)
    stack.check_nothing_open()


async def test_no_deltas_by_default(stack: Stack) -> None:
    """Without deltas=True the adapter leaves the event stream alone: no delta is reported."""
    agent = _agent(
        FunctionModel(stream_function=_thinking_stream), LoopobsCapability(stack.observers)
    )
    async with agent.run_stream("think") as result:
        await result.get_output()
    assert not stack.recorder.of("on_text_delta")
    assert not stack.recorder.of("on_thinking_delta")
    assert_contract(stack.recorder.events)


async def test_an_adapter_bug_never_reaches_the_run(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A hook of the adapter that raises is logged; the agent's run completes; contract holds."""
    import loopobs.adapters.pydantic_ai as adapter_module

    def broken(*args: Any) -> Any:
        raise RuntimeError("adapter bug")

    monkeypatch.setattr(adapter_module, "_read_response", broken)
    with caplog.at_level(logging.ERROR, logger="loopobs.adapters"):
        result = await _agent(TestModel(), LoopobsCapability(stack.observers)).run("hi")
    assert result.output
    assert "adapter bug" in caplog.text
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_metric_totals_equal_agent_loops_for_the_same_script(
    stack: Stack, tmp_path: Path
) -> None:
    """A FunctionModel script through the adapter and through AgentLoop: the same totals."""
    model = _script(
        ModelResponse(
            parts=[ToolCallPart("search", {"q": "paris"}, tool_call_id="c1")], usage=USAGE
        ),
        ModelResponse(parts=[TextPart("Sunny.")], usage=USAGE),
    )
    result = await _agent(model, LoopobsCapability(stack.observers)).run("Weather in Paris?")
    assert result.output == "Sunny."
    stack.check_run(usage=Usage(input_tokens=60, output_tokens=12), chats=2, tools=1)
    stack.check_metrics_agree()

    usage = Usage(
        input_tokens=30, output_tokens=6, cache_read_input_tokens=10, reasoning_output_tokens=2
    )
    script = [
        Reply(tool_calls=(ToolCall("search", {"q": "paris"}, "c1"),), usage=usage),
        Reply(text="Sunny.", usage=usage),
    ]
    reference = await asyncio.to_thread(
        agent_loop_sums, tmp_path, script, [loopobs_tool(search)], "Weather in Paris?"
    )
    assert stack.metric_sums() == reference


async def test_cancelling_a_run_inside_a_tool_closes_everything(stack: Stack) -> None:
    """A run cancelled while its tool runs: the tool call ends as an error, the run cancelled."""
    entered = asyncio.Event()

    async def wait(q: str) -> str:
        entered.set()
        await asyncio.Event().wait()
        return q

    model = _script(ModelResponse(parts=[ToolCallPart("wait", {"q": "x"}, tool_call_id="c1")]))
    agent: Agent[None, str] = Agent(
        model, name="researcher", capabilities=[LoopobsCapability(stack.observers)]
    )
    agent.tool_plain(wait)
    task = asyncio.create_task(agent.run("hang"))
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
    """run_stream with a tool raising: the error reaches the caller, everything is closed."""

    async def explode_stream(
        messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[DeltaToolCalls]:
        yield {0: DeltaToolCall(name="explode", json_args='{"q": "x"}', tool_call_id="c1")}

    def explode(q: str) -> str:
        raise ValueError(f"exploded on {q}")

    agent: Agent[None, str] = Agent(
        FunctionModel(stream_function=explode_stream),
        name="researcher",
        capabilities=[LoopobsCapability(stack.observers)],
    )
    agent.tool_plain(explode)
    with pytest.raises(ValueError, match="exploded on x"):
        async with agent.run_stream("go") as result:
            await result.get_output()

    assert_contract(stack.recorder.events)
    assert stack.recorder.of("on_run_end")[0].status == "failed"
    stack.check_nothing_open()


def _model_fallback() -> Any:
    """pydantic-ai's ModelFallback capability, or a skip naming the installed release that
    lacks it (the oldest supported releases do; `make test-adapters-min` runs on one)."""
    from pydantic_ai import capabilities

    if not hasattr(capabilities, "ModelFallback"):
        pytest.skip(
            f"pydantic-ai-slim {version('pydantic-ai-slim')} has no capabilities.ModelFallback"
        )
    return capabilities.ModelFallback


async def test_a_model_fallback_is_a_failed_attempt_then_the_next_model(stack: Stack) -> None:
    """ModelFallback: the failed attempt's stream fails, on_fallback and on_model_switched
    name both models, and the next attempt of the same turn succeeds."""
    ModelFallback = _model_fallback()

    def down(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError(status_code=503, model_name="primary", body="overloaded")

    def up(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("answered by backup")], usage=USAGE)

    agent: Agent[None, str] = Agent(
        FunctionModel(down, model_name="primary"),
        name="researcher",
        capabilities=[
            LoopobsCapability(stack.observers),
            ModelFallback(FunctionModel(up, model_name="backup")),
        ],
    )
    assert (await agent.run("hi")).output == "answered by backup"

    rec = stack.recorder
    assert rec.hooks() == [
        "on_run_start",
        "on_turn_start",
        "on_stream_start",
        "on_stream_failure",
        "on_fallback",
        "on_model_switched",
        "on_stream_start",
        "on_stream_success",
        "on_response",
        "on_turn_end",
        "on_run_end",
    ]
    first, second = rec.of("on_stream_start")
    assert (first.model, first.attempt, second.model, second.attempt) == ("primary", 0, "backup", 1)
    (fallback,) = rec.of("on_fallback")
    assert (fallback.from_model, fallback.to_model) == ("primary", "backup")
    assert rec.of("on_stream_success")[0].input_tokens == 30
    assert_contract(rec.events)
    stack.check_nothing_open()


async def test_a_budget_stops_the_run_before_the_request_past_it(stack: Stack) -> None:
    """A BudgetGuard among the detectors: RunStopped (budget_exceeded) from
    wrap_model_request, and the request past the budget is never made."""
    calls: list[int] = []
    capability = LoopobsCapability(stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))])
    with pytest.raises(RunStopped) as caught:
        await _agent(_looping(calls), capability).run("loop")
    assert caught.value.status == "budget_exceeded"
    assert len(calls) == 3
    assert stack.recorder.of("on_run_end")[0].status == "budget_exceeded"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


def test_implausible_usage_is_refused_not_raised() -> None:
    """pydantic-ai's usage with a negative and an absurd count: the run reports both unknown."""
    from pydantic_ai.usage import RequestUsage

    from loopobs.adapters import RunTracker
    from loopobs.adapters.pydantic_ai import _usage
    from loopobs.testing import RecordingObserver

    usage = _usage(RequestUsage(input_tokens=-5, output_tokens=3, cache_read_tokens=2**70))
    recorder = RecordingObserver()
    tracker = RunTracker([recorder], detectors=[])
    run = tracker.start_run()
    run.model_start("k", model="m")
    run.model_end("k", usage=usage)
    run.end()
    (ok,) = recorder.of("on_stream_success")
    assert (ok.input_tokens, ok.output_tokens, ok.cache_read_input_tokens) == (0, 3, 0)
    assert tracker.rejected_token_counts == 2


async def test_prices_price_each_call(stack: Stack) -> None:
    """prices= as on every adapter (docs/adapters.md): the run's cost at the user's rates."""
    rates = ModelRates(input_per_mtok=1.0, output_per_mtok=10.0)
    capability = LoopobsCapability(stack.observers, prices={"test": rates})
    result = await _agent(TestModel(), capability).run("Weather in Paris?")
    (end,) = stack.recorder.of("on_run_end")
    usage = result.usage
    assert end.cost_usd == pytest.approx(
        rates.usd(Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens))
    )
    assert end.cost_usd > 0


# pydantic-ai says whether a request streams from 2.4x on (ModelRequestContext.streaming), and
# marks a response without usage (RequestUsage.unmeasured_requests); before, both are unknown.
_KNOWS_STREAMING = "streaming" in getattr(ModelRequestContext, "__dataclass_fields__", {})
_KNOWS_UNMEASURED = "unmeasured_requests" in getattr(RequestUsage, "__dataclass_fields__", {})


def _chat_attribute(stack: Stack, name: str) -> list[object]:
    return [(s.attributes or {}).get(name) for s in stack.finished("chat")]


@pytest.mark.parametrize("how", ["run", "run_stream", "run_with_deltas"])
async def test_request_stream_says_whether_pydantic_ai_streamed_the_request(
    stack: Stack, how: str
) -> None:
    """gen_ai.request.stream is what pydantic-ai did: false for a plain run(), true under
    run_stream() and when deltas=True makes it stream every request."""
    model = FunctionModel(_respond_twice(), stream_function=_stream, model_name="both")
    agent = _agent(model, LoopobsCapability(stack.observers, deltas=how == "run_with_deltas"))
    if how == "run_stream":
        async with agent.run_stream("q") as result:
            await result.get_output()
    else:
        await agent.run("q")
    streamed = how != "run"
    expected = streamed if _KNOWS_STREAMING else None
    assert [c.stream for c in stack.recorder.of("on_stream_start")] == [expected, expected]
    assert _chat_attribute(stack, "gen_ai.request.stream") == [expected, expected]
    assert_contract(stack.recorder.events)


def _respond_twice() -> Any:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("search", {"q": "x"}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("done")])

    return respond


@pytest.mark.skipif(not _KNOWS_UNMEASURED, reason="pydantic-ai before unmeasured_requests")
async def test_a_response_without_usage_is_unknown_not_zero(stack: Stack) -> None:
    """A response that omitted usage (pydantic-ai: unmeasured_requests): no token counts on
    the chat span, usage_reported=False and usage None on the events, the cost unknown."""
    prices = {"scripted": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0)}
    unmeasured = RequestUsage(unmeasured_requests=1)
    agent = _agent(
        _script(ModelResponse(parts=[TextPart("no usage")], usage=unmeasured)),
        LoopobsCapability(stack.observers, prices=prices),
    )
    assert (await agent.run("q")).output == "no usage"
    (ok,) = stack.recorder.of("on_stream_success")
    assert ok.usage_reported is False
    assert ok.cost_usd is None
    assert [r.usage for r in stack.recorder.of("on_response")] == [None]
    assert _chat_attribute(stack, "gen_ai.usage.input_tokens") == [None]
    assert _chat_attribute(stack, "gen_ai.usage.output_tokens") == [None]
    assert stack.recorder.of("on_run_end")[0].cost_usd is None
    assert_contract(stack.recorder.events)
