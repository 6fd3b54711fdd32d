"""AgentLoop under random scripts: the event contract holds and usage adds up, every time."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs import ModelError, RateLimited, StreamError, Suspend, Usage, tool
from loopobs.llm import Fail, Reply, Step, ToolCall
from loopobs.testing import check_contract
from tests._loop_support import add, explode, make_loop, scripted_usage, search


@tool
def gate() -> Suspend:
    """Parks the run for a person."""
    return Suspend("check")


CALLS = st.sampled_from(
    [
        ToolCall("search", {"query": "q"}),
        ToolCall("add", {"a": 1, "b": 2}),
        ToolCall("add", {"a": "one"}),
        ToolCall("search", '{"query": '),
        ToolCall("missing", {}),
        ToolCall("explode", {}),
        ToolCall("gate", {}),
    ]
)
USAGE = st.builds(
    lambda i, o: Usage(input_tokens=i, output_tokens=o), st.integers(0, 500), st.integers(0, 100)
)
REPLY = st.builds(
    lambda text, calls, usage, thinking: Reply(
        text=text, tool_calls=tuple(calls), usage=usage, thinking=thinking
    ),
    st.text(max_size=20),
    st.lists(CALLS, max_size=4),
    st.none() | USAGE,
    st.none() | st.text(max_size=10),
)
FAIL = st.sampled_from(
    [
        Fail(RateLimited()),
        Fail(StreamError("reset")),
        Fail(ModelError("bad request", status_code=400)),
    ]
)
STEP: st.SearchStrategy[Step] = st.one_of(REPLY, REPLY, FAIL)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(STEP, max_size=12), st.booleans(), st.integers(1, 6))
def test_random_scripts_keep_the_contract(
    steps: list[Step], parallel: bool, max_turns: int
) -> None:
    """Any script of replies, tools, bad calls, failures and parks keeps the event contract."""
    loop, rec, client = make_loop(
        steps,
        tools=[search, add, explode, gate],
        fallback_models=["m2"],
        parallel_tool_calls=parallel,
        max_turns=max_turns,
    )
    result = loop.run_sync("go")
    assert check_contract(rec.events) == []
    played = len(steps) - client.remaining
    assert result.usage == scripted_usage(steps[:played])
    end = rec.of("on_run_end")[0]
    assert end.status == result.status.value
    assert (end.input_tokens, end.output_tokens) == (
        result.usage.input_tokens,
        result.usage.output_tokens,
    )
    assert end.total_turns == result.turns == len(rec.of("on_turn_start"))
    assert len(rec.of("on_stream_start")) == len(client.requests)
