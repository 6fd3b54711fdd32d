"""The SSE parser, and what the clients make of any input: events or LoopErrors, nothing else."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import json
import time
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs.contract.errors import LoopError
from loopobs.contract.model import ModelRequest, StreamEvent, UserMessage
from loopobs.llm import AnthropicClient, OpenAIClient
from loopobs.llm._http import parse_retry_after, server_message
from loopobs.llm._sse import ServerSentEvent, SSEDecoder
from loopobs.llm.anthropic import MessagesDecoder
from loopobs.llm.openai import ChatCompletionsDecoder
from tests._llm_replay import DATA, Replay, Transcript, load


def parse(*chunks: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [e for chunk in chunks for e in decoder.feed(chunk)]
    return events + decoder.flush()


# -- the parser ----------------------------------------------------------------------------


def test_fields_comments_and_multi_line_data() -> None:
    stream = (
        b": keep-alive\n"
        b"event: message_start\n"
        b"id: 7\n"
        b"retry: 1000\n"
        b'data: {"a":\n'
        b"data:  1}\n"
        b"unknown: x\n"
        b"\n"
        b"data\n"
        b"\n"
        b"data: after\n"
        b"\n"
    )
    assert parse(stream) == [
        ServerSentEvent("message_start", '{"a":\n 1}'),
        ServerSentEvent("message", ""),
        ServerSentEvent("message", "after"),
    ]


def test_event_name_resets_and_blocks_without_data_dispatch_nothing() -> None:
    assert parse(b"event: ping\n\nevent: a\n\ndata: x\n\n") == [ServerSentEvent("message", "x")]


def test_crlf_split_across_chunks_is_one_line_end() -> None:
    assert parse(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n") == [
        ServerSentEvent("message", "a"),
        ServerSentEvent("message", "b"),
    ]


def test_lone_cr_line_ends() -> None:
    assert parse(b"event: e\rdata: a\r\rdata: b\r\r") == [
        ServerSentEvent("e", "a"),
        ServerSentEvent("message", "b"),
    ]


def test_bom_multibyte_split_and_invalid_utf8() -> None:
    text = "data: café ✓\n\n".encode()
    chunks = [b"\xef\xbb", b"\xbf" + text[:9], text[9:11], text[11:]]
    assert parse(*chunks) == [ServerSentEvent("message", "café ✓")]
    assert parse(b"data: \xff\xfe ok\n\n") == [ServerSentEvent("message", "\ufffd\ufffd ok")]


def test_unterminated_last_block_is_flushed() -> None:
    assert parse(b"data: [DONE]") == [ServerSentEvent("message", "[DONE]")]
    assert parse(b"data: x\r") == [ServerSentEvent("message", "x")]
    assert parse(b"") == []


line_text = st.text(st.characters(blacklist_characters="\r\n", codec="utf-8"), max_size=30)
events_strategy = st.lists(
    st.tuples(
        st.text(st.characters(blacklist_characters="\r\n:", codec="utf-8"), max_size=10),
        st.lists(line_text, min_size=1, max_size=3),
    ),
    max_size=6,
)


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300)
@given(events=events_strategy, newline=st.sampled_from(["\n", "\r\n", "\r"]), data=st.data())
def test_round_trip_any_line_ending_any_chunking(
    events: list[tuple[str, list[str]]], newline: str, data: st.DataObject
) -> None:
    text = ""
    for name, lines in events:
        if name:
            text += f"event: {name}{newline}"
        text += "".join(f"data: {line}{newline}" for line in lines)
        text += newline
    chunks = data.draw(chunked(text.encode()))
    expected = [ServerSentEvent(name or "message", "\n".join(lines)) for name, lines in events]
    assert parse(*chunks) == expected


@settings(max_examples=300)
@given(raw=st.binary(max_size=300), data=st.data())
def test_any_bytes_parse_the_same_however_chunked(raw: bytes, data: st.DataObject) -> None:
    assert parse(*data.draw(chunked(raw))) == parse(raw)


# -- the decoders never raise anything but LoopErrors --------------------------------------

KEYS = [
    "type", "index", "delta", "content_block", "message", "usage", "choices", "tool_calls",
    "function", "arguments", "id", "name", "text", "partial_json", "thinking", "error",
    "finish_reason", "content", "reasoning", "reasoning_content", "input_tokens",
    "output_tokens", "cache_read_input_tokens", "prompt_tokens", "completion_tokens",
    "prompt_tokens_details", "cached_tokens", "model", "stop_reason", "input", "object", "code",
]  # fmt: skip
TYPES = [
    "message_start", "content_block_start", "content_block_delta", "content_block_stop",
    "message_delta", "message_stop", "ping", "error", "text", "thinking", "redacted_thinking",
    "tool_use", "text_delta", "thinking_delta", "input_json_delta", "signature_delta",
]  # fmt: skip
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(TYPES)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), children, max_size=5)
    ),
    max_leaves=12,
)


def transcript_events(name: str) -> list[ServerSentEvent]:
    return parse(load(name).body)


GOOD = {
    "openai": [
        transcript_events(n)
        for n in ("openai_text", "openai_tool_calls", "openai_reasoning_content")
    ],
    "anthropic": [
        transcript_events(n) for n in ("anthropic_text", "anthropic_tool_use", "anthropic_thinking")
    ],
}


def decoder_for(provider: str) -> ChatCompletionsDecoder | MessagesDecoder:
    return ChatCompletionsDecoder() if provider == "openai" else MessagesDecoder()


def mutate(data: st.DataObject, value: Any, depth: int = 0) -> Any:
    """``value`` with one subtree replaced, removed or retyped."""
    action = data.draw(st.integers(0, 3))
    if action == 0 or depth > 6:
        return data.draw(json_values)
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        out = dict(value)
        if action == 1:
            del out[key]
        else:
            out[key] = mutate(data, value[key], depth + 1)
        return out
    if isinstance(value, list) and value:
        i = data.draw(st.integers(0, len(value) - 1))
        out_list = list(value)
        if action == 1:
            del out_list[i]
        else:
            out_list[i] = mutate(data, value[i], depth + 1)
        return out_list
    return data.draw(json_values)


def drive(provider: str, events: list[ServerSentEvent]) -> list[StreamEvent]:
    decoder = decoder_for(provider)
    out: list[StreamEvent] = []
    try:
        for event in events:
            out.extend(decoder.feed(event.event, event.data))
            if decoder.done:
                return out
        out.extend(decoder.end())
    except LoopError:
        pass
    return out


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_payloads_give_events_or_loop_errors(provider: str, data: st.DataObject) -> None:
    events = list(data.draw(st.sampled_from(GOOD[provider])))
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(events) - 1))
        event = events[i]
        try:
            payload = json.loads(event.data)
        except ValueError:
            payload = event.data
        events[i] = ServerSentEvent(event.event, json.dumps(mutate(data, payload)))
    drive(provider, events)


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@settings(max_examples=300)
@given(
    events=st.lists(
        st.tuples(
            st.sampled_from(["message", "error", *TYPES]),
            st.one_of(st.text(max_size=40), json_values.map(json.dumps)),
        ),
        max_size=8,
    )
)
def test_arbitrary_events_give_events_or_loop_errors(
    provider: str, events: list[tuple[str, str]]
) -> None:
    drive(provider, [ServerSentEvent(e, d) for e, d in events])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("provider", "name"),
    [("openai", "openai_tool_calls"), ("anthropic", "anthropic_tool_use")],
)
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_clients_on_corrupted_bytes_give_events_or_loop_errors(
    provider: str, name: str, data: st.DataObject
) -> None:
    body = bytearray(load(name).body)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.integers(0, 2))
        if action == 0:
            body[at] = data.draw(st.integers(0, 255))
        elif action == 1:
            del body[at : at + data.draw(st.integers(1, 40))]
        else:
            body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    chunk_size = data.draw(st.integers(1, 200))
    replay = Replay(
        [Transcript(200, [("content-type", "text/event-stream")], bytes(body))],
        chunk_size=chunk_size,
    )

    async def run() -> None:
        http = replay.http()
        client: OpenAIClient | AnthropicClient = (
            OpenAIClient(api_key="k", http_client=http)
            if provider == "openai"
            else AnthropicClient(api_key="k", http_client=http)
        )
        request = ModelRequest(model="m", messages=(UserMessage(content="q"),))
        try:
            async for _ in client.stream(request):
                pass
        except LoopError:
            pass
        await http.aclose()

    asyncio.run(run())
    assert replay.all_closed


def test_every_transcript_is_a_well_formed_http_response() -> None:
    names = sorted(p.stem for p in DATA.glob("*.txt"))
    assert len(names) == 20
    for name in names:
        t = load(name)
        assert t.status in (200, 401, 429, 500), name
        if t.status == 200:
            assert ("content-type", "text/event-stream; charset=utf-8") in t.headers
            assert parse(t.body), name
        else:
            assert server_message(t.body) != "(empty body)"


# -- small helpers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after-ms": "soon", "retry-after": "9"}, 9.0),
        ({"retry-after": "-1"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after": "someday"}, None),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(httpx.Headers(headers)) == expected


def test_retry_after_http_date_in_the_future() -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    value = parse_retry_after(httpx.Headers({"retry-after": when}))
    assert value is not None
    assert 115 <= value <= 121


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            b'{"error": {"message": "bad", "type": "invalid_request_error"}}',
            "invalid_request_error: bad",
        ),
        (b'{"error": "model not found"}', "model not found"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"<html>502</html>", "'<html>502</html>'"),
        (b"", "(empty body)"),
        (b"[1]", "'[1]'"),
    ],
)
def test_server_message(body: bytes, expected: str) -> None:
    assert server_message(body) == expected


def test_long_bodies_are_truncated() -> None:
    message = server_message(b"x" * 5000)
    assert len(message) < 300
    assert "(5000 chars)" in message
