"""OpenAIClient against recorded Chat Completions streams (httpx.MockTransport, no sockets)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from loopobs import AgentLoop, RunStatus
from loopobs.contract.errors import (
    ModelError,
    RateLimited,
    StreamError,
)
from loopobs.contract.events import Usage
from loopobs.contract.model import (
    AssistantMessage,
    Finish,
    ModelRequest,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    ToolDefinition,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from loopobs.llm import OpenAIClient, _http
from loopobs.testing import RecordingObserver
from tests._llm_replay import (
    PLANTED_KEY,
    Replay,
    TextSeen,
    Transcript,
    get_weather,
    local_time,
)

REQUEST = ModelRequest(model="gpt-4o", messages=(UserMessage(content="hi"),))


def client_for(replay: Replay, **kwargs: Any) -> OpenAIClient:
    return OpenAIClient(api_key=PLANTED_KEY, http_client=replay.http(), **kwargs)


async def collect(client: OpenAIClient, request: ModelRequest = REQUEST) -> list[StreamEvent]:
    return [e async for e in client.stream(request)]


async def collect_into(client: OpenAIClient, seen: list[StreamEvent]) -> None:
    async for event in client.stream(REQUEST):
        seen.append(event)


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


# -- decoding, straight from the client ---------------------------------------------------


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("chunk_size", [1, 7, 1 << 20], ids=["1B", "7B", "whole"])
async def test_plain_text_any_framing(newline: bytes, chunk_size: int) -> None:
    replay = Replay.of(["openai_text"], chunk_size=chunk_size, newline=newline)
    events = await collect(client_for(replay))
    assert text_of(events) == "The capital of France is Paris — café capital."
    assert events[-2:] == [
        UsageReport(Usage(input_tokens=1200, output_tokens=9, cache_read_input_tokens=1024)),
        Finish(
            reason="stop",
            response_id="chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
            response_model="gpt-4o-2024-08-06",
            service_tier="default",
            system_fingerprint="fp_eb9dce56a8",
        ),
    ]
    # both details reported (reasoning as 0): reported, not unknown
    assert [e.usage.details for e in events if isinstance(e, UsageReport)] == [
        ("cache_read", "reasoning")
    ]
    assert replay.all_closed


async def test_parallel_tool_calls_assembled_from_interleaved_fragments() -> None:
    events = await collect(client_for(Replay.of(["openai_tool_calls"], chunk_size=13)))
    assert text_of(events) == "Checking both cities."
    calls = [e.call for e in events if isinstance(e, ToolCallReady)]
    assert calls == [
        ToolCallPart(id="call_paris", name="get_weather", arguments={"city": "Paris"}),
        ToolCallPart(id="call_tokyo", name="get_weather", arguments={"city": "Tokyo"}),
        ToolCallPart(id="call_clock", name="local_time", arguments={}),
    ]
    assert events[-1] == Finish(
        reason="tool_calls",
        response_id="chatcmpl-C2toolcalls",
        response_model="gpt-4o-2024-08-06",
        service_tier="default",
        system_fingerprint="fp_eb9dce56a8",
    )
    assert events[-2] == UsageReport(Usage(input_tokens=310, output_tokens=62))


async def test_reasoning_content_field() -> None:
    events = await collect(client_for(Replay.of(["openai_reasoning_content"])))
    thinking = [e.text for e in events if isinstance(e, ThinkingDelta)]
    assert thinking == ["The user asks", " for 17*3.", " 17*3 = 51."]
    assert text_of(events) == "17 × 3 = 51"
    # Thinking comes before the answer, in stream order.
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("TextDelta") > max(i for i, k in enumerate(kinds) if k == "ThinkingDelta")
    assert (
        UsageReport(Usage(input_tokens=14, output_tokens=40, reasoning_output_tokens=31)) in events
    )
    assert events[-1] == Finish(
        reason="stop",
        response_id="0f5b8a52-reasoner",
        response_model="deepseek-reasoner",
        service_tier="default",
        system_fingerprint="fp_eb9dce56a8",
    )


async def test_reasoning_field_and_usage_without_details() -> None:
    events = await collect(client_for(Replay.of(["openai_reasoning_field"])))
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == [
        "Okay,",
        " the user",
        " says hi.",
    ]
    assert text_of(events) == "Hello! How can I help?"
    assert events[-2:] == [
        UsageReport(Usage(input_tokens=11, output_tokens=28)),
        Finish(
            reason="stop",
            response_id="chatcmpl-812",
            response_model="qwen3:8b",
            system_fingerprint="fp_ollama",
        ),
    ]
    # no details reported: unknown, not 0
    assert [e.usage.details for e in events if isinstance(e, UsageReport)] == [()]


async def test_error_event_mid_stream_is_retryable_after_the_text_so_far() -> None:
    replay = Replay.of(["openai_error_event"])
    seen: list[StreamEvent] = []
    with pytest.raises(ModelError) as info:
        await collect_into(client_for(replay), seen)
    assert text_of(seen) == "Partial ans"
    assert info.value.retryable
    assert "server_error" in str(info.value)
    assert "The server had an error" in str(info.value)
    assert replay.all_closed


async def test_cut_off_stream_is_a_retryable_stream_error() -> None:
    replay = Replay.of(["openai_cut_off"])
    with pytest.raises(StreamError) as info:
        await collect(client_for(replay))
    assert info.value.retryable
    assert "finish_reason" in str(info.value)
    assert replay.all_closed


async def test_invalid_json_is_a_stream_error_describing_the_line_without_quoting_it() -> None:
    """The message says where the line breaks (offset, length, hash), never what it says."""
    with pytest.raises(StreamError) as info:
        await collect(client_for(Replay.of(["openai_invalid_json"])))
    message = str(info.value)
    assert "invalid JSON" in message
    assert "at offset 97 of a 102-char payload, sha256 " in message
    assert "content" not in message
    assert "wor" not in message
    assert info.value.retryable
    assert info.value.provider == "openai"


async def test_finish_reason_without_done_is_accepted() -> None:
    body = (
        'data: {"id":"x1","model":"llama","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
        'data: {"id":"x1","model":"llama","choices":[{"index":0,"delta":{},'
        '"finish_reason":"stop"}]}\n\n'
    )
    replay = Replay([_sse(body)])
    events = await collect(client_for(replay))
    assert events == [
        TextDelta("ok"),
        Finish(reason="stop", response_id="x1", response_model="llama"),
    ]


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [('{"city": ', "'{\"city\": '"), ("[1, 2]", "'[1, 2]'")],
    ids=["truncated", "not-an-object"],
)
async def test_tool_arguments_that_are_not_a_json_object(arguments: str, fragment: str) -> None:
    """Argument text that is not a JSON object reaches the loop raw, for an error result."""
    chunk = {
        "id": "x2",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": "c1", "function": {"name": "f", "arguments": arguments}}
                    ]
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    replay = Replay([_sse(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")])
    calls = [e.call for e in await collect(client_for(replay)) if isinstance(e, ToolCallReady)]
    assert [(c.id, c.name, c.raw_arguments, dict(c.arguments)) for c in calls] == [
        ("c1", "f", arguments, {})
    ]
    assert fragment


async def test_whole_tool_calls_without_index() -> None:
    def chunk(call: dict[str, Any], finish: str | None = None) -> str:
        delta = {"tool_calls": [call]} if call else {}
        payload = {"id": "x3", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(payload)}\n\n"

    body = (
        chunk({"id": "a", "function": {"name": "f", "arguments": '{"n": 1}'}})
        + chunk({"id": "b", "function": {"name": "g", "arguments": "{}"}})
        + chunk({}, "tool_calls")
        + "data: [DONE]\n\n"
    )
    events = await collect(client_for(Replay([_sse(body)])))
    assert [e.call for e in events if isinstance(e, ToolCallReady)] == [
        ToolCallPart(id="a", name="f", arguments={"n": 1}),
        ToolCallPart(id="b", name="g", arguments={}),
    ]


@pytest.mark.parametrize(
    ("payload", "error_type", "status", "retryable"),
    [
        ({"object": "error", "message": "bad", "type": "BadRequestError", "code": 400},
         ModelError, 400, False),
        ({"error": {"message": "slow", "type": "rate_limit_exceeded"}}, RateLimited, 429, True),
        ({"error": {"message": "busy", "type": "overloaded"}}, RateLimited, None, True),
        ({"error": {"message": "no", "type": "invalid_request_error"}}, ModelError, None, False),
        ({"error": "something broke"}, ModelError, None, True),
    ],
)  # fmt: skip
async def test_error_events_get_a_verdict(
    payload: dict[str, Any], error_type: type[ModelError], status: int | None, retryable: bool
) -> None:
    with pytest.raises(ModelError) as info:
        await collect(client_for(Replay([_sse(f"data: {json.dumps(payload)}\n\n")])))
    assert type(info.value) is error_type
    assert (info.value.status_code, info.value.retryable) == (status, retryable)


# -- HTTP errors ---------------------------------------------------------------------------


async def test_429_is_rate_limited_with_retry_after() -> None:
    with pytest.raises(RateLimited) as info:
        await collect(client_for(Replay.of(["openai_429"])))
    err = info.value
    assert err.retryable
    assert err.retry_after == 7.0
    assert err.status_code == 429
    assert "Rate limit reached for gpt-4o" in str(err)


async def test_500_is_retryable() -> None:
    with pytest.raises(ModelError) as info:
        await collect(client_for(Replay.of(["openai_500"])))
    assert type(info.value) is ModelError
    assert info.value.retryable
    assert info.value.status_code == 500


async def test_401_is_final_carries_the_message_and_never_the_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    client = client_for(Replay.of(["openai_401"]))
    with pytest.raises(ModelError) as info:
        await collect(client)
    err = info.value
    assert not err.retryable
    assert err.status_code == 401
    assert "Incorrect API key provided" in str(err)
    assert "***" in str(err)
    for text in (str(err), repr(err), repr(client), str(err.to_dict()), caplog.text):
        assert PLANTED_KEY not in text
    assert PLANTED_KEY[:12] not in repr(client)


async def test_401_without_a_key_says_how_to_set_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    replay = Replay.of(["openai_401"])
    client = OpenAIClient(http_client=replay.http())
    with pytest.raises(ModelError, match="set OPENAI_API_KEY"):
        await collect(client)
    assert "authorization" not in replay.requests[0].headers


@pytest.mark.parametrize(
    ("raised", "retryable"),
    [
        (httpx.ConnectError("connection refused"), True),
        (httpx.ConnectTimeout("timed out"), True),
        (httpx.ReadTimeout("timed out"), True),
    ],
)
async def test_transport_errors_are_retryable(raised: Exception, retryable: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise raised

    client = OpenAIClient(
        api_key=PLANTED_KEY, http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    with pytest.raises(ModelError) as info:
        await collect(client)
    assert info.value.retryable is retryable
    assert "api.openai.com" in str(info.value)
    assert PLANTED_KEY not in str(info.value)


async def test_a_body_that_breaks_off_is_a_retryable_stream_error() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            yield b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
            raise httpx.RemoteProtocolError("peer closed connection without sending complete body")

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Broken())

    client = OpenAIClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(StreamError, match="broke off") as info:
        await collect(client)
    assert info.value.retryable


async def test_a_json_body_instead_of_a_stream() -> None:
    """A whole completion instead of a stream is described, not quoted (it holds the answer)."""
    answer = {"id": "chatcmpl-1", "choices": [{"message": {"content": "the secret plan"}}]}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer)

    client = OpenAIClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(StreamError, match="expected an event stream") as info:
        await collect(client)
    assert "sha256" in str(info.value)
    assert "secret plan" not in str(info.value)


async def test_a_json_error_body_with_status_200_keeps_the_servers_message() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"error": {"message": "model is loading"}})

    client = OpenAIClient(http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)))
    with pytest.raises(StreamError, match="model is loading"):
        await collect(client)


# -- the request ---------------------------------------------------------------------------


async def test_request_body_follows_the_chat_completions_api() -> None:
    replay = Replay.of(["openai_text"])
    client = OpenAIClient(
        "http://localhost:8000/v1/",
        api_key=PLANTED_KEY,
        http_client=replay.http(),
        extra_headers={"OpenAI-Organization": "org-1"},
    )
    request = ModelRequest(
        model="gpt-4o",
        messages=(
            SystemMessage(content="Be brief."),
            UserMessage(content="Weather in Paris and Tokyo?"),
            AssistantMessage(
                content="Checking.",
                thinking="(not sent back)",
                tool_calls=(
                    ToolCallPart(id="call_1", name="get_weather", arguments={"city": "Paris"}),
                    ToolCallPart(id="call_2", name="get_weather", arguments={"city": "Tōkyō"}),
                ),
            ),
            ToolResultMessage(tool_call_id="call_1", name="get_weather", content="18°C"),
            ToolResultMessage(
                tool_call_id="call_2", name="get_weather", content="Error: boom", is_error=True
            ),
            AssistantMessage(tool_calls=(ToolCallPart(id="call_3", name="noop"),)),
            ToolResultMessage(tool_call_id="call_3", name="noop", content=""),
        ),
        tools=(
            ToolDefinition(
                name="get_weather",
                description="Current weather.",
                parameters={
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            ),
            ToolDefinition(name="noop"),
        ),
        options={"temperature": 0.2, "stream": False, "stream_options": {"foo": 1}},
    )
    await collect(client, request)
    sent = replay.requests[0]
    assert sent.method == "POST"
    assert str(sent.url) == "http://localhost:8000/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {PLANTED_KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["openai-organization"] == "org-1"
    assert replay.json() == {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {
                "role": "assistant",
                "content": "Checking.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Tōkyō"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Error: boom"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_3",
                        "type": "function",
                        "function": {"name": "noop", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_3", "content": ""},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            },
            {
                "type": "function",
                "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}},
            },
        ],
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"foo": 1, "include_usage": True},
    }


async def test_no_tools_key_without_tools() -> None:
    replay = Replay.of(["openai_text"])
    await collect(client_for(replay))
    body = replay.json()
    assert "tools" not in body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_api_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key")
    replay = Replay.of(["openai_text"])
    client = OpenAIClient(http_client=replay.http())
    await collect(client)
    assert replay.requests[0].headers["authorization"] == "Bearer sk-env-key"
    assert "sk-env-key" not in repr(client)


# -- connections ---------------------------------------------------------------------------


async def test_closing_the_stream_early_closes_the_response() -> None:
    replay = Replay.of(["openai_text"], chunk_size=40)
    stream = client_for(replay).stream(REQUEST)
    assert isinstance(await anext(stream), TextDelta)
    assert not replay.bodies[0].closed
    await stream.aclose()  # type: ignore[attr-defined]
    assert replay.bodies[0].closed


async def test_cancelling_mid_stream_closes_the_response() -> None:
    replay = Replay.of(["openai_cut_off"], hang=True)
    client = client_for(replay)
    got_text = asyncio.Event()

    async def consume() -> None:
        async for event in client.stream(REQUEST):
            if isinstance(event, TextDelta):
                got_text.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_text.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert replay.bodies[0].closed


async def test_one_pool_for_every_call_and_only_its_own_is_closed() -> None:
    replay = Replay.of(["openai_text", "openai_text"])
    http = replay.http()
    async with OpenAIClient(api_key="k", http_client=http) as client:
        await collect(client)
        await collect(client)
    assert len(replay.requests) == 2
    assert not http.is_closed
    await http.aclose()

    own = OpenAIClient(api_key="k")
    pool = own._http
    await own.aclose()
    assert pool.is_closed


async def test_the_body_is_read_to_its_end_after_done_so_the_connection_is_reused() -> None:
    body = 'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    body += "data: [DONE]\n\n: trailing comment\n\n"
    replay = Replay([_sse(body)], chunk_size=8)
    events = await collect(client_for(replay))
    assert events == [Finish(reason="stop", response_id="x")]
    assert replay.bodies[0].exhausted
    assert replay.bodies[0].closed


async def test_a_server_that_stalls_after_done_is_closed_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_http, "DRAIN_SECONDS", 0.05)
    replay = Replay.of(["openai_text"], hang=True)
    events = await asyncio.wait_for(collect(client_for(replay)), 5)
    assert isinstance(events[-1], Finish)
    assert not replay.bodies[0].exhausted
    assert replay.bodies[0].closed


async def test_explicit_timeout_is_sent_with_the_request() -> None:
    replay = Replay.of(["openai_text"])
    await collect(client_for(replay, timeout=3.0))
    assert replay.requests[0].extensions["timeout"] == httpx.Timeout(3.0).as_dict()


# -- full agent runs -----------------------------------------------------------------------


def agent(replay: Replay, recorder: RecordingObserver, **kwargs: Any) -> AgentLoop:
    return AgentLoop(
        client_for(replay),
        model="gpt-4o",
        tools=[get_weather, local_time],
        observers=[recorder],
        detectors=[],
        **kwargs,
    )


async def test_run_plain_text() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["openai_text"], chunk_size=5)
    result = await agent(replay, recorder).run("Capital of France?")
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "The capital of France is Paris — café capital."
    assert "".join(c.delta for c in recorder.of("on_text_delta")) == result.answer
    (ok,) = recorder.of("on_stream_success")
    assert (ok.provider, ok.model, ok.finish_reason) == ("openai", "gpt-4o", "stop")
    assert (ok.response_id, ok.response_model) == (
        "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
        "gpt-4o-2024-08-06",
    )
    assert (ok.input_tokens, ok.output_tokens, ok.cache_read_input_tokens) == (1200, 9, 1024)
    assert result.usage == Usage(input_tokens=1200, output_tokens=9, cache_read_input_tokens=1024)
    assert replay.all_closed


async def test_run_with_parallel_tool_calls_then_answer() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["openai_tool_calls", "openai_text"], chunk_size=64)
    result = await agent(replay, recorder).run("Weather?")
    assert result.status is RunStatus.COMPLETED
    received = recorder.of("on_tool_call_received")
    assert [(c.tool, c.tool_call_id) for c in received] == [
        ("get_weather", "call_paris"),
        ("get_weather", "call_tokyo"),
        ("local_time", "call_clock"),
    ]
    posts = {c.tool_call_id: c.is_error for c in recorder.of("on_tool_post")}
    assert posts == {"call_paris": False, "call_tokyo": False, "call_clock": True}
    second = replay.json(1)["messages"]
    assert second[-4]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    assert [m["role"] for m in second[-3:]] == ["tool", "tool", "tool"]
    assert second[-3] == {"role": "tool", "tool_call_id": "call_paris", "content": "18°C, cloudy"}
    assert second[-1]["tool_call_id"] == "call_clock"
    assert second[-1]["content"].startswith("Error:")
    assert [c.finish_reason for c in recorder.of("on_stream_success")] == ["tool_calls", "stop"]
    assert result.usage == Usage(
        input_tokens=310 + 1200, output_tokens=62 + 9, cache_read_input_tokens=1024
    )


@pytest.mark.parametrize(
    ("name", "thinking", "reasoning_tokens"),
    [
        ("openai_reasoning_content", ["The user asks", " for 17*3.", " 17*3 = 51."], 31),
        ("openai_reasoning_field", ["Okay,", " the user", " says hi."], 0),
    ],
)
async def test_run_with_reasoning(name: str, thinking: list[str], reasoning_tokens: int) -> None:
    recorder = RecordingObserver()
    result = await agent(Replay.of([name]), recorder).run("q")
    assert result.status is RunStatus.COMPLETED
    assert [c.delta for c in recorder.of("on_thinking_delta")] == thinking
    (ok,) = recorder.of("on_stream_success")
    assert ok.reasoning_output_tokens == reasoning_tokens
    assert result.usage.reasoning_output_tokens == reasoning_tokens
    hooks = recorder.hooks()
    assert hooks.index("on_text_delta") > hooks.index("on_thinking_delta")


@pytest.mark.parametrize(
    ("name", "error_type"),
    [
        ("openai_error_event", ModelError),
        ("openai_cut_off", StreamError),
        ("openai_invalid_json", StreamError),
        ("openai_429", RateLimited),
        ("openai_500", ModelError),
    ],
)
async def test_run_falls_back_after_a_retryable_failure(
    name: str, error_type: type[ModelError]
) -> None:
    recorder = RecordingObserver()
    replay = Replay.of([name, "openai_text"])
    result = await agent(replay, recorder, fallback_models=["gpt-4o-mini"]).run("q")
    assert result.status is RunStatus.COMPLETED
    (failure,) = recorder.of("on_stream_failure")
    assert type(failure.error) is error_type
    assert failure.error.retryable
    assert failure.provider == "openai"
    (fallback,) = recorder.of("on_fallback")
    assert (fallback.from_model, fallback.to_model) == ("gpt-4o", "gpt-4o-mini")
    assert [r["model"] for r in map(replay.json, range(2))] == ["gpt-4o", "gpt-4o-mini"]
    # Only the successful call counts.
    assert result.usage == Usage(input_tokens=1200, output_tokens=9, cache_read_input_tokens=1024)
    assert replay.all_closed


async def test_run_without_fallback_fails_on_a_cut_off_stream() -> None:
    recorder = RecordingObserver()
    result = await agent(Replay.of(["openai_cut_off"]), recorder).run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, StreamError)  # one model: its own error
    (failure,) = recorder.of("on_stream_failure")
    assert isinstance(failure.error, StreamError)
    assert "".join(c.delta for c in recorder.of("on_text_delta")) == "This answer never fini"
    assert result.usage == Usage()


async def test_run_does_not_fall_back_on_401() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["openai_401", "openai_text"])
    result = await agent(replay, recorder, fallback_models=["gpt-4o-mini"]).run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, ModelError)
    assert result.error.status_code == 401
    assert len(replay.requests) == 1
    assert recorder.of("on_fallback") == []
    assert PLANTED_KEY not in str(result.error)
    assert PLANTED_KEY not in str(recorder.of("on_stream_failure")[0].error.to_dict())


async def test_cancelling_a_run_mid_stream_closes_the_response() -> None:
    recorder = TextSeen()
    replay = Replay.of(["openai_cut_off"], hang=True)
    task = asyncio.create_task(agent(replay, recorder).run("q"))
    await asyncio.wait_for(recorder.text_seen.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert replay.bodies[0].closed
    (failure,) = recorder.of("on_stream_failure")
    assert type(failure.error).__name__ == "Cancelled"


def _sse(body: str) -> Transcript:
    return Transcript(200, [("content-type", "text/event-stream")], body.encode())


async def test_run_answers_bad_tool_arguments_with_an_error_result() -> None:
    """Malformed argument JSON becomes an InvalidToolInput result, and the run goes on."""
    chunk = {
        "id": "x9",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "function": {"name": "get_weather", "arguments": '{"city": '},
                        }
                    ]
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    bad = _sse(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n")
    recorder = RecordingObserver()
    replay = Replay([bad, *Replay.of(["openai_text"]).transcripts])
    result = await agent(replay, recorder).run("Weather?")
    assert result.status is RunStatus.COMPLETED
    (post,) = recorder.of("on_tool_post")
    assert post.is_error
    assert type(post.error).__name__ == "InvalidToolInput"
    assert "not a JSON object" in (post.result or "")
    assert not recorder.of("on_stream_failure")


def test_the_old_positional_api_key_still_works_and_warns() -> None:
    """``OpenAIClient(url, key)`` (the old form) still sets the key, with a warning."""
    with pytest.warns(DeprecationWarning, match="api_key= by keyword"):
        client = OpenAIClient("http://127.0.0.1:9/v1", "sk-old-style")
    assert client._api_key == "sk-old-style"
    with pytest.raises(TypeError, match="one positional"):
        OpenAIClient("http://127.0.0.1:9/v1", "a", "b")
