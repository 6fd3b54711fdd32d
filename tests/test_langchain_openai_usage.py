"""The LangChain adapter on LangChain's real OpenAI chat model, against a scripted server.

``langchain-openai``'s ``ChatOpenAI`` talks to ``tests/_openai_server.py`` on 127.0.0.1,
which streams the usage chunk as the real API does: only for a request with
``stream_options.include_usage`` (``ChatOpenAI(stream_usage=True)``; off by default for a
custom ``base_url``). Kept out of ``tests/test_adapters_*.py``, which also run in the
``.venv-min`` of the lowest framework releases, where langchain-openai is not installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from loopobs import ModelRates
from loopobs.adapters.langchain import LoopobsCallbackHandler
from loopobs.testing import assert_contract
from tests._adapter_checks import Stack
from tests._langgraph_app import react_graph
from tests._openai_server import Reply, ScriptedServer


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


_PRICES = {"gpt-test": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0)}
"""$1 an input token: a call with usage has a cost, one without has none."""

_REPLIES = [
    Reply(calls=[("c1", "add", {"a": 1, "b": 2})], usage=(12, 7)),
    Reply("the sum is 3", usage=(30, 4)),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(_REPLIES, usage_when_asked=True) as s:
        yield s


def _graph(server: ScriptedServer, **options: Any) -> Any:
    model = ChatOpenAI(
        model="gpt-test", base_url=server.base_url, api_key=SecretStr("sk-test"), **options
    )
    return react_graph(model.bind_tools([add]), [add])


def _chat(stack: Stack, name: str) -> list[object]:
    return [(s.attributes or {}).get(name) for s in stack.finished("chat")]


def test_invoke_is_not_streamed_and_reports_the_usage(stack: Stack, server: ScriptedServer) -> None:
    handler = LoopobsCallbackHandler(stack.observers)
    _graph(server).invoke({"messages": [("user", "add 1+2")]}, config={"callbacks": [handler]})
    assert [r.get("stream") for r in server.requests] == [False, False]
    assert _chat(stack, "gen_ai.request.stream") == [False, False]
    assert _chat(stack, "gen_ai.usage.input_tokens") == [12, 30]
    assert [c.usage_reported for c in stack.recorder.of("on_stream_success")] == [True, True]
    assert_contract(stack.recorder.events)


def test_a_stream_without_include_usage_has_unknown_usage_not_zero(
    stack: Stack, server: ScriptedServer
) -> None:
    """Streamed without stream_options.include_usage, the model reports no usage: the chat
    spans carry no token counts, the events say unknown, the cost is unknown."""
    handler = LoopobsCallbackHandler(stack.observers, prices=_PRICES)
    graph = _graph(server)
    list(
        graph.stream(
            {"messages": [("user", "add 1+2")]},
            config={"callbacks": [handler]},
            stream_mode="messages",
        )
    )
    assert [r.get("stream") for r in server.requests] == [True, True]
    assert [r.get("stream_options") for r in server.requests] == [None, None]
    assert _chat(stack, "gen_ai.request.stream") == [True, True]
    assert _chat(stack, "gen_ai.usage.input_tokens") == [None, None]
    assert _chat(stack, "gen_ai.usage.output_tokens") == [None, None]
    successes = stack.recorder.of("on_stream_success")
    assert [c.usage_reported for c in successes] == [False, False]
    assert [c.cost_usd for c in successes] == [None, None]
    assert [r.usage for r in stack.recorder.of("on_response")] == [None, None]
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "completed"
    assert end.cost_usd is None
    assert_contract(stack.recorder.events)


def test_a_stream_with_include_usage_reports_it(stack: Stack, server: ScriptedServer) -> None:
    handler = LoopobsCallbackHandler(stack.observers, prices=_PRICES)
    graph = _graph(server, stream_usage=True)
    list(
        graph.stream(
            {"messages": [("user", "add 1+2")]},
            config={"callbacks": [handler]},
            stream_mode="messages",
        )
    )
    assert [r.get("stream_options") for r in server.requests] == [{"include_usage": True}] * 2
    assert _chat(stack, "gen_ai.request.stream") == [True, True]
    assert _chat(stack, "gen_ai.usage.input_tokens") == [12, 30]
    assert _chat(stack, "gen_ai.usage.output_tokens") == [7, 4]
    assert stack.recorder.of("on_run_end")[0].cost_usd == pytest.approx(42.0)


def test_a_model_built_to_stream_says_so_when_the_call_starts(
    stack: Stack, server: ScriptedServer
) -> None:
    """ChatOpenAI(streaming=True) asks for a stream in its invocation parameters: the chat
    span has gen_ai.request.stream from its start; invoke() then streams too."""
    handler = LoopobsCallbackHandler(stack.observers)
    _graph(server, streaming=True).invoke(
        {"messages": [("user", "add 1+2")]}, config={"callbacks": [handler]}
    )
    assert [r.get("stream") for r in server.requests] == [True, True]
    assert [c.stream for c in stack.recorder.of("on_stream_start")] == [True, True]
    assert _chat(stack, "gen_ai.request.stream") == [True, True]
