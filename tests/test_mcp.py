"""MCP servers as tool sources, against the real SDK: the test server runs as a process.

The server (``tests/mcp_servers/tool_server.py``) is written with the SDK's
server API and spoken to over stdio and streamable HTTP on 127.0.0.1; nothing
of the protocol is imitated here.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop, LoopObserver, McpError, ToolNameClash, ToolPreContext, tool
from loopobs.contract.errors import ModelError
from loopobs.exporters import MetricsObserver, TracingObserver
from loopobs.llm.scripted import Fail, Reply, ScriptedClient, ToolCall
from loopobs.mcp import McpStdio, McpToolSource
from loopobs.testing import RecordingObserver, check_contract, metric_points
from tests._mcp import alive, children_of, http_server, stdio_server

pytestmark = pytest.mark.slow  # starts server processes


@pytest.fixture
def errlog(tmp_path: Path) -> Iterator[TextIO]:
    with (tmp_path / "server.log").open("w") as out:
        yield out


def calls(*steps: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(name, args) for name, args in steps))


def results(recorder: RecordingObserver) -> dict[str, Any]:
    return {c.tool_call_id: c for c in recorder.of("on_tool_post")}


async def test_stdio_tools_join_and_their_calls_carry_the_mcp_attributes(
    errlog: TextIO,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    rec = RecordingObserver()
    client = ScriptedClient([calls(("add", {"a": 2, "b": 3})), Reply(text="5")])
    loop = AgentLoop(
        client,
        model="m",
        tool_sources=[stdio_server(errlog)],
        observers=[rec, TracingObserver(tracer_provider), MetricsObserver(meter_provider)],
    )
    result = await loop.run("2+3?")
    assert result.ok
    assert {t.name for t in client.requests[0].tools} >= {"echo", "add", "fail", "grow"}
    post = rec.of("on_tool_post")[0]
    assert post.result == "5"
    assert not post.is_error
    assert post.mcp.server == "test"
    assert post.mcp.transport == "pipe"
    assert post.mcp.protocol_version
    assert post.mcp.request_id
    assert check_contract(rec.events) == []

    received = rec.of("on_tool_call_received")[0]
    assert received.annotations is None  # add: the server says nothing about it

    tool_spans = [
        s for s in span_exporter.get_finished_spans() if s.name.startswith("execute_tool")
    ]
    assert len(tool_spans) == 1  # the MCP attributes are on the one execute_tool span
    attrs = tool_spans[0].attributes or {}
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["network.transport"] == "pipe"
    assert attrs["jsonrpc.request.id"] == post.mcp.request_id
    assert attrs["mcp.protocol.version"] == post.mcp.protocol_version
    assert attrs["gen_ai.tool.name"] == "add"

    points = metric_points(metric_reader)["mcp.client.operation.duration"]
    assert len(points) == 1
    assert points[0].count == 1
    assert points[0].attributes["mcp.method.name"] == "tools/call"
    assert points[0].attributes["gen_ai.tool.name"] == "add"


async def test_server_tool_annotations_reach_the_events(errlog: TextIO) -> None:
    """readOnlyHint / idempotentHint become the tool's ToolAnnotations, as for local tools."""
    rec = RecordingObserver()
    client = ScriptedClient([calls(("echo", {"text": "x"})), Reply(text="x")])
    loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[stdio_server(errlog)])
    assert (await loop.run("q")).ok
    annotations = rec.of("on_tool_call_received")[0].annotations
    assert annotations.read_only is True
    assert annotations.idempotent is True
    assert annotations.side_effecting is False


async def test_the_server_joins_the_trace_through_params_meta(
    tmp_path: Path,
    errlog: TextIO,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    """The server process, instrumented with OTel, reads traceparent from _meta."""
    spans_file = tmp_path / "server-spans.jsonl"
    server = stdio_server(errlog, env={"LOOPOBS_TEST_SPANS": str(spans_file)})
    client = ScriptedClient([calls(("echo", {"text": "hi"})), Reply(text="hi")])
    loop = AgentLoop(
        client, model="m", tool_sources=[server], observers=[TracingObserver(tracer_provider)]
    )
    assert (await loop.run("say hi")).ok
    tool_span = next(s for s in span_exporter.get_finished_spans() if s.name == "execute_tool echo")
    server_spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    call_span = next(s for s in server_spans if s["name"] == "tools/call echo")
    assert call_span["trace_id"] == f"{tool_span.context.trace_id:032x}"
    assert call_span["parent_span_id"] == f"{tool_span.context.span_id:016x}"


async def test_streamable_http_server(
    tmp_path: Path,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    rec = RecordingObserver()
    with http_server(tmp_path / "http.log") as server:
        client = ScriptedClient([calls(("echo", {"text": "over http"})), Reply(text="ok")])
        loop = AgentLoop(
            client,
            model="m",
            tool_sources=[server],
            observers=[rec, TracingObserver(tracer_provider)],
        )
        assert (await loop.run("q")).ok
    post = rec.of("on_tool_post")[0]
    assert post.result == "over http"
    assert post.mcp.transport == "tcp"
    assert post.mcp.session_id
    span = next(s for s in span_exporter.get_finished_spans() if s.name == "execute_tool echo")
    attrs = span.attributes or {}
    assert attrs["network.transport"] == "tcp"
    assert attrs["mcp.session.id"] == post.mcp.session_id
    assert attrs["server.address"] == "127.0.0.1"
    assert attrs["network.protocol.name"] == "http"


async def test_name_clashes_are_an_error_unless_the_server_has_a_prefix(errlog: TextIO) -> None:
    @tool
    def echo(text: str) -> str:
        """A local echo."""
        return text

    loop = AgentLoop(
        ScriptedClient([Reply(text="never")]),
        model="m",
        tools=[echo],
        tool_sources=[stdio_server(errlog)],
    )
    with pytest.raises(ToolNameClash, match="echo"):
        await loop.run("q")
    with pytest.raises(ToolNameClash):
        await loop.open()
    assert loop.open_sources == ()

    client = ScriptedClient(
        [calls(("t_echo", {"text": "remote"}), ("echo", {"text": "local"})), Reply(text="done")]
    )
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m",
        tools=[echo],
        observers=[rec],
        tool_sources=[stdio_server(errlog, prefix="t")],
    )
    assert (await loop.run("q")).ok
    posts = {p.tool: p for p in rec.of("on_tool_post")}
    assert (posts["t_echo"].result, posts["echo"].result) == ("remote", "local")
    assert posts["t_echo"].mcp is not None
    assert posts["echo"].mcp is None


async def test_the_tool_list_refreshes_on_list_changed(errlog: TextIO) -> None:
    loop_ref: list[AgentLoop] = []

    async def until_shout_is_listed(query: str) -> str:
        # The notification arrives asynchronously; wait for the refresh (an event, not a time).
        source = loop_ref[0].open_sources[0]
        assert isinstance(source, McpToolSource)
        if not client.requests:
            return ""  # before the first call: grow has not run yet
        while "shout" not in source.tools():
            await source.changed()
        return ""

    client = ScriptedClient(
        [calls(("grow", {})), calls(("shout", {"text": "hey"})), Reply(text="HEY")]
    )
    rec = RecordingObserver()
    loop = AgentLoop(
        client,
        model="m",
        tool_sources=[stdio_server(errlog)],
        observers=[rec],
        context_providers=[until_shout_is_listed],
        context_provider_timeout=30,
    )
    loop_ref.append(loop)
    async with loop:
        result = await loop.run("grow a tool")
    assert result.ok
    assert "shout" not in {t.name for t in client.requests[0].tools}
    assert "shout" in {t.name for t in client.requests[1].tools}
    assert [p.result for p in rec.of("on_tool_post")] == ["grown", "HEY"]


async def test_failures_are_tool_results_the_model_sees(errlog: TextIO) -> None:
    rec = RecordingObserver()
    client = ScriptedClient(
        [
            calls(
                ("fail", {"reason": "nope"}),
                ("reject", {"value": "x"}),
                ("add", {"a": "not a number", "b": 1}),
            ),
            calls(("sleep", {"seconds": 30})),
            Reply(text="done"),
        ]
    )
    loop = AgentLoop(
        client, model="m", observers=[rec], tool_sources=[stdio_server(errlog, timeout=1.0)]
    )
    result = await loop.run("q")
    assert result.ok  # every failure was the model's to see; the run went on
    posts = rec.of("on_tool_post")
    by_tool = {p.tool: p for p in posts}
    assert all(p.is_error for p in posts)
    assert by_tool["fail"].error.kind == "tool_error"
    assert "refused: nope" in by_tool["fail"].result
    assert by_tool["reject"].error.kind == "protocol"
    assert by_tool["reject"].error.code == -32602
    assert by_tool["reject"].mcp.status_code == "-32602"
    assert "not acceptable" in by_tool["reject"].result
    assert by_tool["add"].error.kind == "tool_error"  # the server validated the arguments
    assert by_tool["sleep"].error.kind == "timeout"
    tool_messages = [m for m in result.messages if m.role == "tool"]
    assert all(m.is_error for m in tool_messages)
    assert len(tool_messages) == 4


async def test_a_crash_mid_call_is_an_error_result_and_the_server_restarts(
    errlog: TextIO,
) -> None:
    rec = RecordingObserver()
    client = ScriptedClient(
        [calls(("pid", {})), calls(("crash", {})), calls(("pid", {})), Reply(text="done")]
    )
    loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[stdio_server(errlog)])
    result = await loop.run("q")
    assert result.ok
    first, crashed, second = rec.of("on_tool_post")
    assert crashed.is_error
    assert crashed.error.kind == "connection_closed"
    assert crashed.mcp.error_type == "connection_closed"
    assert not second.is_error
    assert second.result != first.result
    assert not alive(int(first.result))
    assert not alive(int(second.result))


async def test_a_server_that_cannot_start_fails_clearly(errlog: TextIO) -> None:
    loop = AgentLoop(
        ScriptedClient([Reply(text="never")]),
        model="m",
        tool_sources=[McpStdio("/nonexistent/mcp-server", name="ghost", errlog=errlog)],
    )
    with pytest.raises(McpError, match="ghost") as caught:
        await loop.run("q")
    assert caught.value.kind == "server_down"


async def test_a_server_restarts_at_most_restarts_times(errlog: TextIO) -> None:
    rec = RecordingObserver()
    client = ScriptedClient(
        [calls(("crash", {})), calls(("crash", {})), calls(("pid", {})), Reply(text="done")]
    )
    loop = AgentLoop(
        client, model="m", observers=[rec], tool_sources=[stdio_server(errlog, restarts=1)]
    )
    assert (await loop.run("q")).ok
    kinds = [p.error.kind for p in rec.of("on_tool_post")]
    assert kinds == ["connection_closed", "connection_closed", "server_down"]


# -- clean close: no process outlives its connection ---------------------------------------


async def test_per_run_servers_close_when_the_run_ends(errlog: TextIO) -> None:
    before = children_of(os.getpid())  # other tests' helpers may still run
    rec = RecordingObserver()
    client = ScriptedClient([calls(("pid", {})), Reply(text="done")])
    loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[stdio_server(errlog)])
    assert (await loop.run("q")).ok
    pid = int(rec.of("on_tool_post")[0].result)
    assert not alive(pid)
    assert children_of(os.getpid()) <= before


async def test_kept_open_servers_serve_every_run_until_closed(errlog: TextIO) -> None:
    before = children_of(os.getpid())  # other tests' helpers may still run
    rec = RecordingObserver()
    client = ScriptedClient(
        [calls(("pid", {})), Reply(text="a"), calls(("pid", {})), Reply(text="b")]
    )
    loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[stdio_server(errlog)])
    async with loop:
        await loop.run("one")
        await loop.run("two")
        first, second = (int(p.result) for p in rec.of("on_tool_post"))
        assert first == second
        assert alive(first)
    assert not alive(first)
    assert children_of(os.getpid()) <= before


async def test_servers_close_when_the_run_is_cancelled(errlog: TextIO) -> None:
    before = children_of(os.getpid())  # other tests' helpers may still run
    started = asyncio.Event()

    class SleepStarted(LoopObserver):
        def on_tool_pre(self, ctx: ToolPreContext) -> None:
            if ctx.tool == "sleep":
                started.set()

    rec = RecordingObserver()
    client = ScriptedClient(
        [calls(("pid", {})), calls(("sleep", {"seconds": 60})), Reply(text="never")]
    )
    loop = AgentLoop(
        client,
        model="m",
        observers=[rec, SleepStarted()],
        tool_sources=[stdio_server(errlog)],
        tool_timeout=None,
    )
    task = asyncio.create_task(loop.run("q"))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pid = int(rec.of("on_tool_post")[0].result)
    assert not alive(pid)
    assert children_of(os.getpid()) <= before
    assert check_contract(rec.events) == []


async def test_servers_close_when_the_run_fails(errlog: TextIO) -> None:
    before = children_of(os.getpid())  # other tests' helpers may still run
    rec = RecordingObserver()
    client = ScriptedClient(
        [calls(("pid", {})), Fail(ModelError("the model is gone", retryable=False))]
    )
    loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[stdio_server(errlog)])
    result = await loop.run("q")
    assert result.status == "failed"
    assert not alive(int(rec.of("on_tool_post")[0].result))
    assert children_of(os.getpid()) <= before


def test_mcp_servers_is_tool_sources_and_warns() -> None:
    """The old ``mcp_servers=`` still adds the servers, as ``tool_sources`` does, and warns."""
    server = McpStdio(sys.executable, ["-m", "tests.mcp_servers.tool_server"])
    with pytest.warns(DeprecationWarning, match="tool_sources"):
        loop = AgentLoop(ScriptedClient([]), model="m", mcp_servers=[server])
    assert loop.tool_sources == (server,)
