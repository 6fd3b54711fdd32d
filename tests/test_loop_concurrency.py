"""AgentLoop concurrency: many runs on separate sessions of one loop never mix."""

from __future__ import annotations

import asyncio

from loopobs import AgentLoop, Usage
from loopobs.contract.model import ModelRequest, UserMessage
from loopobs.llm import Reply, ScriptedClient, Step, ToolCall
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_support import add, names, search

RUNS = 100


def _script(request: ModelRequest) -> Step:
    """Two tool turns then an answer; usage derived from the run's number."""
    first = request.messages[0]
    assert isinstance(first, UserMessage)
    n = int(first.content.split()[1])
    done = sum(1 for m in request.messages if m.role == "assistant")
    usage = Usage(input_tokens=n + done, output_tokens=1)
    if done < 2:
        return Reply(
            text=f"step {done}",
            usage=usage,
            tool_calls=(
                ToolCall("search", {"query": f"run {n}"}),
                ToolCall("add", {"a": n, "b": done}),
            )
            if done == 0
            else (ToolCall("add", {"a": n, "b": 1}),),
        )
    return Reply(text=f"answer {n}", usage=usage)


async def test_100_concurrent_runs_on_separate_sessions() -> None:
    """100 concurrent runs: each stream complete, never mixed, usage equal to the script's."""
    rec = RecordingObserver()
    client = ScriptedClient(_script, latency_s=0.001)
    loop = AgentLoop(client, model="m1", tools=[search, add], observers=[rec])
    results = await asyncio.gather(*(loop.run(f"run {n}") for n in range(RUNS)))
    assert_contract(rec.events)
    assert len({r.run_id for r in results}) == RUNS
    assert len({r.session.id for r in results}) == RUNS
    reference = None
    for n, result in enumerate(results):
        assert result.ok
        assert result.answer == f"answer {n}"
        assert result.usage == Usage(input_tokens=3 * n + 3, output_tokens=3)
        events = rec.for_run(result.run_id)
        start = events[0][1]
        assert getattr(start, "session_id", None) == result.session.id
        assert [
            t for t in (getattr(c, "turn", None) for _, c in events) if t is not None
        ] == sorted(t for t in (getattr(c, "turn", None) for _, c in events) if t is not None)
        tool_msgs = [m.content for m in result.messages if m.role == "tool"]
        assert tool_msgs == [f"results for run {n} (limit 3)", str(n), str(n + 1)]
        shape = names(events)
        reference = reference or shape
        assert shape == reference
    # the runs really interleaved: some run started before another one ended
    order = [h for h, _ in rec.events if h in ("on_run_start", "on_run_end")]
    assert order[:2] == ["on_run_start", "on_run_start"]
    total = sum((r.usage for r in results), Usage())
    assert total.input_tokens == sum(3 * n + 3 for n in range(RUNS))
