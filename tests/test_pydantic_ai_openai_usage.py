"""The pydantic-ai adapter on pydantic-ai's real OpenAI chat model, against a scripted server.

``OpenAIChatModel`` talks to ``tests/_openai_server.py`` on 127.0.0.1. It always asks for
``stream_options.include_usage``; a server that reports no usage at all (``Reply(usage=None)``,
as some OpenAI-compatible servers do) leaves the usage unknown, which the adapter must say
rather than report 0/0. Kept out of ``tests/test_adapters_*.py`` (also run in ``.venv-min``,
on pydantic-ai releases that do not mark omitted usage).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from loopobs import ModelRates
from loopobs.adapters.pydantic_ai import LoopobsCapability
from loopobs.testing import assert_contract, metric_points
from tests._adapter_checks import Stack
from tests._openai_server import Reply, ScriptedServer

_PRICES = {"gpt-test": ModelRates(input_per_mtok=1_000_000.0, output_per_mtok=0.0)}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    yield s
    s.close()


def _agent(server: ScriptedServer, stack: Stack) -> Agent[None, str]:
    model = OpenAIChatModel(
        "gpt-test", provider=OpenAIProvider(base_url=server.base_url, api_key="sk-test")
    )
    agent: Agent[None, str] = Agent(
        model, name="adder", capabilities=[LoopobsCapability(stack.observers, prices=_PRICES)]
    )

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    return agent


def _chat(stack: Stack, name: str) -> list[object]:
    return [(s.attributes or {}).get(name) for s in stack.finished("chat")]


def _replies(usage: tuple[int, int] | None) -> list[Reply]:
    return [
        Reply(calls=[("c1", "add", {"a": 1, "b": 2})], usage=usage and (12, 7)),
        Reply("the sum is 3", usage=usage and (30, 4)),
    ]


@pytest.mark.parametrize("streamed", [False, True])
async def test_usage_the_server_reported_is_on_the_spans(stack: Stack, streamed: bool) -> None:
    with ScriptedServer(_replies((1, 1)), usage_when_asked=True) as server:
        agent = _agent(server, stack)
        if streamed:
            async with agent.run_stream("add 1+2") as result:
                await result.get_output()
        else:
            await agent.run("add 1+2")
    assert [bool(r.get("stream")) for r in server.requests] == [streamed, streamed]
    assert _chat(stack, "gen_ai.request.stream") == [streamed, streamed]
    assert _chat(stack, "gen_ai.usage.input_tokens") == [12, 30]
    assert stack.recorder.of("on_run_end")[0].cost_usd == pytest.approx(42.0)
    assert_contract(stack.recorder.events)


@pytest.mark.parametrize("streamed", [False, True])
async def test_a_server_reporting_no_usage_leaves_it_unknown(stack: Stack, streamed: bool) -> None:
    """No usage in the completion or the stream: the chat spans carry no token counts, the
    events say unknown (usage_reported=False, usage None), the cost is unknown, not $0."""
    with ScriptedServer(_replies(None)) as server:
        agent = _agent(server, stack)
        if streamed:
            async with agent.run_stream("add 1+2") as result:
                await result.get_output()
        else:
            await agent.run("add 1+2")
    assert _chat(stack, "gen_ai.request.stream") == [streamed, streamed]
    assert _chat(stack, "gen_ai.usage.input_tokens") == [None, None]
    assert _chat(stack, "gen_ai.usage.output_tokens") == [None, None]
    successes = stack.recorder.of("on_stream_success")
    assert [c.usage_reported for c in successes] == [False, False]
    assert [c.cost_usd for c in successes] == [None, None]
    assert [r.usage for r in stack.recorder.of("on_response")] == [None, None]
    (end,) = stack.recorder.of("on_run_end")
    assert end.status == "completed"
    assert end.cost_usd is None
    # Neither metric path records a token count it was not told: no 0 in the histogram.
    assert stack.prom("gen_ai_client_token_usage_count") == 0
    assert stack.prom("loopobs_tokens_total") == 0
    assert "gen_ai.client.token.usage" not in metric_points(stack.reader)
    assert stack.prom("gen_ai_client_operation_duration_seconds_count") == 2
    assert_contract(stack.recorder.events)
