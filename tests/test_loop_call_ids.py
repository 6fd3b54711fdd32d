"""Tool calls are distinct events whatever ids the model sends."""

from __future__ import annotations

import asyncio
from typing import Any

from loopobs import AgentLoop, AssistantMessage, ToolResultMessage, tool
from loopobs.exporters import TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, assert_contract, spans_by_name


@tool
async def wait(ms: int) -> str:
    """Sleep ``ms`` milliseconds."""
    await asyncio.sleep(ms / 1000)
    return f"waited {ms}"


async def test_parallel_calls_with_one_id_stay_distinct(
    tracer_provider: Any, span_exporter: Any
) -> None:
    """Two parallel calls sharing an id: the contract holds, each call has its own span and
    its own result, and the ids sent back to the model tell them apart."""
    rec = RecordingObserver()
    client = ScriptedClient(
        [
            Reply(
                tool_calls=(
                    ToolCall("wait", {"ms": 30}, id="dup"),
                    ToolCall("wait", {"ms": 1}, id="dup"),
                )
            ),
            Reply(text="done"),
        ]
    )
    loop = AgentLoop(
        client,
        model="m1",
        tools=[wait],
        detectors=[],
        observers=[rec, TracingObserver(tracer_provider)],
    )
    result = await loop.run("go")
    assert result.ok
    assert_contract(rec.events)
    received = [c.tool_call_id for c in rec.of("on_tool_call_received")]
    assert len(set(received)) == 2
    assert received[0] == "dup"
    posts = {p.tool_call_id: p.result for p in rec.of("on_tool_post")}
    assert posts == {received[0]: "waited 30", received[1]: "waited 1"}
    tools = spans_by_name(span_exporter)["execute_tool wait"]
    assert sorted(s.attributes["gen_ai.tool.call.id"] for s in tools) == sorted(received)
    # the conversation the model sees next pairs each call with its own result
    sent = client.requests[1].messages
    calls = next(m for m in sent if isinstance(m, AssistantMessage) and m.tool_calls).tool_calls
    results = {m.tool_call_id: m.content for m in sent if isinstance(m, ToolResultMessage)}
    assert [results[c.id] for c in calls] == ["waited 30", "waited 1"]


async def test_a_suffix_never_takes_an_id_the_model_used() -> None:
    """Renaming a repeated id avoids every id of the response, also ones that look renamed."""
    rec = RecordingObserver()
    client = ScriptedClient(
        [
            Reply(
                tool_calls=(
                    ToolCall("wait", {"ms": 1}, id="a"),
                    ToolCall("wait", {"ms": 1}, id="a"),
                    ToolCall("wait", {"ms": 1}, id="a_2"),
                )
            ),
            Reply(text="done"),
        ]
    )
    loop = AgentLoop(client, model="m1", tools=[wait], detectors=[], observers=[rec])
    assert (await loop.run("go")).ok
    ids = [c.tool_call_id for c in rec.of("on_tool_call_received")]
    assert len(set(ids)) == 3
    assert ids[0] == "a"
    assert ids[2] == "a_2"
    assert_contract(rec.events)
