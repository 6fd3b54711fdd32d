"""MCP servers on the HTTP+SSE transport, against the real SDK: the test server runs as a process.

The server (``tests/mcp_servers/tool_server.py``, run with ``sse PORT``) is written
with the SDK's server API and listens on 127.0.0.1; the loop reaches it with
:class:`~loopobs.mcp.McpSse`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop
from loopobs.exporters import MetricsObserver, TracingObserver
from loopobs.llm.scripted import Reply, ScriptedClient, ToolCall
from loopobs.mcp import McpSse
from loopobs.testing import RecordingObserver, check_contract, metric_points
from tests._mcp import alive, children_of, connections_to, sse_server

pytestmark = pytest.mark.slow  # starts server processes


def calls(*steps: tuple[str, dict[str, Any]]) -> Reply:
    return Reply(tool_calls=tuple(ToolCall(name, args) for name, args in steps))


def port_of(spec: McpSse) -> int:
    return int(spec.url.rsplit(":", 1)[1].split("/", 1)[0])


async def test_sse_tools_are_listed_and_called_with_the_mcp_attributes(
    tmp_path: Path,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
    meter_provider: MeterProvider,
    metric_reader: InMemoryMetricReader,
) -> None:
    rec = RecordingObserver()
    client = ScriptedClient([calls(("echo", {"text": "over sse"})), Reply(text="ok")])
    with sse_server(tmp_path / "sse.log") as (server, _):
        loop = AgentLoop(
            client,
            model="m",
            tool_sources=[server],
            observers=[rec, TracingObserver(tracer_provider), MetricsObserver(meter_provider)],
        )
        result = await loop.run("q")
    assert result.ok
    assert {t.name for t in client.requests[0].tools} >= {"echo", "add", "fail", "pid"}
    post = rec.of("on_tool_post")[0]
    assert post.result == "over sse"
    assert not post.is_error
    assert post.mcp.server == "sse-test"
    assert post.mcp.transport == "tcp"
    assert post.mcp.session_id  # the session_id of the server's endpoint event
    assert post.mcp.protocol_version
    assert post.mcp.request_id
    assert check_contract(rec.events) == []

    tool_spans = [
        s for s in span_exporter.get_finished_spans() if s.name.startswith("execute_tool")
    ]
    assert len(tool_spans) == 1  # the MCP attributes are on the one execute_tool span
    attrs = tool_spans[0].attributes or {}
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["network.transport"] == "tcp"
    assert attrs["network.protocol.name"] == "http"
    assert attrs["mcp.session.id"] == post.mcp.session_id
    assert attrs["mcp.protocol.version"] == post.mcp.protocol_version
    assert attrs["jsonrpc.request.id"] == post.mcp.request_id
    assert attrs["server.address"] == "127.0.0.1"
    assert attrs["server.port"] == port_of(server)

    points = metric_points(metric_reader)["mcp.client.operation.duration"]
    assert [(p.count, p.attributes["network.transport"]) for p in points] == [(1, "tcp")]


async def test_sse_failures_are_tool_results_the_model_sees(tmp_path: Path) -> None:
    rec = RecordingObserver()
    client = ScriptedClient(
        [
            calls(("fail", {"reason": "nope"}), ("reject", {"value": "x"})),
            calls(("sleep", {"seconds": 30})),
            calls(("crash", {})),
            calls(("pid", {})),
            Reply(text="done"),
        ]
    )
    with sse_server(tmp_path / "sse.log", timeout=1.0, restarts=1) as (server, _):
        loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[server])
        result = await loop.run("q")
    assert result.ok  # every failure was the model's to see; the run went on
    by_tool = {p.tool: p for p in rec.of("on_tool_post")}
    assert all(p.is_error for p in by_tool.values())
    assert by_tool["fail"].error.kind == "tool_error"
    assert by_tool["fail"].mcp.error_type == "tool_error"
    assert "refused: nope" in by_tool["fail"].result
    assert by_tool["reject"].error.kind == "protocol"
    assert by_tool["reject"].error.code == -32602
    assert by_tool["reject"].mcp.status_code == "-32602"
    assert by_tool["sleep"].error.kind == "timeout"
    assert by_tool["crash"].error.kind == "connection_closed"
    # Nobody starts an HTTP server again: the reconnection fails, and says so.
    assert by_tool["pid"].error.kind == "server_down"


async def test_the_sse_server_joins_the_trace_through_params_meta(
    tmp_path: Path,
    tracer_provider: TracerProvider,
    span_exporter: InMemorySpanExporter,
) -> None:
    """The server process, instrumented with OTel, reads traceparent from _meta."""
    spans_file = tmp_path / "server-spans.jsonl"
    client = ScriptedClient([calls(("echo", {"text": "hi"})), Reply(text="hi")])
    with sse_server(tmp_path / "sse.log", env={"LOOPOBS_TEST_SPANS": str(spans_file)}) as (
        server,
        _,
    ):
        loop = AgentLoop(
            client, model="m", tool_sources=[server], observers=[TracingObserver(tracer_provider)]
        )
        assert (await loop.run("say hi")).ok
    tool_span = next(s for s in span_exporter.get_finished_spans() if s.name == "execute_tool echo")
    server_spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    call_span = next(s for s in server_spans if s["name"] == "tools/call echo")
    assert call_span["trace_id"] == f"{tool_span.context.trace_id:032x}"
    assert call_span["parent_span_id"] == f"{tool_span.context.span_id:016x}"


async def test_sse_connections_close_after_a_run_and_after_an_open_loop(tmp_path: Path) -> None:
    """No stream is left open, per run or kept open, and no process outlives the test's."""
    before = children_of(os.getpid())  # other tests' helpers may still run
    rec = RecordingObserver()
    client = ScriptedClient(
        [
            calls(("pid", {})),
            Reply(text="a"),
            calls(("pid", {})),
            Reply(text="b"),
            calls(("pid", {})),
            Reply(text="c"),
        ]
    )
    with sse_server(tmp_path / "sse.log") as (server, pid):
        port = port_of(server)
        loop = AgentLoop(client, model="m", observers=[rec], tool_sources=[server])
        assert (await loop.run("per run")).ok
        assert connections_to(port) == 0
        async with loop:
            assert connections_to(port) >= 1  # the event stream, held open
            assert (await loop.run("one")).ok
            assert (await loop.run("two")).ok
            assert connections_to(port) >= 1
        assert connections_to(port) == 0
        assert children_of(os.getpid()) <= before | {pid}
    assert [int(p.result) for p in rec.of("on_tool_post")] == [pid, pid, pid]
    assert not alive(pid)
    assert children_of(os.getpid()) <= before
