"""AgentLoop and budgets: cost on results and events, a stop before the call that would cross."""

from __future__ import annotations

import math
from typing import Any

# A dev dependency: a plain import, so a missing package fails the suite instead of skipping.
import genai_prices
import pytest

from loopobs import (
    AgentLoop,
    Budget,
    BudgetExceeded,
    BudgetExceededContext,
    Conversation,
    ModelRates,
    RunStatus,
    StreamSuccessContext,
    Usage,
)
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_support import search


def gpt4o_cost(usage: Usage) -> float:
    """genai-prices' own price of ``usage`` on gpt-4o."""
    gp = genai_prices.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
    )
    return float(genai_prices.calc_price(gp, "gpt-4o", provider_id="openai").total_price)


def runaway_usage(i: int) -> Usage:
    """The i-th call of a runaway loop: its context grows by 1000 tokens a call."""
    return Usage(input_tokens=1000 * (i + 1), output_tokens=50)


def runaway(n: int = 20) -> list[Reply]:
    return [
        Reply(tool_calls=(ToolCall("search", {"query": f"q{i}"}),), usage=runaway_usage(i))
        for i in range(n)
    ]


def loop_over(steps: Any, **kwargs: Any) -> tuple[AgentLoop, RecordingObserver, ScriptedClient]:
    rec = RecordingObserver()
    client = ScriptedClient(steps)
    client.provider = "openai"  # priced as OpenAI's gpt-4o
    kwargs.setdefault("detectors", [])
    loop = AgentLoop(client, model="gpt-4o", tools=[search], observers=[rec], **kwargs)
    return loop, rec, client


async def test_a_runaway_loop_stops_before_the_call_that_would_cross_the_budget() -> None:
    """Budget(usd=0.01): calls are made while they fit; the one that would cross is not made."""
    loop, rec, client = loop_over(runaway(), budget=Budget(usd=0.01))
    result = await loop.run("find it")

    made = len(client.requests)
    costs = [gpt4o_cost(runaway_usage(i)) for i in range(made + 1)]
    assert made == 2
    assert sum(costs[:made]) <= 0.01 < sum(costs[: made + 1])
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert isinstance(result.error, BudgetExceeded)
    assert (result.error.limit, result.error.budget, result.error.scope) == ("usd", 0.01, "run")
    assert result.error.value > 0.01
    assert result.cost_usd == pytest.approx(sum(costs[:made]), rel=1e-12)
    assert result.spend.model_calls == made
    assert result.spend.tool_calls == made
    # the stop came before a turn was opened for the refused call
    hooks = [h for h, _ in rec.events]
    stop_at = hooks.index("on_budget_exceeded")
    assert hooks[stop_at + 1 :] == ["on_run_end"]
    assert hooks.count("on_turn_start") == made
    (stop,) = rec.of("on_budget_exceeded")
    assert (stop.action, stop.limit) == ("stop", "usd")
    end = rec.of("on_run_end")[0]
    assert end.status == "budget_exceeded"
    assert end.cost_usd == result.cost_usd
    assert_contract(rec.events)


async def test_every_call_and_turn_carries_genai_prices_cost() -> None:
    """cost_usd on stream events and turn ends is genai-prices' figure; the run's is the sum."""
    steps = [
        Reply(
            tool_calls=(ToolCall("search", {"query": "a"}),),
            usage=Usage(input_tokens=4000, output_tokens=120, cache_read_input_tokens=3000),
        ),
        Reply(text="done", usage=Usage(input_tokens=4500, output_tokens=40)),
    ]
    loop, rec, _ = loop_over(steps)
    session = Conversation()
    result = await loop.run("q", session=session)
    assert result.ok
    expected = [gpt4o_cost(s.usage) for s in steps if s.usage is not None]
    streams: list[StreamSuccessContext] = rec.of("on_stream_success")
    assert [s.cost_usd for s in streams] == pytest.approx(expected, rel=1e-12)
    assert [t.cost_usd for t in rec.of("on_turn_end")] == pytest.approx(expected, rel=1e-12)
    assert result.cost_usd == pytest.approx(sum(expected), rel=1e-12)
    assert session.cost_usd == result.cost_usd
    assert rec.of("on_budget_exceeded") == []
    await loop.run("again", session=session)  # the script is spent: that run fails, priced at 0
    assert session.spend.model_calls == 3


async def test_an_unpriced_model_makes_the_cost_unknown_not_zero() -> None:
    """No price: the call's, turn's and run's cost is None, and the call counts as unpriced."""
    rec = RecordingObserver()
    loop = AgentLoop(
        ScriptedClient([Reply(text="hi", usage=Usage(input_tokens=10, output_tokens=2))]),
        model="house-model-7b",
        observers=[rec],
        detectors=[],
    )
    result = await loop.run("q")
    assert result.ok
    assert rec.of("on_stream_success")[0].cost_usd is None
    assert rec.of("on_turn_end")[0].cost_usd is None
    assert rec.of("on_run_end")[0].cost_usd is None
    assert result.cost_usd is None
    assert result.spend.unpriced_calls == 1


async def test_user_prices_apply_to_custom_models() -> None:
    """AgentLoop(prices=...) prices a model genai-prices does not know."""
    loop = AgentLoop(
        ScriptedClient(
            [Reply(text="hi", usage=Usage(input_tokens=1_000_000, output_tokens=100_000))]
        ),
        model="house-model-7b",
        detectors=[],
        prices={"house-model-7b": ModelRates(input_per_mtok=0.2, output_per_mtok=1)},
    )
    result = await loop.run("q")
    assert result.cost_usd == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("budget", "calls", "limit"),
    [
        (Budget(model_calls=3), 3, "model_calls"),
        (Budget(input_tokens=4_500), 2, "input_tokens"),
        (Budget(total_tokens=5_000), 2, "total_tokens"),
    ],
)
async def test_count_limits_refuse_the_call_that_would_cross_them(
    budget: Budget, calls: int, limit: str
) -> None:
    """Model calls and tokens are checked before each call with the request's estimate."""
    loop, rec, client = loop_over(runaway(), budget=budget)
    result = await loop.run("go")
    assert len(client.requests) == calls
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert isinstance(result.error, BudgetExceeded)
    assert result.error.limit == limit
    assert_contract(rec.events)


async def test_tool_calls_are_checked_after_each_call_and_the_wave_finishes() -> None:
    """Budget(tool_calls=2): the wave that crosses runs to the end; no model call follows."""
    wave = Reply(
        tool_calls=tuple(ToolCall("search", {"query": f"q{i}"}) for i in range(3)),
        usage=Usage(input_tokens=100, output_tokens=10),
    )
    loop, rec, client = loop_over([wave, Reply(text="never")], budget=Budget(tool_calls=2))
    result = await loop.run("go")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert len(client.requests) == 1
    assert len(rec.of("on_tool_post")) == 3
    (stop,) = rec.of("on_budget_exceeded")
    assert (stop.limit, stop.value) == ("tool_calls", 3.0)
    # every tool call of the conversation has its result, so the session can go on
    tool_results = [m for m in result.messages if getattr(m, "tool_call_id", None)]
    assert len(tool_results) == 3
    assert_contract(rec.events)


async def test_a_response_that_crosses_the_budget_keeps_its_answer() -> None:
    """Checked after the response: the answer stays, the status says the budget was crossed."""
    loop, rec, _ = loop_over(
        [Reply(text="the answer", usage=Usage(input_tokens=10, output_tokens=900))],
        budget=Budget(output_tokens=500),
    )
    result = await loop.run("q")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert result.answer == "the answer"
    hooks = [h for h, _ in rec.events if h not in ("on_text_delta", "on_thinking_delta")]
    assert (
        hooks.index("on_response") < hooks.index("on_budget_exceeded") < hooks.index("on_turn_end")
    )


async def test_warn_at_warns_once_and_the_run_completes() -> None:
    """warn_at=0.5: one warning event when half the budget is used; no stop."""
    steps = [*runaway(3)[:3], Reply(text="done", usage=Usage(input_tokens=10, output_tokens=1))]
    loop, rec, _ = loop_over(steps, budget=Budget(usd=1.0, model_calls=6, warn_at=0.5))
    result = await loop.run("go")
    assert result.ok
    warnings: list[BudgetExceededContext] = rec.of("on_budget_exceeded")
    assert [(w.action, w.limit) for w in warnings] == [("warn", "model_calls")]
    assert_contract(rec.events)


async def test_a_session_budget_spans_runs_and_stops_later_runs_at_once() -> None:
    """Conversation(budget=...) adds up over runs; once crossed, a new run ends before any turn."""
    steps = [Reply(text=f"a{i}", usage=Usage(input_tokens=100, output_tokens=10)) for i in range(5)]
    loop, rec, client = loop_over(steps)
    session = Conversation(budget=Budget(model_calls=2))
    first = await loop.run("one", session=session)
    second = await loop.run("two", session=session)
    third = await loop.run("three", session=session)
    assert first.ok
    assert second.ok
    assert third.status is RunStatus.BUDGET_EXCEEDED
    assert isinstance(third.error, BudgetExceeded)
    assert third.error.scope == "session"
    assert len(client.requests) == 2
    assert third.turns == 0
    fourth = await loop.run("four", session=session)
    assert fourth.status is RunStatus.BUDGET_EXCEEDED
    stops = [e for e in rec.of("on_budget_exceeded") if e.action == "stop"]
    assert [e.run_id for e in stops] == [third.run_id, fourth.run_id]
    assert session.spend.model_calls == 2
    assert math.isclose(session.cost_usd or 0.0, (first.cost_usd or 0) + (second.cost_usd or 0))
    assert_contract(rec.events)


def test_the_readme_budget_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's budget example stops the runaway loop and prints what its comment says."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "Budget(" in b]
    exec(compile(block, "README.md", "exec"), {})
    printed = capsys.readouterr().out.strip()
    expected = re.search(r"^# (budget_exceeded .*)$", block, re.M)
    assert expected is not None
    assert printed == expected.group(1)


async def test_a_spent_wall_time_budget_stops_before_the_first_call() -> None:
    """Budget(wall_time_s=0): any running time is over it, so no model call is made."""
    loop, rec, client = loop_over(runaway(), budget=Budget(wall_time_s=0))
    result = await loop.run("go")
    assert result.status is RunStatus.BUDGET_EXCEEDED
    assert isinstance(result.error, BudgetExceeded)
    assert result.error.limit == "wall_time_s"
    assert client.requests == []
    assert result.turns == 0
    assert result.cost_usd == 0.0
    assert [h for h, _ in rec.events] == ["on_run_start", "on_budget_exceeded", "on_run_end"]


async def test_a_price_lookup_that_raises_never_breaks_the_run() -> None:
    """A user's lookup that raises prices nothing (cost unknown); the run completes."""

    class Broken:
        def cost_usd(
            self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
        ) -> float | None:
            raise RuntimeError("price service down")

    loop, rec, _ = loop_over(
        [Reply(text="fine", usage=Usage(input_tokens=5, output_tokens=1))],
        prices=Broken(),
        budget=Budget(usd=1.0),
    )
    result = await loop.run("q")
    assert result.ok
    assert result.cost_usd is None
    assert rec.of("on_stream_success")[0].cost_usd is None
