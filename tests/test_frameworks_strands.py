"""The Strands Agents adapter on real agent invocations, against a scripted OpenAI server.

Strands' own ``OpenAIModel`` (the official ``openai`` client underneath, streaming with
``include_usage``) is pointed at :class:`tests._openai_server.ScriptedServer` on 127.0.0.1.
Run in the frameworks' venv (``make test-frameworks``) with google-adk; elsewhere they skip.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("strands", reason="strands-agents runs in its own venv: make test-frameworks")

from strands import Agent, tool
from strands.models.openai import OpenAIModel

from loopobs import Budget, BudgetGuard, LoopDetected, ModelRates, RepetitionDetector, Usage
from loopobs.adapters import RunStopped
from loopobs.adapters.strands import LoopobsHooks, invoke_observed, stop_of
from loopobs.testing import RecordingObserver, assert_contract
from tests._adapter_checks import Stack
from tests._openai_server import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parents[1]


def _pinned(package: str) -> str:
    for line in (ROOT / "scripts" / "frameworks-requirements.txt").read_text().splitlines():
        name, _, pinned = line.split("#", 1)[0].strip().partition("==")
        if name.split("[", 1)[0] == package:
            return pinned
    raise AssertionError(f"{package} is not pinned")


def test_verified_against_the_pinned_release() -> None:
    assert version("strands-agents") == _pinned("strands-agents") == "1.62.0"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


@tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"21 C in {city}"


@tool
def broken(city: str) -> str:
    """A tool that fails."""
    raise ValueError(f"no data for {city}")


def _agent(server: ScriptedServer, hooks: LoopobsHooks, name: str = "weather_agent") -> Agent:
    model = OpenAIModel(
        client_args={"base_url": server.base_url, "api_key": "test-key"}, model_id="gpt-test"
    )
    return Agent(
        name=name,
        model=model,
        tools=[get_weather, broken],
        hooks=[hooks],
        system_prompt="Answer about the weather.",
        callback_handler=None,
    )


PRODUCTIVE = [
    Reply(calls=[("call_1", "get_weather", {"city": "Paris"})], usage=(120, 15)),
    Reply(text="It is 21 C in Paris.", usage=(160, 9)),
]


async def test_an_invocation_is_one_run_with_the_servers_usage(stack: Stack) -> None:
    hooks = LoopobsHooks(stack.observers)
    with ScriptedServer(PRODUCTIVE) as server:
        result = await invoke_observed(_agent(server, hooks), "Weather in Paris?")
        assert len(server.requests) == 2
    assert "21 C" in str(result)
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    rec = stack.recorder
    (start,) = rec.of("on_run_start")
    assert (start.agent, start.model) == ("weather_agent", "gpt-test")
    assert [c.tool for c in rec.of("on_tool_pre")] == ["get_weather"]
    assert [c.tool_call_id for c in rec.of("on_tool_pre")] == ["call_1"]
    assert [c.input for c in rec.of("on_tool_call_received")] == [{"city": "Paris"}]
    assert [s.provider for s in rec.of("on_stream_start")] == ["openai"] * 2
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success, end.total_turns) == ("completed", True, 2)
    assert not any(p.is_error for p in rec.of("on_tool_post"))
    assert hooks.active_runs == 0


async def test_calls_of_one_agent_share_a_loopobs_session(stack: Stack) -> None:
    hooks = LoopobsHooks(stack.observers)
    with ScriptedServer([Reply(text="hi", usage=(5, 1))]) as server:
        agent = _agent(server, hooks)
        await invoke_observed(agent, "one")
        await agent.invoke_async("two")  # the hooks alone
    starts = stack.recorder.of("on_run_start")
    assert len(starts) == 2
    assert starts[0].session_id == starts[1].session_id
    assert [t.turn for t in stack.recorder.of("on_turn_start")] == [0, 1]
    assert_contract(stack.recorder.events)


async def test_a_failing_tool_is_reported_as_an_error(stack: Stack) -> None:
    hooks = LoopobsHooks(stack.observers)
    replies = [
        Reply(calls=[("call_1", "broken", {"city": "Oslo"})], usage=(10, 2)),
        Reply(text="Sorry.", usage=(12, 2)),
    ]
    with ScriptedServer(replies) as server:
        await invoke_observed(_agent(server, hooks), "Weather in Oslo?")
    (post,) = stack.recorder.of("on_tool_post")
    assert (post.tool, post.is_error) == ("broken", True)
    assert_contract(stack.recorder.events)


def _looping() -> list[Reply]:
    return [
        Reply(calls=[(f"call_{i}", "get_weather", {"city": "Paris"})], usage=(50, 5))
        for i in range(40)
    ]


async def test_a_runaway_loop_is_stopped_before_the_next_model_call(stack: Stack) -> None:
    hooks = LoopobsHooks(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with ScriptedServer(_looping()) as server:
        with pytest.raises(RunStopped) as info:
            await invoke_observed(_agent(server, hooks), "loop")
        requests = len(server.requests)
    assert isinstance(info.value, LoopDetected)
    assert re.search(r"get_weather\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    assert requests == 5  # the stop came before the sixth model call
    rec = stack.recorder
    assert [d.action for d in rec.of("on_loop_detected")] == ["warn", "stop"]
    (end,) = rec.of("on_run_end")
    assert (end.status, end.success) == ("loop_detected", False)
    assert_contract(rec.events)
    stack.check_nothing_open()
    assert hooks.active_runs == 0


async def test_without_invoke_observed_strands_wraps_the_stop_and_stop_of_finds_it(
    stack: Stack,
) -> None:
    hooks = LoopobsHooks(stack.observers, detectors=[BudgetGuard(Budget(model_calls=2))])
    with ScriptedServer(_looping()) as server:
        with pytest.raises(Exception) as info:  # Strands' EventLoopException
            await _agent(server, hooks).invoke_async("loop")
        assert len(server.requests) == 2
    assert not isinstance(info.value, RunStopped)
    stop = stop_of(info.value)
    assert stop is not None
    assert stop.status == "budget_exceeded"
    assert stack.recorder.of("on_run_end")[0].status == "budget_exceeded"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()


async def test_prices_price_each_call() -> None:
    recorder = RecordingObserver()
    hooks = LoopobsHooks(
        [recorder], prices={"gpt-test": ModelRates(input_per_mtok=1.0, output_per_mtok=10.0)}
    )
    with ScriptedServer(PRODUCTIVE) as server:
        await invoke_observed(_agent(server, hooks), "Weather in Paris?")
    (end,) = recorder.of("on_run_end")
    assert end.cost_usd == pytest.approx((280 * 1.0 + 24 * 10.0) / 1e6)


async def test_an_observer_that_raises_never_breaks_the_invocation() -> None:
    class Broken(RecordingObserver):
        def on_event(self, ctx: Any) -> None:
            raise RuntimeError("observer bug")

    hooks = LoopobsHooks([Broken()])
    with ScriptedServer(PRODUCTIVE) as server:
        result = await invoke_observed(_agent(server, hooks), "Weather in Paris?")
    assert "21 C in Paris" in str(result)
