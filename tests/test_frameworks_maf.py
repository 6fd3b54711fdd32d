"""The Microsoft Agent Framework middleware on real agent runs, against a scripted OpenAI server.

The framework's own ``OpenAIChatCompletionClient`` (agent-framework-openai, the official
``openai`` client underneath) is pointed at :class:`tests._openai_server.ScriptedServer` on
127.0.0.1. Runs in the frameworks' venv (``make test-frameworks``); elsewhere it skips.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agent_framework", reason="agent-framework runs in make test-frameworks")

from agent_framework import Agent, tool
from agent_framework.openai import OpenAIChatCompletionClient

from loopobs import Budget, BudgetGuard, LoopDetected, RepetitionDetector, Usage
from loopobs.adapters import RunStopped
from loopobs.adapters.maf import LoopobsMiddleware
from loopobs.testing import RecordingObserver, assert_contract
from tests._adapter_checks import Stack
from tests._openai_server import Reply, ScriptedServer

ROOT = Path(__file__).resolve().parents[1]


def test_verified_against_the_pinned_release() -> None:
    pins = (ROOT / "scripts" / "frameworks-requirements.txt").read_text()
    for package in ("agent-framework-core", "agent-framework-openai"):
        assert f"{package}=={version(package)}" in pins
    assert version("agent-framework-core") == "1.23.0"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


@tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"21 C in {city}"


def _agent(server: ScriptedServer, observed: LoopobsMiddleware) -> Agent:
    client = OpenAIChatCompletionClient(
        model="gpt-test", api_key="test-key", base_url=server.base_url
    )
    return Agent(
        client=client, name="weather_agent", tools=[get_weather], middleware=observed.middleware
    )


PRODUCTIVE = [
    Reply(calls=[("call_1", "get_weather", {"city": "Paris"})], usage=(120, 15)),
    Reply(text="It is 21 C in Paris.", usage=(160, 9)),
]


async def test_a_run_is_one_loopobs_run_with_the_servers_usage(stack: Stack) -> None:
    observed = LoopobsMiddleware(stack.observers)
    with ScriptedServer(PRODUCTIVE) as server:
        response = await _agent(server, observed).run("Weather in Paris?")
        assert len(server.requests) == 2
    assert response.text == "It is 21 C in Paris."
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    rec = stack.recorder
    (start,) = rec.of("on_run_start")
    assert start.agent == "weather_agent"
    assert [c.tool_call_id for c in rec.of("on_tool_pre")] == ["call_1"]
    assert [c.input for c in rec.of("on_tool_call_received")] == [{"city": "Paris"}]
    assert rec.of("on_run_end")[0].status == "completed"
    assert observed.active_runs == 0


def _looping() -> list[Reply]:
    return [
        Reply(calls=[(f"call_{i}", "get_weather", {"city": "Paris"})], usage=(50, 5))
        for i in range(40)
    ]


async def test_a_runaway_loop_is_stopped_before_the_next_model_call(stack: Stack) -> None:
    observed = LoopobsMiddleware(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with ScriptedServer(_looping()) as server:
        with pytest.raises(RunStopped) as info:
            await _agent(server, observed).run("loop")
        requests = len(server.requests)
    assert isinstance(info.value, LoopDetected)
    assert re.search(r"get_weather\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    assert requests == 5
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "loop_detected"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()
    assert observed.active_runs == 0


async def test_a_budget_stops_the_run(stack: Stack) -> None:
    observed = LoopobsMiddleware(stack.observers, detectors=[BudgetGuard(Budget(model_calls=2))])
    with ScriptedServer(_looping()) as server:
        with pytest.raises(RunStopped) as info:
            await _agent(server, observed).run("loop")
        assert len(server.requests) == 2
    assert info.value.status == "budget_exceeded"
    stack.check_nothing_open()


async def test_an_observer_that_raises_never_breaks_the_run() -> None:
    class Broken(RecordingObserver):
        def on_event(self, ctx: Any) -> None:
            raise RuntimeError("observer bug")

    with ScriptedServer(PRODUCTIVE) as server:
        response = await _agent(server, LoopobsMiddleware([Broken()])).run("Weather?")
    assert response.text == "It is 21 C in Paris."
