"""AgentLoop compaction: threshold checks before model calls, the compactor, ContextExceeded."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from loopobs import CompactionContext, ContextExceeded, RunStatus
from loopobs.contract.compaction import TruncatingCompactor, estimate_tokens
from loopobs.contract.model import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
)
from loopobs.llm import Reply, ToolCall
from loopobs.testing import assert_contract
from tests._loop_support import make_loop, names, search, u


def _calls(n: int) -> Reply:
    return Reply(tool_calls=(ToolCall("search", {"query": "x" * 40}),), usage=u(n, 1))


async def test_compaction_runs_at_the_threshold_before_the_model_call() -> None:
    """Over threshold × window, the loop compacts, reports real counts, then calls the model."""
    steps = [_calls(100), _calls(300), _calls(900), Reply(text="ok", usage=u(100, 1))]
    loop, rec, client = make_loop(
        steps, tools=[search], context_window=1000, system_prompt="be brief"
    )
    result = await loop.run("first question")
    assert result.ok
    assert_contract(rec.events)
    assert len(rec.of("on_compaction")) == 1
    ctx: CompactionContext = rec.of("on_compaction")[0]
    assert ctx.reason == "threshold"
    assert ctx.tokens_before >= 900
    assert ctx.tokens_after < ctx.tokens_before
    assert ctx.tokens_saved == ctx.tokens_before - ctx.tokens_after
    assert ctx.messages_removed == len(client.requests[2].messages) + 2 - len(
        client.requests[3].messages
    )
    events = names(rec.events)
    at = events.index("on_compaction")
    assert events[at - 1] == "on_turn_end"
    assert events[at + 1] == "on_turn_start"
    last = client.requests[3].messages
    assert last[0] == SystemMessage(content="be brief")
    assert last[1] == UserMessage(content="first question")
    assert result.messages[:2] == last[:2]
    assert _tool_pairs_intact(last)


async def test_no_compaction_below_the_threshold_or_without_a_window() -> None:
    """Under the threshold, or with context_window=None, nothing is compacted."""
    for window in (None, 100_000):
        loop, rec, _ = make_loop(
            [_calls(900), Reply(text="ok")], tools=[search], context_window=window
        )
        assert (await loop.run("q")).ok
        assert not rec.of("on_compaction")


async def test_a_context_that_cannot_fit_fails_the_run() -> None:
    """A context the compactor cannot bring under the window fails with ContextExceeded."""
    loop, rec, client = make_loop([Reply(text="never")], context_window=50)
    result = await loop.run("word " * 400)
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, ContextExceeded)
    assert result.error.limit == 50
    assert result.error.used >= 50
    assert client.requests == []
    assert names(rec.events) == ["on_run_start", "on_run_end"]
    assert rec.of("on_run_end")[0].status == "failed"


# -- the compactor's invariant, over random conversations ----------------------------------


def _tool_pairs_intact(messages: Sequence[Message]) -> bool:
    """Every tool result follows its call, and every call kept has all its results."""
    open_calls: set[str] = set()
    for m in messages:
        if isinstance(m, AssistantMessage):
            if open_calls:
                return False
            open_calls = {c.id for c in m.tool_calls}
        elif isinstance(m, ToolResultMessage):
            if m.tool_call_id not in open_calls:
                return False
            open_calls.discard(m.tool_call_id)
        elif open_calls:
            return False
    return not open_calls


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """A valid conversation: system?, first user, then user / answer / tool-exchange blocks."""
    text = st.text(min_size=0, max_size=60)
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(SystemMessage(content=draw(text)))
    out.append(UserMessage(content=draw(text)))
    ids = iter(range(10_000))
    for kind in draw(st.lists(st.sampled_from(["user", "answer", "tools"]), max_size=25)):
        if kind == "user":
            out.append(UserMessage(content=draw(text)))
        elif kind == "answer":
            out.append(AssistantMessage(content=draw(text)))
        else:
            calls = tuple(
                ToolCallPart(id=f"c{next(ids)}", name="t", arguments={"q": draw(text)})
                for _ in range(draw(st.integers(1, 3)))
            )
            out.append(AssistantMessage(content=draw(text), tool_calls=calls))
            out.extend(
                ToolResultMessage(tool_call_id=c.id, name="t", content=draw(text)) for c in calls
            )
    return out


@settings(max_examples=300, deadline=None)
@given(conversations(), st.integers(1, 400), st.integers(0, 6))
def test_truncating_compactor_never_splits_a_tool_exchange(
    messages: list[Message],
    target: int,
    preserve: int,
) -> None:
    """Compaction keeps system prompt and first user message, a recent suffix, whole exchanges."""
    out = TruncatingCompactor(preserve_recent=preserve).compact(messages, target)
    assert _tool_pairs_intact(out)
    head = 2 if isinstance(messages[0], SystemMessage) else 1
    assert out[:head] == messages[:head]
    tail = out[head:]
    assert tail == messages[len(messages) - len(tail) :]
    if estimate_tokens(out) > target:
        # over target only because every later cut would keep fewer than preserve_recent
        later = [i for i in range(1, len(tail)) if not isinstance(tail[i], ToolResultMessage)]
        assert all(len(tail) - i < preserve for i in later)
