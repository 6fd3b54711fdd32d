"""The HTTP model clients against hostile servers and hostile input.

Keys never leak (whole, escaped or cut off), model output is never quoted in
an error, odd text never poisons a session, implausible token counts are not
accepted, a slow or endless server cannot hold a run, and every failure of
the HTTP stack is a ``LoopError`` with the right retry verdict, so the
fallback chain runs.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop, RunStatus
from loopobs.contract.errors import ModelError, StreamError, shorten
from loopobs.contract.events import Usage
from loopobs.contract.model import ModelRequest, TextDelta, UsageReport, UserMessage
from loopobs.exporters.tracing import TracingObserver
from loopobs.llm import AnthropicClient, OpenAIClient
from loopobs.llm._sse import LineTooLong, SSEDecoder
from loopobs.llm.secrets import redact
from loopobs.testing import RecordingObserver

KEY = "sk-hostile-4f9Qa2Lm8Zx7Vb1Nc6Rt"
REQUEST = ModelRequest(model="m", messages=(UserMessage(content="hi"),))

Handler = Callable[[httpx.Request], httpx.Response]


def _client(handler: Handler, **kwargs: Any) -> OpenAIClient:
    kwargs.setdefault("api_key", KEY)
    return OpenAIClient(
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)), **kwargs
    )


async def _collect(client: OpenAIClient | AnthropicClient) -> list[Any]:
    return [e async for e in client.stream(REQUEST)]


def _sse(*payloads: dict[str, Any] | str) -> bytes:
    out = []
    for p in payloads:
        out.append(f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n")
    return "".join(out).encode()


def _chunk(content: str | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    return {
        "id": "c1",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


ANSWER = _sse(_chunk("fine"), _chunk(finish="stop"), "[DONE]")


def _leaks(text: str) -> list[str]:
    """Every 8-character window of the key found in ``text``."""
    return [KEY[i : i + 8] for i in range(len(KEY) - 7) if KEY[i : i + 8] in text]


def _loop(client: Any, *observers: Any, fallback: tuple[str, ...] = ()) -> AgentLoop:
    return AgentLoop(
        client, model="m", observers=list(observers), fallback_models=fallback, detectors=[]
    )


# -- secrets ------------------------------------------------------------------------------


@pytest.mark.parametrize("cut_at", [1, 8, 12, len(KEY) - 1])
async def test_a_key_echoed_just_before_the_cut_leaves_no_part_of_it(
    cut_at: int, tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    """The server's message is redacted before it is shortened: no 8-char run of the key
    survives in the error, the run's error or the ``chat`` span status."""
    for limit in (200, 240, 300):
        message = "x" * (limit - cut_at) + KEY + " was rejected"

        def handler(request: httpx.Request, message: str = message) -> httpx.Response:
            return httpx.Response(401, json={"error": {"message": message, "type": "auth"}})

        with pytest.raises(ModelError) as info:
            await _collect(_client(handler))
        assert _leaks(str(info.value)) == []
        result = await _loop(_client(handler), TracingObserver(tracer_provider)).run("q")
        assert result.error is not None
        assert _leaks(str(result.error)) == []
    for span in span_exporter.get_finished_spans():
        assert _leaks(span.status.description or "") == []


async def test_a_key_echoed_in_an_error_event_mid_stream_is_cut_safely() -> None:
    for pad in (0, 200, 230, 235):
        event = {"error": {"type": "server_error", "message": "y" * pad + KEY + "z" * 50}}

        def handler(request: httpx.Request, event: dict[str, Any] = event) -> httpx.Response:
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=_sse(_chunk("a"), event)
            )

        with pytest.raises(ModelError) as info:
            await _collect(_client(handler))
        assert _leaks(str(info.value)) == [], pad


def test_redact_masks_prefixes_and_escaped_forms() -> None:
    key = "sk-Ab12Cd34/Ef+56"
    assert redact(f"a {key} b", key) == "a *** b"
    assert redact(f"cut: {key[:9]}", key) == "cut: ***"
    assert redact(f"short: {key[:7]}", key) == f"short: {key[:7]}"  # under 8: not a secret
    assert redact("quoted: " + json.dumps(key), key) == 'quoted: "***"'
    assert redact("url: sk-Ab12Cd34%2FEf%2B56", key) == "url: ***"
    nul_key = "sk-abc\x00defghij"
    assert redact(repr(f"Bearer {nul_key}"), nul_key) == repr("Bearer ")[:-1] + "***'"
    assert "sk-abc" not in redact(repr(f"Bearer {nul_key}".encode()), nul_key)
    # Shortening after redaction never shows more than redaction left.
    assert shorten(redact("x" * 195 + key, key), 200) == "x" * 195 + "***"


@pytest.mark.parametrize("ending", ["\n", "\r\n", " \t\n"])
async def test_a_key_read_from_a_file_with_a_line_end_is_stripped(ending: str) -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=ANSWER)

    events = await _collect(_client(handler, api_key=KEY + ending))
    assert seen == [f"Bearer {KEY}"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["fine"]


@pytest.mark.parametrize("bad", ["\x00", "\n", "\x7f", "é"])
@pytest.mark.parametrize("cls", [OpenAIClient, AnthropicClient])
def test_a_key_with_a_control_character_is_refused_without_quoting_it(
    bad: str,
    cls: type[OpenAIClient] | type[AnthropicClient],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = KEY[:10] + bad + KEY[10:]
    with caplog.at_level(logging.DEBUG), pytest.raises(ValueError) as info:
        cls(api_key=key)
    assert _leaks(str(info.value)) == []
    assert "position 10" in str(info.value)
    assert _leaks(caplog.text) == []


def test_a_bad_key_in_the_environment_is_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\x01junk\n")
    with pytest.raises(ValueError, match="OPENAI_API_KEY contains a control character") as info:
        OpenAIClient()
    assert _leaks(str(info.value)) == []
    monkeypatch.setenv("OPENAI_API_KEY", KEY + "\r\n")
    assert OpenAIClient()._api_key == KEY


# -- model output in errors ----------------------------------------------------------------


async def test_a_broken_chunk_never_puts_answer_text_in_the_span_status(
    tracer_provider: Any, span_exporter: InMemorySpanExporter
) -> None:
    """Content capture is off: the error names offset, length and hash, not the text."""
    secret_answer = "the launch code is 0000"

    def handler(request: httpx.Request) -> httpx.Response:
        broken = f'data: {{"choices":[{{"delta":{{"content":"{secret_answer}\n\n'
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream"},
            content=_sse(_chunk("ok")) + broken.encode(),
        )

    recorder = RecordingObserver()
    loop = _loop(_client(handler), TracingObserver(tracer_provider), recorder)
    result = await loop.run("q")
    assert result.status == RunStatus.FAILED
    [failure] = recorder.of("on_stream_failure")
    assert "sha256" in str(failure.error)
    texts = [str(result.error), str(failure.error)] + [
        s.status.description or "" for s in span_exporter.get_finished_spans()
    ]
    assert all("launch code" not in t for t in texts)


# -- text that would poison a session -------------------------------------------------------


async def test_a_surrogate_pair_split_across_chunks_is_one_character() -> None:
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        body = (
            'data: {"choices":[{"index":0,"delta":{"content":"smile \\ud83d"}}]}\n\n'
            'data: {"choices":[{"index":0,"delta":{"content":"\\ude00!"}}]}\n\n'
            'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
            "data: [DONE]\n\n"
        )
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=body.encode()
        )

    loop = _loop(_client(handler))
    first = await loop.run("q")
    assert first.answer == "smile \U0001f600!"
    second = await loop.run("again", session=first.session)
    assert second.status == RunStatus.COMPLETED
    assert requests[1]["messages"][1]["content"] == "smile \U0001f600!"


async def test_a_lone_surrogate_in_the_conversation_never_fails_the_request() -> None:
    """A surrogate that stays alone (from the model, a tool or the user) is sent as U+FFFD."""
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=ANSWER)

    result = await _loop(_client(handler)).run("half a pair: \ud83d, and a whole \ud83d\ude00")
    assert result.status == RunStatus.COMPLETED
    sent = json.loads(bodies[0])["messages"][0]["content"]
    assert sent == "half a pair: \ufffd, and a whole \U0001f600"


async def test_anthropic_joins_split_pairs_in_text_and_thinking() -> None:
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"id": "m", "model": "c", "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "a\ud83d"},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": "\ude00b\ud83d"},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = AnthropicClient(
        api_key=KEY, http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler))
    )
    out = await _collect(client)
    assert "".join(e.text for e in out if isinstance(e, TextDelta)) == "a\U0001f600b\ufffd"


# -- token counts ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [2**64, -1, 10**12, "12", 1.5, True])
async def test_an_implausible_token_count_is_unknown_and_counted(bad: Any) -> None:
    usage = {"prompt_tokens": bad, "completion_tokens": 7}

    def handler(request: httpx.Request) -> httpx.Response:
        body = _sse(_chunk("x"), _chunk(finish="stop"), {"choices": [], "usage": usage}, "[DONE]")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = _client(handler)
    events = await _collect(client)
    assert UsageReport(Usage(input_tokens=0, output_tokens=7)) in events
    assert client.rejected_token_counts == 1


async def test_an_absurd_count_from_anthropic_is_unknown_and_counted() -> None:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"id": "m", "model": "c", "usage": {"input_tokens": 2**64}},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 5},
        },
        {"type": "message_stop"},
    ]
    body = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()
    client = AnthropicClient(
        api_key=KEY,
        http_client=httpx.AsyncClient(
            transport=httpx.MockTransport(
                lambda r: httpx.Response(
                    200, headers={"content-type": "text/event-stream"}, content=body
                )
            )
        ),
    )
    out = await _collect(client)
    assert UsageReport(Usage(input_tokens=0, output_tokens=5)) in out
    assert client.rejected_token_counts == 1


# -- deadlines and size bounds -----------------------------------------------------------------


class _Trickle(httpx.AsyncByteStream):
    """A body that never ends: ``piece`` again and again, ``every`` seconds apart."""

    def __init__(self, piece: bytes, every: float, head: bytes = b"") -> None:
        self.piece, self.every, self.head = piece, every, head

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self.head:
            yield self.head
        while True:
            await asyncio.sleep(self.every)
            yield self.piece


def _endless(piece: bytes, every: float, head: bytes = b"") -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, stream=_Trickle(piece, every, head)
        )

    return handler


async def test_keep_alive_comments_forever_end_at_the_deadline() -> None:
    client = _client(_endless(b": keep-alive\n\n", 0.01), deadline=0.2)
    with pytest.raises(StreamError, match=r"deadline of 0\.2s") as info:
        await _collect(client)
    assert info.value.retryable


async def test_a_trickling_answer_ends_at_the_deadline() -> None:
    client = _client(
        _endless(b"x", 0.01, head=b'data: {"choices":[{"delta":{"content":"'), deadline=0.2
    )
    with pytest.raises(StreamError, match="deadline") as info:
        await _collect(client)
    assert info.value.retryable


async def test_a_server_that_never_answers_ends_at_the_deadline() -> None:
    async def never(request: httpx.Request) -> httpx.Response:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    client = OpenAIClient(
        api_key=KEY,
        deadline=0.1,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(never)),
    )
    with pytest.raises(ModelError, match=r"no response .* within the deadline") as info:
        await _collect(client)
    assert info.value.retryable
    assert not isinstance(info.value, StreamError)


async def test_an_endless_answer_ends_at_max_response_bytes() -> None:
    piece = _sse(_chunk("word " * 200))
    client = _client(_endless(piece, 0), max_response_bytes=200_000, deadline=None)
    with pytest.raises(StreamError, match="max_response_bytes") as info:
        await _collect(client)
    assert info.value.retryable


async def test_a_line_past_max_line_chars_is_a_clear_stream_error() -> None:
    client = _client(
        _endless(b"y" * 4096, 0, head=b"data: "), max_line_chars=100_000, deadline=None
    )
    with pytest.raises(StreamError, match="longer than max_line_chars") as info:
        await _collect(client)
    assert info.value.retryable


def test_the_sse_decoder_bounds_lines_and_event_data() -> None:
    decoder = SSEDecoder(max_line_chars=1000)
    for _ in range(9):
        assert decoder.feed(b"z" * 100) == []
    with pytest.raises(LineTooLong):
        decoder.feed(b"z" * 101)
    many = SSEDecoder(max_line_chars=1000)
    with pytest.raises(LineTooLong, match="data of an event"):
        many.feed(
            b"data: "
            + b"w" * 400
            + b"\n"
            + b"data: "
            + b"w" * 400
            + b"\n"
            + b"data: "
            + b"w" * 400
            + b"\n"
        )


def test_a_long_line_in_many_chunks_is_joined_once() -> None:
    """A partial line is kept as pieces: each chunk costs its own length, not the line's."""
    decoder = SSEDecoder()
    for _ in range(1000):
        decoder.feed(b"q" * 1000)
    assert len(decoder._partial) == 1000  # no re-joined buffer per chunk
    events = decoder.feed(b"\n\n")
    assert events == []  # "qqq…" is a field named q…: nothing to dispatch
    assert decoder._partial == []


async def test_fallback_runs_after_a_deadline() -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        model = json.loads(request.content)["model"]
        calls.append(model)
        if model == "m":
            return _endless(b": ping\n\n", 0.01)(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=ANSWER)

    result = await _loop(_client(handler, deadline=0.2), fallback=("backup",)).run("q")
    assert result.status == RunStatus.COMPLETED
    assert calls == ["m", "backup"]


# -- every transport error in the tree ----------------------------------------------------------


class _Body(httpx.AsyncByteStream):
    """Bytes served as a stream, so that httpx decodes them while the client reads."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self.data


def _garbled_gzip(status: int) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status,
            headers={"content-encoding": "gzip", "content-type": "text/event-stream"},
            stream=_Body(b"this is not gzip at all"),
        )

    return handler


async def test_a_503_with_an_undecodable_body_is_retryable_and_falls_back() -> None:
    with pytest.raises(ModelError) as info:
        await _collect(_client(_garbled_gzip(503)))
    assert info.value.retryable
    assert info.value.status_code == 503

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["model"] == "m":
            return _garbled_gzip(503)(request)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=ANSWER)

    result = await _loop(_client(handler), fallback=("backup",)).run("q")
    assert result.status == RunStatus.COMPLETED


async def test_a_stream_body_that_cannot_be_decoded_is_a_retryable_stream_error() -> None:
    with pytest.raises(StreamError, match="cannot be decoded") as info:
        await _collect(_client(_garbled_gzip(200)))
    assert info.value.retryable
    good = gzip.compress(ANSWER)

    def fine(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            headers={"content-encoding": "gzip", "content-type": "text/event-stream"},
            content=good,
        )

    assert any(isinstance(e, TextDelta) for e in await _collect(_client(fine)))


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (httpx.ConnectError("refused"), True),
        (httpx.ReadTimeout("slow"), True),
        (httpx.RemoteProtocolError("bad framing"), True),
        (httpx.ProxyError("proxy down"), True),
        (httpx.DecodingError("bad gzip"), True),
        (httpx.TooManyRedirects("loop"), False),
        (httpx.UnsupportedProtocol("ftp"), False),
        (ConnectionResetError("reset by a custom transport"), True),
    ],
)
async def test_every_httpx_error_at_send_is_a_model_error(exc: Exception, retryable: bool) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with pytest.raises(ModelError) as info:
        await _collect(_client(handler))
    assert info.value.retryable is retryable


async def test_an_unencodable_request_body_is_a_clear_model_error() -> None:
    client = _client(lambda r: httpx.Response(200))
    request = ModelRequest(
        model="m", messages=(UserMessage(content="hi"),), options={"temperature": float("nan")}
    )
    with pytest.raises(ModelError, match="cannot build the request") as info:
        _ = [e async for e in client.stream(request)]
    assert not info.value.retryable


async def test_an_absurd_count_from_any_client_never_poisons_metric_export(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A custom client reporting ``2**64`` tokens: the run counts it as unknown, and every
    later OTLP metric export still encodes (one bad count used to break them all)."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from loopobs.exporters.metrics import MetricsObserver
    from loopobs.llm import Reply, ScriptedClient

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    client = ScriptedClient(
        [
            Reply(text="a", usage=Usage(input_tokens=2**64, output_tokens=3)),
            Reply(text="b", usage=Usage(input_tokens=10, output_tokens=2)),
        ]
    )
    loop = AgentLoop(client, model="m", observers=[MetricsObserver(provider)], detectors=[])
    with caplog.at_level(logging.WARNING, logger="loopobs.usage"):
        first = await loop.run("q")
    assert first.usage == Usage(input_tokens=0, output_tokens=3)
    assert "implausible token counts (input_tokens)" in caplog.text
    data = reader.get_metrics_data()
    assert data is not None
    encode_metrics(data)
    second = await loop.run("q")
    assert second.usage == Usage(input_tokens=10, output_tokens=2)
    data = reader.get_metrics_data()
    assert data is not None
    encode_metrics(data)
    provider.shutdown()
