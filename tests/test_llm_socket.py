"""The OpenAI-compatible client over a real socket, against a local streaming server.

The server speaks Chat Completions with ``stream: true`` over HTTP/1.1 keep-alive
and chunked transfer encoding, the way vLLM, Ollama or llama.cpp do. It answers
a conversation with no tool result yet with a tool call, and otherwise with text,
so ``loopobs demo --base-url`` can run its real-model path against it.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopobs import AgentLoop, RunStatus, tool
from loopobs.cli import main
from loopobs.contract.model import ModelRequest, TextDelta, UserMessage
from loopobs.llm import OpenAIClient
from loopobs.testing import RecordingObserver


def _chunk(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _answer(request: dict[str, Any]) -> list[bytes]:
    messages = request["messages"]
    wants_tool = bool(request.get("tools")) and not any(m["role"] == "tool" for m in messages)
    base: dict[str, Any] = {
        "id": "chatcmpl-local",
        "object": "chat.completion.chunk",
        "model": "local-model",
    }
    if wants_tool:
        call = {
            "index": 0,
            "id": "call_local",
            "type": "function",
            "function": {"name": "read_file", "arguments": ""},
        }
        parts: list[dict[str, Any]] = [
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]},
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {"index": 0, "function": {"arguments": '{"path": "expenses/'}}
                            ]
                        },
                    }
                ],
            },
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [{"index": 0, "function": {"arguments": 'config.yaml"}'}}]
                        },
                    }
                ],
            },
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        ]
    else:
        parts = [
            {**base, "choices": [{"index": 0, "delta": {"content": word}}]}
            for word in ("The ", "limit ", "is ", "2000 ", "EUR.")
        ]
        parts.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    parts.append({**base, "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 7}})
    return [*(_chunk(p) for p in parts), b"data: [DONE]\n\n"]


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.peers: list[tuple[str, int]] = []
        self.requests: list[dict[str, Any]] = []
        self.delay_s = 0.0
        self.aborted = threading.Event()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append(body)
        self.server.peers.append(self.client_address)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            for event in _answer(body):
                self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                self.wfile.flush()
                time.sleep(self.server.delay_s)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.aborted.set()
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return "limit: 2000"


async def test_runs_reuse_one_connection(server: _Server) -> None:
    """Three runs with tool calls stream over one kept-alive connection, with exact usage."""
    client = OpenAIClient(base_url=_url(server), api_key="sk-local")
    recorder = RecordingObserver()
    loop = AgentLoop(
        client, model="local-model", tools=[read_file], observers=[recorder], detectors=[]
    )
    try:
        for _ in range(3):
            result = await loop.run("What is my limit?")
            assert result.status is RunStatus.COMPLETED
            assert result.answer == "The limit is 2000 EUR."
            assert result.usage.input_tokens == 100
    finally:
        await client.aclose()
    assert len(server.requests) == 6
    assert len(set(server.peers)) == 1  # one TCP connection for every call
    assert server.requests[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_local",
        "content": "limit: 2000",
    }
    assert [c.input for c in recorder.of("on_tool_call_received")] == [
        {"path": "expenses/config.yaml"}
    ] * 3


async def test_cancelling_mid_stream_closes_the_response(server: _Server) -> None:
    """Cancelling a call mid-stream closes its connection; the next call gets a fresh one."""
    server.delay_s = 0.2
    client = OpenAIClient(base_url=_url(server), api_key="sk-local")
    request = ModelRequest(model="local-model", messages=(UserMessage(content="hi"),))
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in client.stream(request):
            if isinstance(event, TextDelta):
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(server.aborted.wait, 10)
    server.delay_s = 0.0
    events = [e async for e in client.stream(request)]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "The limit is 2000 EUR."
    assert len(set(server.peers)) == 2
    await client.aclose()


def test_demo_against_a_model_server(
    server: _Server,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """`loopobs demo --base-url` runs the showcase agent against a real streaming server."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    code = main(
        [
            "demo",
            "--base-url",
            _url(server),
            "--model",
            "local-model",
            "--no-live",
            "--metrics-port",
            "0",
            "--exit",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("answer: The limit is 2000 EUR.") == 2
    assert "tool read_file" in out  # the run tree shows the tool call
    assert "summary: 2 runs (completed 2)" in out


async def test_httpx_instrumentation_spans_nest_under_chat(server: _Server) -> None:
    """The real httpx instrumentation's request span sits under the model call's chat span."""
    import httpx
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopobs.exporters.tracing import TracingObserver

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    http = httpx.AsyncClient()
    HTTPXClientInstrumentor.instrument_client(http, tracer_provider=provider)
    client = OpenAIClient(base_url=_url(server), api_key="sk-local", http_client=http)
    loop = AgentLoop(
        client,
        model="local-model",
        tools=[read_file],
        detectors=[],
        observers=[TracingObserver(provider)],
    )
    result = await loop.run("What is my limit?")
    await http.aclose()
    assert result.status is RunStatus.COMPLETED
    finished = spans.get_finished_spans()
    chats = {s.context.span_id: s for s in finished if s.name.startswith("chat ")}
    posts = [s for s in finished if s.name.startswith("POST")]
    assert len(chats) == len(posts) == 2
    for post in posts:
        assert post.parent is not None
        assert post.parent.span_id in chats
    (run,) = [s for s in finished if s.parent is None]
    assert {s.context.trace_id for s in finished} == {run.context.trace_id}
