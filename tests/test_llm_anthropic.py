"""AnthropicClient against recorded Messages API streams (httpx.MockTransport, no sockets)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import httpx
import pytest

from loopobs import AgentLoop, RunStatus
from loopobs.contract.errors import ModelError, RateLimited, StreamError
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
from loopobs.llm import AnthropicClient
from loopobs.testing import RecordingObserver
from tests._llm_replay import (
    PLANTED_KEY,
    Replay,
    TextSeen,
    Transcript,
    get_weather,
    local_time,
)

MODEL = "claude-sonnet-4-5"
REQUEST = ModelRequest(model=MODEL, messages=(UserMessage(content="hi"),))
TEXT_USAGE = Usage(
    input_tokens=25 + 1800 + 120,
    output_tokens=15,
    cache_read_input_tokens=1800,
    cache_write_input_tokens=120,
)


def client_for(replay: Replay, **kwargs: Any) -> AnthropicClient:
    return AnthropicClient(api_key=PLANTED_KEY, http_client=replay.http(), **kwargs)


async def collect(client: AnthropicClient, request: ModelRequest = REQUEST) -> list[StreamEvent]:
    return [e async for e in client.stream(request)]


async def collect_into(client: AnthropicClient, seen: list[StreamEvent]) -> None:
    async for event in client.stream(REQUEST):
        seen.append(event)


def text_of(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def sse(*events: dict[str, Any]) -> Transcript:
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    return Transcript(200, [("content-type", "text/event-stream")], body.encode())


START = {
    "type": "message_start",
    "message": {"id": "msg_1", "model": MODEL, "usage": {"input_tokens": 5, "output_tokens": 1}},
}
STOP = {"type": "message_stop"}


# -- decoding, straight from the client ---------------------------------------------------


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("chunk_size", [1, 7, 1 << 20], ids=["1B", "7B", "whole"])
async def test_plain_text_any_framing(newline: bytes, chunk_size: int) -> None:
    replay = Replay.of(["anthropic_text"], chunk_size=chunk_size, newline=newline)
    events = await collect(client_for(replay))
    assert text_of(events) == "The capital of France is Paris — café capital."
    assert events[-2:] == [
        UsageReport(TEXT_USAGE),
        Finish(
            reason="end_turn",
            response_id="msg_01XFDUDYJgAACzvnptvVoYEL",
            response_model="claude-sonnet-4-5-20250929",
        ),
    ]
    assert replay.all_closed


async def test_tool_use_blocks_assembled_from_input_json_deltas() -> None:
    events = await collect(client_for(Replay.of(["anthropic_tool_use"], chunk_size=11)))
    assert text_of(events) == "Checking both cities."
    calls = [e.call for e in events if isinstance(e, ToolCallReady)]
    assert calls == [
        ToolCallPart(id="toolu_paris", name="get_weather", arguments={"city": "Paris"}),
        ToolCallPart(id="toolu_tokyo", name="get_weather", arguments={"city": "Tokyo"}),
        ToolCallPart(id="toolu_clock", name="local_time", arguments={}),
    ]
    assert events[-2:] == [
        UsageReport(Usage(input_tokens=472, output_tokens=89)),
        Finish(
            reason="tool_use",
            response_id="msg_014p7gG3wDgGV9EUtLvnow3U",
            response_model="claude-sonnet-4-5-20250929",
        ),
    ]


async def test_thinking_deltas_and_signature() -> None:
    events = await collect(client_for(Replay.of(["anthropic_thinking"])))
    assert [e.text for e in events if isinstance(e, ThinkingDelta)] == [
        "Let me compute",
        " 17*3 = 51.",
    ]
    assert text_of(events) == "17 × 3 = 51"
    assert not any("EqQB" in getattr(e, "text", "") for e in events)
    assert UsageReport(Usage(input_tokens=40, output_tokens=120)) in events


async def test_redacted_thinking_is_an_empty_thinking_delta() -> None:
    events = await collect(client_for(Replay.of(["anthropic_redacted_thinking"])))
    assert events[0] == ThinkingDelta("")
    assert [e for e in events if isinstance(e, ThinkingDelta)] == [ThinkingDelta("")]
    assert text_of(events) == "Here is my answer."
    assert events[-1] == Finish(
        reason="end_turn", response_id="msg_01Redacted", response_model="claude-3-7-sonnet-20250219"
    )


async def test_overloaded_error_event_is_retryable() -> None:
    replay = Replay.of(["anthropic_overloaded"])
    seen: list[StreamEvent] = []
    with pytest.raises(RateLimited) as info:
        await collect_into(client_for(replay), seen)
    assert text_of(seen) == "Partial ans"
    assert info.value.retryable
    assert info.value.status_code == 529
    assert "overloaded_error: Overloaded" in str(info.value)
    assert replay.all_closed


@pytest.mark.parametrize(
    ("error_type", "status", "retryable"),
    [
        ("api_error", 500, True),
        ("rate_limit_error", 429, True),
        ("invalid_request_error", 400, False),
        ("brand_new_error", 500, True),
    ],
)
async def test_error_events_get_the_verdict_of_their_status(
    error_type: str, status: int, retryable: bool
) -> None:
    error = {"type": "error", "error": {"type": error_type, "message": "m"}}
    with pytest.raises(ModelError) as info:
        await collect(client_for(Replay([sse(START, error)])))
    assert info.value.status_code == status
    assert info.value.retryable is retryable


async def test_cut_off_stream_is_a_retryable_stream_error() -> None:
    replay = Replay.of(["anthropic_cut_off"])
    with pytest.raises(StreamError, match="message_stop") as info:
        await collect(client_for(replay))
    assert info.value.retryable
    assert replay.all_closed


async def test_invalid_json_is_a_stream_error_describing_the_line_without_quoting_it() -> None:
    """The message says where the line breaks (offset, length, hash), never what it says."""
    with pytest.raises(StreamError) as info:
        await collect(client_for(Replay.of(["anthropic_invalid_json"])))
    assert "invalid JSON" in str(info.value)
    assert "payload, sha256 " in str(info.value)
    assert "Hel" not in str(info.value)


async def test_wrong_shapes_are_stream_errors_not_key_errors() -> None:
    bad_delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}
    with pytest.raises(StreamError, match="unexpected content_block_delta event"):
        await collect(client_for(Replay([sse(START, bad_delta)])))
    bad_start = {"type": "message_start", "message": "nope"}
    with pytest.raises(StreamError, match="unexpected message_start event"):
        await collect(client_for(Replay([sse(bad_start)])))


async def test_unknown_events_blocks_and_deltas_are_skipped() -> None:
    events = await collect(
        client_for(
            Replay(
                [
                    sse(
                        START,
                        {"type": "future_event", "x": 1},
                        {
                            "type": "content_block_start",
                            "index": 0,
                            "content_block": {"type": "server_tool_use", "id": "s", "name": "w"},
                        },
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "input_json_delta", "partial_json": "{}"},
                        },
                        {"type": "content_block_stop", "index": 0},
                        {
                            "type": "content_block_start",
                            "index": 1,
                            "content_block": {"type": "text", "text": "Hi"},
                        },
                        {
                            "type": "content_block_delta",
                            "index": 1,
                            "delta": {"type": "citations_delta", "citation": {}},
                        },
                        {"type": "content_block_stop", "index": 1},
                        STOP,
                    )
                ]
            )
        )
    )
    assert events == [
        TextDelta("Hi"),
        UsageReport(Usage(input_tokens=5, output_tokens=1)),
        Finish(reason=None, response_id="msg_1", response_model=MODEL),
    ]


async def test_message_delta_usage_replaces_the_start_figures() -> None:
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 7, "cache_read_input_tokens": 3, "output_tokens": 20},
    }
    events = await collect(client_for(Replay([sse(START, delta, STOP)])))
    assert events == [
        UsageReport(Usage(input_tokens=10, output_tokens=20, cache_read_input_tokens=3)),
        Finish(reason="end_turn", response_id="msg_1", response_model=MODEL),
    ]


async def test_tool_input_that_is_not_json_travels_raw() -> None:
    """Tool input that is not a JSON object reaches the loop raw, for an error result."""
    events: list[dict[str, Any]] = [
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]
    got = await collect(client_for(Replay([sse(*events)])))
    calls = [e.call for e in got if isinstance(e, ToolCallReady)]
    assert [(c.id, c.name, c.raw_arguments) for c in calls] == [("t", "f", '{"a": ')]


# -- HTTP errors ---------------------------------------------------------------------------


async def test_429_is_rate_limited_with_retry_after() -> None:
    with pytest.raises(RateLimited) as info:
        await collect(client_for(Replay.of(["anthropic_429"])))
    assert info.value.retry_after == 12.0
    assert info.value.status_code == 429
    assert "rate_limit_error: Number of request tokens" in str(info.value)


async def test_500_is_retryable() -> None:
    with pytest.raises(ModelError) as info:
        await collect(client_for(Replay.of(["anthropic_500"])))
    assert type(info.value) is ModelError
    assert info.value.retryable
    assert "api_error: Internal server error" in str(info.value)


async def test_401_is_final_and_never_shows_the_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client = client_for(Replay.of(["anthropic_401"]))
    with pytest.raises(ModelError) as info:
        await collect(client)
    err = info.value
    assert not err.retryable
    assert err.status_code == 401
    assert "authentication_error: invalid x-api-key" in str(err)
    for text in (str(err), repr(err), repr(client), str(err.to_dict()), caplog.text):
        assert PLANTED_KEY not in text


async def test_a_key_echoed_inside_the_stream_is_masked_too() -> None:
    bad = Transcript(
        200,
        [("content-type", "text/event-stream")],
        f"event: message_start\ndata: {{not json {PLANTED_KEY}\n\n".encode(),
    )
    with pytest.raises(StreamError) as info:
        await collect(client_for(Replay([bad])))
    assert PLANTED_KEY not in str(info.value)
    assert PLANTED_KEY not in repr(info.value)
    assert "not json" not in str(info.value)


async def test_529_before_the_stream_is_overloaded() -> None:
    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Over"}})
    replay = Replay([Transcript(529, [("content-type", "application/json")], body.encode())])
    with pytest.raises(RateLimited) as info:
        await collect(client_for(replay))
    assert info.value.status_code == 529
    assert info.value.retry_after is None


# -- the request ---------------------------------------------------------------------------


async def test_request_body_follows_the_messages_api() -> None:
    replay = Replay.of(["anthropic_text"])
    client = AnthropicClient(
        "https://gateway.example/anthropic/",
        api_key=PLANTED_KEY,
        http_client=replay.http(),
        max_tokens=1024,
        extra_headers={"anthropic-beta": "feature-x"},
    )
    request = ModelRequest(
        model=MODEL,
        messages=(
            SystemMessage(content="Be brief."),
            UserMessage(content="Weather in Paris and Tokyo?"),
            AssistantMessage(
                content="Checking.",
                thinking="not sent back: no signature",
                tool_calls=(
                    ToolCallPart(id="toolu_1", name="get_weather", arguments={"city": "Paris"}),
                    ToolCallPart(id="toolu_2", name="get_weather", arguments={"city": "Tokyo"}),
                ),
            ),
            ToolResultMessage(tool_call_id="toolu_1", name="get_weather", content="18°C"),
            ToolResultMessage(
                tool_call_id="toolu_2", name="get_weather", content="Error: boom", is_error=True
            ),
            UserMessage(content="Also: be precise."),
            AssistantMessage(tool_calls=(ToolCallPart(id="toolu_3", name="noop"),)),
            ToolResultMessage(tool_call_id="toolu_3", name="noop", content="done"),
        ),
        tools=(
            ToolDefinition(
                name="get_weather",
                description="Current weather.",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            ),
            ToolDefinition(name="noop"),
        ),
        options={"temperature": 0, "stream": False},
    )
    await collect(client, request)
    sent = replay.requests[0]
    assert str(sent.url) == "https://gateway.example/anthropic/v1/messages"
    assert sent.headers["x-api-key"] == PLANTED_KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["anthropic-beta"] == "feature-x"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert replay.json() == {
        "model": MODEL,
        "max_tokens": 1024,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Weather in Paris and Tokyo?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "get_weather",
                        "input": {"city": "Tokyo"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "18°C",
                        "is_error": False,
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": "Error: boom",
                        "is_error": True,
                    },
                    {"type": "text", "text": "Also: be precise."},
                ],
            },
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_3", "name": "noop", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_3",
                        "content": "done",
                        "is_error": False,
                    }
                ],
            },
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
            {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
        ],
        "temperature": 0,
        "stream": True,
    }


async def test_options_override_max_tokens_and_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-env")
    replay = Replay.of(["anthropic_text"])
    client = AnthropicClient(http_client=replay.http())
    request = ModelRequest(model=MODEL, messages=REQUEST.messages, options={"max_tokens": 77})
    await collect(client, request)
    assert replay.json()["max_tokens"] == 77
    assert "system" not in replay.json()
    assert "tools" not in replay.json()
    assert replay.requests[0].headers["x-api-key"] == "sk-ant-env"
    assert "sk-ant-env" not in repr(client)


async def test_missing_key_sends_no_header_and_says_how_to_set_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    replay = Replay.of(["anthropic_401"])
    with pytest.raises(ModelError, match="set ANTHROPIC_API_KEY"):
        await collect(AnthropicClient(http_client=replay.http()))
    assert "x-api-key" not in replay.requests[0].headers


# -- connections ---------------------------------------------------------------------------


async def test_closing_the_stream_early_closes_the_response() -> None:
    replay = Replay.of(["anthropic_text"], chunk_size=50)
    stream = client_for(replay).stream(REQUEST)
    assert isinstance(await anext(stream), TextDelta)
    assert not replay.bodies[0].closed
    await stream.aclose()  # type: ignore[attr-defined]
    assert replay.bodies[0].closed


async def test_connect_error_is_retryable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("name resolution failed")

    client = AnthropicClient(
        api_key=PLANTED_KEY, http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    with pytest.raises(ModelError, match=r"cannot reach api\.anthropic\.com") as info:
        await collect(client)
    assert info.value.retryable


# -- full agent runs -----------------------------------------------------------------------


def agent(replay: Replay, recorder: RecordingObserver, **kwargs: Any) -> AgentLoop:
    return AgentLoop(
        client_for(replay),
        model=MODEL,
        tools=[get_weather, local_time],
        observers=[recorder],
        detectors=[],
        **kwargs,
    )


async def test_run_plain_text_with_cache_usage() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["anthropic_text"], chunk_size=9)
    result = await agent(replay, recorder).run("Capital of France?")
    assert result.status is RunStatus.COMPLETED
    assert result.answer == "The capital of France is Paris — café capital."
    assert "".join(c.delta for c in recorder.of("on_text_delta")) == result.answer
    (ok,) = recorder.of("on_stream_success")
    assert (ok.provider, ok.finish_reason, ok.response_id, ok.response_model) == (
        "anthropic",
        "end_turn",
        "msg_01XFDUDYJgAACzvnptvVoYEL",
        "claude-sonnet-4-5-20250929",
    )
    assert (ok.input_tokens, ok.output_tokens) == (1945, 15)
    assert (ok.cache_read_input_tokens, ok.cache_write_input_tokens) == (1800, 120)
    assert result.usage == TEXT_USAGE
    assert replay.all_closed


async def test_run_with_tool_use_then_answer() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["anthropic_tool_use", "anthropic_text"], chunk_size=64)
    result = await agent(replay, recorder).run("Weather?")
    assert result.status is RunStatus.COMPLETED
    assert [(c.tool, c.tool_call_id) for c in recorder.of("on_tool_call_received")] == [
        ("get_weather", "toolu_paris"),
        ("get_weather", "toolu_tokyo"),
        ("local_time", "toolu_clock"),
    ]
    posts = {c.tool_call_id: c.is_error for c in recorder.of("on_tool_post")}
    assert posts == {"toolu_paris": False, "toolu_tokyo": False, "toolu_clock": True}
    messages = replay.json(1)["messages"]
    assert messages[-2]["role"] == "assistant"
    assert [b["type"] for b in messages[-2]["content"]] == [
        "text",
        "tool_use",
        "tool_use",
        "tool_use",
    ]
    results = messages[-1]
    assert results["role"] == "user"
    assert [(b["tool_use_id"], b["is_error"]) for b in results["content"]] == [
        ("toolu_paris", False),
        ("toolu_tokyo", False),
        ("toolu_clock", True),
    ]
    assert results["content"][0]["content"] == "18°C, cloudy"
    assert [c.finish_reason for c in recorder.of("on_stream_success")] == ["tool_use", "end_turn"]
    assert result.usage == TEXT_USAGE + Usage(input_tokens=472, output_tokens=89)


async def test_run_with_thinking() -> None:
    recorder = RecordingObserver()
    result = await agent(Replay.of(["anthropic_thinking"]), recorder).run("17*3?")
    assert result.answer == "17 × 3 = 51"
    assert [c.delta for c in recorder.of("on_thinking_delta")] == ["Let me compute", " 17*3 = 51."]
    assert result.usage == Usage(input_tokens=40, output_tokens=120)


async def test_run_with_redacted_thinking() -> None:
    recorder = RecordingObserver()
    result = await agent(Replay.of(["anthropic_redacted_thinking"]), recorder).run("q")
    assert result.status is RunStatus.COMPLETED
    assert [c.delta for c in recorder.of("on_thinking_delta")] == [""]
    hooks = recorder.hooks()
    assert hooks.index("on_thinking_delta") < hooks.index("on_text_delta")
    assert result.usage == Usage(input_tokens=60, output_tokens=95)


@pytest.mark.parametrize(
    ("name", "error_type"),
    [
        ("anthropic_overloaded", RateLimited),
        ("anthropic_cut_off", StreamError),
        ("anthropic_invalid_json", StreamError),
        ("anthropic_429", RateLimited),
        ("anthropic_500", ModelError),
    ],
)
async def test_run_falls_back_after_a_retryable_failure(
    name: str, error_type: type[ModelError]
) -> None:
    recorder = RecordingObserver()
    replay = Replay.of([name, "anthropic_text"])
    result = await agent(replay, recorder, fallback_models=["claude-haiku-4-5"]).run("q")
    assert result.status is RunStatus.COMPLETED
    (failure,) = recorder.of("on_stream_failure")
    assert type(failure.error) is error_type
    assert failure.error.retryable
    assert failure.provider == "anthropic"
    (fallback,) = recorder.of("on_fallback")
    assert (fallback.from_model, fallback.to_model) == (MODEL, "claude-haiku-4-5")
    assert result.usage == TEXT_USAGE
    assert replay.all_closed


async def test_run_without_fallback_fails_on_overload() -> None:
    recorder = RecordingObserver()
    result = await agent(Replay.of(["anthropic_overloaded"]), recorder).run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, RateLimited)  # one model: its own error
    assert isinstance(recorder.of("on_stream_failure")[0].error, RateLimited)
    assert result.usage == Usage()


async def test_run_does_not_fall_back_on_401() -> None:
    recorder = RecordingObserver()
    replay = Replay.of(["anthropic_401", "anthropic_text"])
    result = await agent(replay, recorder, fallback_models=["claude-haiku-4-5"]).run("q")
    assert result.status is RunStatus.FAILED
    assert isinstance(result.error, ModelError)
    assert result.error.status_code == 401
    assert len(replay.requests) == 1
    assert PLANTED_KEY not in str(result.error)


async def test_cancelling_a_run_mid_stream_closes_the_response() -> None:
    replay = Replay.of(["anthropic_cut_off"], hang=True)
    recorder = TextSeen()
    task = asyncio.create_task(agent(replay, recorder).run("q"))
    await asyncio.wait_for(recorder.text_seen.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert replay.bodies[0].closed
    assert [type(c.error).__name__ for c in recorder.of("on_stream_failure")] == ["Cancelled"]


async def test_signed_and_redacted_thinking_go_back_with_tool_results() -> None:
    """Thinking with tools: the next request replays the signed and redacted blocks verbatim."""
    first = sse(
        START,
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "Need the weather."},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "signature_delta", "signature": "SIG-abc"},
        },
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "redacted_thinking", "data": "OPAQUE=="},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {},
            },
        },
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"city": "Paris"}'},
        },
        {"type": "content_block_stop", "index": 2},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use"},
            "usage": {"output_tokens": 30},
        },
        STOP,
    )
    replay = Replay([first, *Replay.of(["anthropic_text"]).transcripts])
    recorder = RecordingObserver()
    result = await agent(replay, recorder).run("Weather in Paris?")
    assert result.status is RunStatus.COMPLETED
    assert [c.delta for c in recorder.of("on_thinking_delta")] == ["Need the weather.", ""]
    assistant = replay.json(1)["messages"][1]
    assert assistant["role"] == "assistant"
    assert assistant["content"][:3] == [
        {"type": "thinking", "thinking": "Need the weather.", "signature": "SIG-abc"},
        {"type": "redacted_thinking", "data": "OPAQUE=="},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    # the blocks survive the JSON round trip checkpoints use for messages
    from pydantic import TypeAdapter

    from loopobs.contract.model import Message

    adapter = TypeAdapter(list[Message])
    again = adapter.validate_json(adapter.dump_json(list(result.messages)))
    assert again == list(result.messages)
    assert any(getattr(m, "thinking_blocks", ()) for m in again)


@pytest.mark.parametrize(("options", "sent"), [({}, 4096), ({"max_tokens": 77}, 77)])
async def test_chat_span_reports_the_max_tokens_sent(
    options: dict[str, Any], sent: int, tracer_provider: Any, span_exporter: Any
) -> None:
    from loopobs.exporters.tracing import TracingObserver

    replay = Replay.of(["anthropic_text"])
    loop = AgentLoop(
        client_for(replay),
        model=MODEL,
        detectors=[],
        request_options=options,
        observers=[TracingObserver(tracer_provider)],
    )
    await loop.run("Capital of France?")
    assert replay.json()["max_tokens"] == sent
    (chat,) = [s for s in span_exporter.get_finished_spans() if s.name.startswith("chat")]
    assert chat.attributes["gen_ai.request.max_tokens"] == sent


def test_the_old_positional_api_key_still_works_and_warns() -> None:
    """``AnthropicClient(key)`` (the old order) takes the key as the key, never as a URL."""
    with pytest.warns(DeprecationWarning, match="api_key= by keyword"):
        client = AnthropicClient("sk-ant-old-style")
    assert client.base_url.startswith("https://api.anthropic.com")
    assert client._api_key == "sk-ant-old-style"
