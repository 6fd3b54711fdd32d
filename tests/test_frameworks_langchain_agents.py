"""LangChain 1.x ``create_agent`` with the loopobs middleware, on LangChain's own fake model.

``GenericFakeChatModel`` (langchain-core's test model) answers from a script; ``bind_tools``
returns it unchanged, as LangChain's own agent tests do. Runs in the frameworks' venv
(``make test-frameworks``, where ``langchain`` 1.x is installed); elsewhere it skips.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="langchain 1.x runs in make test-frameworks")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from loopobs import Budget, BudgetGuard, LoopDetected, RepetitionDetector, Usage
from loopobs.adapters import RunStopped
from loopobs.adapters.langchain_middleware import LoopobsMiddleware
from loopobs.testing import assert_contract
from tests._adapter_checks import Stack

ROOT = Path(__file__).resolve().parents[1]


def test_verified_against_the_pinned_release() -> None:
    pins = (ROOT / "scripts" / "frameworks-requirements.txt").read_text()
    assert f"langchain=={version('langchain')}" in pins
    assert version("langchain") == "1.5.2"


class ToolModel(GenericFakeChatModel):
    """LangChain's fake chat model, accepting the tools create_agent binds."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def _ai(
    text: str = "",
    calls: Sequence[tuple[str, dict[str, Any], str]] = (),
    usage: tuple[int, int] = (10, 2),
) -> AIMessage:
    return AIMessage(
        content=text,
        tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls],
        usage_metadata={
            "input_tokens": usage[0],
            "output_tokens": usage[1],
            "total_tokens": sum(usage),
        },
    )


@tool
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"21 C in {city}"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def _agent(answers: Sequence[AIMessage], middleware: LoopobsMiddleware) -> Any:
    return create_agent(
        ToolModel(messages=iter(answers)), tools=[get_weather], middleware=[middleware]
    )


def _ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def test_a_run_reports_model_calls_usage_and_tools(stack: Stack) -> None:
    middleware = LoopobsMiddleware(stack.observers, agent="weather_agent")
    agent = _agent(
        [
            _ai(calls=[("get_weather", {"city": "Paris"}, "call_1")], usage=(120, 15)),
            _ai("It is 21 C in Paris.", usage=(160, 9)),
        ],
        middleware,
    )
    result = agent.invoke(_ask("Weather in Paris?"))
    assert result["messages"][-1].content == "It is 21 C in Paris."
    stack.check_run(usage=Usage(input_tokens=280, output_tokens=24), chats=2, tools=1)
    rec = stack.recorder
    assert rec.of("on_run_start")[0].agent == "weather_agent"
    assert [c.tool_call_id for c in rec.of("on_tool_pre")] == ["call_1"]
    assert [c.input for c in rec.of("on_tool_call_received")] == [{"city": "Paris"}]
    assert rec.of("on_run_end")[0].status == "completed"
    assert middleware.active_runs == 0


async def test_an_async_run_is_reported_the_same(stack: Stack) -> None:
    middleware = LoopobsMiddleware(stack.observers)
    agent = _agent(
        [_ai(calls=[("get_weather", {"city": "Rome"}, "call_1")]), _ai("Sunny.")], middleware
    )
    await agent.ainvoke(_ask("Weather in Rome?"))
    stack.check_run(usage=Usage(input_tokens=20, output_tokens=4), chats=2, tools=1)


def _looping() -> list[AIMessage]:
    return [_ai(calls=[("get_weather", {"city": "Paris"}, f"call_{i}")]) for i in range(40)]


def test_a_runaway_loop_is_stopped_before_the_next_model_call(stack: Stack) -> None:
    middleware = LoopobsMiddleware(
        stack.observers, detectors=[RepetitionDetector(warn_after=3, stop_after=5)]
    )
    with pytest.raises(RunStopped) as info:
        _agent(_looping(), middleware).invoke(_ask("loop"))
    assert isinstance(info.value, LoopDetected)
    assert re.search(r"get_weather\(args#[0-9a-f]{8}\) repeated 5 times", str(info.value))
    rec = stack.recorder
    assert len(rec.of("on_stream_start")) == 5
    (end,) = rec.of("on_run_end")
    assert end.status == "loop_detected"
    assert_contract(rec.events)
    stack.check_nothing_open()
    assert middleware.active_runs == 0


def test_a_budget_stops_the_run(stack: Stack) -> None:
    middleware = LoopobsMiddleware(stack.observers, detectors=[BudgetGuard(Budget(model_calls=3))])
    with pytest.raises(RunStopped) as info:
        _agent(_looping(), middleware).invoke(_ask("loop"))
    assert info.value.status == "budget_exceeded"
    assert len(stack.recorder.of("on_stream_start")) == 3
    stack.check_nothing_open()


@tool
def broken(city: str) -> str:
    """A tool that fails."""
    raise ValueError(f"no data for {city}")


def test_a_tool_exception_that_ends_the_graph_ends_the_run(stack: Stack) -> None:
    middleware = LoopobsMiddleware(stack.observers)
    agent: Any = create_agent(
        ToolModel(messages=iter([_ai(calls=[("broken", {"city": "Oslo"}, "call_1")])])),
        tools=[broken],
        middleware=[middleware],
    )
    with pytest.raises(ValueError, match="no data for Oslo"):
        agent.invoke(_ask("Weather in Oslo?"))
    (post,) = stack.recorder.of("on_tool_post")
    assert post.is_error
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "failed"
    assert_contract(stack.recorder.events)
    stack.check_nothing_open()
    assert middleware.active_runs == 0
