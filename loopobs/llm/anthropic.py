"""A streaming client for Anthropic's Messages API.

What comes back, by stream event:

- ``message_start``: the response id and model, and the first usage figures.
- ``content_block_start`` / ``content_block_delta`` / ``content_block_stop``:
  ``text`` blocks → :class:`TextDelta`; ``thinking`` blocks → :class:`ThinkingDelta`
  and, at the block's stop, a :class:`ThinkingBlockReady` carrying the text and
  its ``signature_delta``; a ``redacted_thinking`` block → one
  ``ThinkingDelta("")`` and a ``ThinkingBlockReady`` with its opaque data;
  ``tool_use`` blocks with their ``input_json_delta`` fragments → one
  :class:`ToolCallReady` at the block's stop. Other block and delta types
  (server tools, citations) are skipped.
- ``message_delta``: ``stop_reason`` and cumulative usage → :class:`UsageReport`.
- ``message_stop``: :class:`Finish` (``stop_reason`` kept as sent: ``end_turn``,
  ``tool_use``, ``max_tokens``, …).
- ``ping`` and unknown events are ignored; ``error`` is a ``LoopError``
  (``overloaded_error`` and ``rate_limit_error`` → ``RateLimited``,
  ``api_error`` → retryable, request errors → not).

Usage follows OpenTelemetry: ``input_tokens`` is the API's ``input_tokens`` plus
``cache_read_input_tokens`` plus ``cache_creation_input_tokens``; the cache
figures are also reported on their own. Thinking tokens are part of
``output_tokens`` and the API does not report them apart.

A body that ends before ``message_stop`` is a retryable
:class:`~loopobs.contract.errors.StreamError`.

Replaying a conversation: the loop keeps each response's signed and redacted
thinking blocks on its :class:`~loopobs.contract.model.AssistantMessage`, and they
are sent back verbatim ahead of its text and ``tool_use`` blocks, so extended
thinking works together with tool use.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from loopobs.contract.errors import ModelError, StreamError, shorten
from loopobs.contract.events import Usage, UsageDetail
from loopobs.contract.model import (
    AssistantMessage,
    Finish,
    Message,
    ModelRequest,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ThinkingBlock,
    ThinkingBlockReady,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    ToolDefinition,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from loopobs.contract.token_counts import plausible_token_count
from loopobs.llm._encoded import EncodedMessages, splice_messages
from loopobs.llm._http import (
    DEFAULT_DEADLINE,
    DEFAULT_MAX_LINE_CHARS,
    DEFAULT_MAX_RESPONSE_BYTES,
    HttpModelClient,
    describe,
    error_for_status,
    json_body,
)
from loopobs.llm._text import SurrogateJoiner, fix_surrogates, fix_surrogates_in
from loopobs.llm.secrets import redact

__all__ = ["AnthropicClient"]

# The HTTP status each documented error type stands for, so that an error event
# mid-stream gets the same verdict as the same error before it.
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class AnthropicClient(HttpModelClient):
    """Streams responses from Anthropic's Messages API (``POST /v1/messages``).

    Args:
        base_url: the API root (without ``/v1``); the only positional argument, as for
            every client (a first argument without ``://`` is taken as the API key, with
            a ``DeprecationWarning``: it used to be one).
        api_key: sent as ``x-api-key``; defaults to the ``ANTHROPIC_API_KEY``
            environment variable.
        http_client: an ``httpx.AsyncClient`` to send through. Without one
            the client makes its own, closed by :meth:`aclose`.
        timeout: httpx's per-operation timeout (each connect, each read: a
            server that keeps sending never trips it; ``deadline`` bounds the
            whole call); by default the injected client's, or
            10 s to connect and 600 s per read for the client's own (httpx's
            own default of 5 s is too short for extended thinking).
        max_tokens: the ``max_tokens`` the API requires, unless the request's
            options set one.
        anthropic_version: the ``anthropic-version`` header.
        provider: the provider name observers and spans report.
        extra_headers: headers added to every request (``anthropic-beta``, …).
        deadline: seconds one call may take in all, connect to last byte (default
            30 minutes; None: no bound). Past it the call fails with a retryable
            ``ModelError`` (no response yet) or ``StreamError`` (while streaming).
        max_response_bytes: bytes one response body may have (default 64 MiB);
            past it, a retryable ``StreamError``.
        max_line_chars: characters one event-stream line or event may have
            (default 16 Mi); past it, a retryable ``StreamError``.

    Raises:
        ValueError: the API key (or an extra header's value) has a control or
            non-ASCII character once surrounding whitespace is stripped.
    """

    endpoint = "/v1/messages"
    key_env = "ANTHROPIC_API_KEY"

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com",
        *,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float | None = None,
        max_tokens: int = 4096,
        anthropic_version: str = "2023-06-01",
        provider: str = "anthropic",
        extra_headers: Mapping[str, str] | None = None,
        deadline: float | None = DEFAULT_DEADLINE,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> None:
        if "://" not in base_url:
            # The first argument used to be the API key: take it as one (never as a URL, which
            # would put a secret into request errors) and say how to write it now.
            warnings.warn(
                "AnthropicClient(api_key): pass api_key= by keyword; the first "
                "argument is the base URL, as for every client (the old form goes "
                "away in loopobs 0.3)",
                DeprecationWarning,
                stacklevel=2,
            )
            api_key = api_key if api_key is not None else base_url
            base_url = "https://api.anthropic.com"
        super().__init__(
            base_url=base_url,
            api_key=api_key,
            http_client=http_client,
            timeout=timeout,
            provider=provider,
            extra_headers=extra_headers,
            deadline=deadline,
            max_response_bytes=max_response_bytes,
            max_line_chars=max_line_chars,
        )
        self.max_tokens = max_tokens
        self.anthropic_version = anthropic_version
        self._encoded: EncodedMessages[bytes] = EncodedMessages(_encode_message, len)

    @property
    def default_options(self) -> Mapping[str, Any]:
        """Options every request sends unless its own options set them: ``max_tokens``.

        The loop reports them with the request's options (``gen_ai.request.max_tokens``).
        """
        return {"max_tokens": self.max_tokens}

    def build_content(self, request: ModelRequest) -> bytes:
        """``json_body(self.build_body(request))``, byte for byte, encoding only new messages.

        Each message's JSON is kept from the requests it was sent in (see
        :class:`~loopobs.llm._encoded.EncodedMessages`); grouping tool results
        into user turns joins those encodings, so a turn of a long conversation
        encodes the turn's messages, not the history.
        """
        if "messages" in request.options:
            return json_body(self.build_body(request))
        get = self._encoded.get
        out: list[bytes] = []
        # The tool results of the user turn being filled, as in _messages.
        results: list[bytes] | None = None
        for message in request.messages:
            if isinstance(message, SystemMessage):
                continue
            encoded = get(message)
            if isinstance(message, ToolResultMessage):
                if results is None:
                    results = [encoded]
                else:
                    results.append(encoded)
                continue
            if results is not None:
                if isinstance(message, UserMessage):
                    results.append(b'{"type":"text","text":' + encoded + b"}")
                out.append(b'{"role":"user","content":[' + b",".join(results) + b"]}")
                results = None
                if isinstance(message, UserMessage):
                    continue
            if isinstance(message, UserMessage):
                out.append(b'{"role":"user","content":' + encoded + b"}")
            elif encoded:
                out.append(b'{"role":"assistant","content":[' + encoded + b"]}")
        if results is not None:
            out.append(b'{"role":"user","content":[' + b",".join(results) + b"]}")
        content = splice_messages(self.build_body(request, messages=False), b",".join(out))
        return content if content is not None else json_body(self.build_body(request))

    def build_body(self, request: ModelRequest, *, messages: bool = True) -> dict[str, Any]:
        """The JSON body of the Messages request for ``request``.

        System messages are joined into the top-level ``system``;
        ``request.options`` are passed through (``temperature``, ``thinking``,
        ``max_tokens``, …); ``stream`` is always true. ``messages=False`` leaves
        the message list empty (:meth:`build_content` splices in the encoded one).
        """
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": self.max_tokens,
            "messages": _messages(request.messages) if messages else [],
        }
        system = [m.content for m in request.messages if isinstance(m, SystemMessage)]
        if system:
            body["system"] = "\n\n".join(system)
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        body.update(request.options)
        body["stream"] = True
        return body

    def build_headers(self) -> dict[str, str]:
        """The request headers (the key included: never log them)."""
        headers = {
            "accept": "text/event-stream",
            "anthropic-version": self.anthropic_version,
            **self._extra_headers,
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def decoder(self) -> MessagesDecoder:
        """A fresh decoder for one response."""
        return MessagesDecoder(provider=self.provider, secret=self._api_key)


# -- request translation ------------------------------------------------------------------


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # The user message being filled with tool results, so that consecutive results
    # (the answers to one assistant turn) travel together, as the API requires.
    results: list[dict[str, Any]] | None = None
    for message in messages:
        if isinstance(message, SystemMessage):
            continue
        if isinstance(message, ToolResultMessage):
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
            if results is None:
                results = [block]
                out.append({"role": "user", "content": results})
            else:
                results.append(block)
            continue
        if isinstance(message, UserMessage):
            if results is not None:
                # Text may follow the tool results in the same user turn.
                results.append({"type": "text", "text": message.content})
                results = None
                continue
            out.append({"role": "user", "content": message.content})
            continue
        results = None
        content = _assistant_content(message)
        if content:
            out.append({"role": "assistant", "content": content})
    return out


def _encode_message(message: Message) -> bytes:
    """The part of ``message`` that build_content joins: a tool result's block, a user
    message's content string, an assistant message's content items (b"" when none)."""
    if isinstance(message, ToolResultMessage):
        return json_body(
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
        )
    if isinstance(message, UserMessage):
        return json_body(message.content)
    if isinstance(message, AssistantMessage):
        return b",".join([json_body(item) for item in _assistant_content(message)])
    return b""


def _assistant_content(message: AssistantMessage) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    # Signed and redacted thinking go back first and verbatim: the API requires the
    # thinking of the turn that tool results answer, and checks its signature.
    for block in message.thinking_blocks:
        if block.redacted is not None:
            content.append({"type": "redacted_thinking", "data": block.redacted})
        elif block.signature is not None:
            content.append(
                {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            )
    if message.content:
        content.append({"type": "text", "text": message.content})
    content.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)}
        for call in message.tool_calls
    )
    return content


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    out: dict[str, Any] = {"name": tool.name, "input_schema": dict(tool.parameters)}
    if tool.description:
        out["description"] = tool.description
    return out


# -- response decoding --------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    type: str
    id: str = ""
    name: str = ""
    input: dict[str, Any] = field(default_factory=dict)
    partial_json: list[str] = field(default_factory=list)
    thinking: list[str] = field(default_factory=list)
    signature: str | None = None
    redacted: str | None = None


class MessagesDecoder:
    """Decodes the Messages API event stream into stream events.

    Raises only ``LoopError``s: a payload that is not JSON, or not the shape
    the API documents, is a :class:`StreamError` describing where (never
    quoting it: it is model output); an ``error`` event is a
    :class:`ModelError` with the right retry verdict and the server's message,
    ``secret`` masked in it. Surrogate pairs split across deltas are joined.
    Token counts that are not plausible are treated as unknown (0) and
    counted in :attr:`rejected_token_counts`.
    """

    def __init__(self, *, provider: str = "anthropic", secret: str | None = None) -> None:
        self.provider = provider
        self.done = False
        self.rejected_token_counts = 0
        self._secret = secret
        self._joiners: dict[tuple[int, str], SurrogateJoiner] = {}
        self._blocks: dict[int, _Block] = {}
        self._response_id: str | None = None
        self._response_model: str | None = None
        self._stop_reason: str | None = None
        self._input = 0
        self._cache_read = 0
        self._cache_write = 0
        self._cache_details: set[UsageDetail] = set()
        self._output = 0
        self._usage_seen = False
        self._usage_reported = False

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        """Decode one SSE event."""
        if self.done:
            return []
        try:
            payload = json.loads(data)
        except json.JSONDecodeError as exc:
            raise self._bad("invalid JSON in a data line", data, exc.pos) from None
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
            raise self._bad("invalid JSON in a data line", data) from None
        if not isinstance(payload, dict):
            raise self._bad("a data line that is not a JSON object", data)
        kind = payload.get("type", event)
        if kind == "error" or event == "error":
            raise self._error(payload, data)
        try:
            return self._event(kind, payload)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # The shape checks below cover what the API documents; this is the net under them.
            raise self._bad(f"unexpected {kind!s:.40} event ({type(exc).__name__})", data) from None

    def end(self) -> list[StreamEvent]:
        """The body ended before ``message_stop``: the response was cut off."""
        if self.done:
            return []
        raise StreamError(
            f"{self.provider}: the stream ended before message_stop", provider=self.provider
        )

    def _bad(self, what: str, data: str, offset: int | None = None) -> StreamError:
        return StreamError(
            f"{self.provider}: {what} ({describe(data, offset=offset)})", provider=self.provider
        )

    def _joined(self, index: int, kind: str, text: str) -> str:
        joiner = self._joiners.get((index, kind))
        if joiner is None:
            joiner = self._joiners[(index, kind)] = SurrogateJoiner()
        return joiner.feed(text)

    def _held(self, index: int) -> list[StreamEvent]:
        """What a block's joiners still hold when it stops: a lone half, as U+FFFD."""
        out: list[StreamEvent] = []
        for kind, make in (("text", TextDelta), ("thinking", ThinkingDelta)):
            joiner = self._joiners.pop((index, kind), None)
            rest = joiner.flush() if joiner is not None else ""
            if rest:
                out.append(make(rest))
        return out

    def _event(self, kind: Any, payload: dict[str, Any]) -> list[StreamEvent]:
        if kind == "message_start":
            message = _obj(payload["message"])
            self._response_id = _opt_text(message.get("id"))
            self._response_model = _opt_text(message.get("model"))
            self._read_usage(message.get("usage"))
            return []
        if kind == "content_block_start":
            return self._block_start(_index(payload), _obj(payload["content_block"]))
        if kind == "content_block_delta":
            return self._block_delta(_index(payload), _obj(payload["delta"]))
        if kind == "content_block_stop":
            return self._block_stop(_index(payload))
        if kind == "message_delta":
            delta = _obj(payload.get("delta") or {})
            reason = delta.get("stop_reason")
            if reason is not None:
                self._stop_reason = _text(reason)
            self._read_usage(payload.get("usage"))
            return self._report_usage()
        if kind == "message_stop":
            self.done = True
            out: list[StreamEvent] = []
            for index in sorted({i for i, _ in self._joiners}):
                out.extend(self._held(index))  # blocks the server never stopped
            if self._usage_seen and not self._usage_reported:
                out.extend(self._report_usage())
            out.append(
                Finish(
                    reason=self._stop_reason,
                    response_id=self._response_id,
                    response_model=self._response_model,
                )
            )
            return out
        # ping, and event types added after this was written.
        return []

    def _block_start(self, index: int, block: dict[str, Any]) -> list[StreamEvent]:
        kind = _text(block["type"])
        state = _Block(type=kind)
        self._blocks[index] = state
        if kind == "text" and block.get("text"):
            text = self._joined(index, "text", _text(block["text"]))
            return [TextDelta(text)] if text else []
        if kind == "thinking":
            if block.get("signature"):
                state.signature = _text(block["signature"])
            if block.get("thinking"):
                thought = self._joined(index, "thinking", _text(block["thinking"]))
                state.thinking.append(thought)
                return [ThinkingDelta(thought)] if thought else []
            return []
        if kind == "redacted_thinking":
            state.redacted = _text(block.get("data") or "")
            return [ThinkingDelta("")]
        if kind == "tool_use":
            state.id = _text(block["id"])
            state.name = _text(block["name"])
            state.input = _obj(block.get("input") or {})
        return []

    def _block_delta(self, index: int, delta: dict[str, Any]) -> list[StreamEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            text = self._joined(index, "text", _text(delta["text"]))
            return [TextDelta(text)] if text else []
        if kind == "thinking_delta":
            text = self._joined(index, "thinking", _text(delta["thinking"]))
            block = self._blocks.get(index)
            if block is not None:
                block.thinking.append(text)
            return [ThinkingDelta(text)] if text else []
        if kind == "signature_delta":
            block = self._blocks.get(index)
            if block is None:
                raise KeyError(index)
            block.signature = (block.signature or "") + _text(delta["signature"])
            return []
        if kind == "input_json_delta":
            block = self._blocks.get(index)
            if block is None:
                raise KeyError(index)
            block.partial_json.append(_text(delta["partial_json"]))
        # citations_delta and newer kinds carry nothing the loop uses.
        return []

    def _block_stop(self, index: int) -> list[StreamEvent]:
        held = self._held(index)
        block = self._blocks.pop(index, None)
        if block is not None:
            block.thinking.extend(e.text for e in held if isinstance(e, ThinkingDelta))
        return [*held, *self._finished_block(block)]

    def _finished_block(self, block: _Block | None) -> list[StreamEvent]:
        if block is not None and block.type == "thinking" and block.signature:
            return [
                ThinkingBlockReady(
                    ThinkingBlock(thinking="".join(block.thinking), signature=block.signature)
                )
            ]
        if block is not None and block.type == "redacted_thinking" and block.redacted:
            return [ThinkingBlockReady(ThinkingBlock(redacted=block.redacted))]
        if block is None or block.type != "tool_use":
            return []
        raw = fix_surrogates("".join(block.partial_json))
        arguments = fix_surrogates_in(block.input)
        if raw.strip():
            try:
                parsed = json.loads(raw)
            except (ValueError, RecursionError):
                parsed = None
            if not isinstance(parsed, dict):
                # The loop answers it with an InvalidToolInput result the model can act on.
                return [
                    ToolCallReady(ToolCallPart(id=block.id, name=block.name, raw_arguments=raw))
                ]
            arguments = fix_surrogates_in(parsed)
        return [ToolCallReady(ToolCallPart(id=block.id, name=block.name, arguments=arguments))]

    def _read_usage(self, raw: Any) -> None:
        # message_start carries the input figures; message_delta's are cumulative and, when
        # present, replace them.
        if raw is None:
            return
        usage = _obj(raw)
        self._usage_seen = True
        if usage.get("input_tokens") is not None:
            self._input = self._count(usage["input_tokens"])
        if usage.get("cache_read_input_tokens") is not None:
            self._cache_read = self._count(usage["cache_read_input_tokens"])
            self._cache_details.add("cache_read")
        if usage.get("cache_creation_input_tokens") is not None:
            self._cache_write = self._count(usage["cache_creation_input_tokens"])
            self._cache_details.add("cache_write")
        if usage.get("output_tokens") is not None:
            self._output = self._count(usage["output_tokens"])

    def _count(self, value: Any) -> int:
        """A reported token count; an implausible one is unknown (0) and counted."""
        count = plausible_token_count(value)
        if count is None:
            self.rejected_token_counts += 1
            return 0
        return count

    def _report_usage(self) -> list[StreamEvent]:
        self._usage_reported = True
        return [
            UsageReport(
                Usage(
                    input_tokens=self._input + self._cache_read + self._cache_write,
                    output_tokens=self._output,
                    cache_read_input_tokens=self._cache_read,
                    cache_write_input_tokens=self._cache_write,
                    details=tuple(sorted(self._cache_details)),
                )
            )
        ]

    def _error(self, payload: dict[str, Any], data: str) -> ModelError:
        error = payload.get("error")
        if not isinstance(error, dict):
            return StreamError(
                f"{self.provider}: an error event without an error object ({describe(data)})",
                provider=self.provider,
            )
        kind = error.get("type")
        message = error.get("message")
        if isinstance(kind, str):
            # Redact first: a cut must never leave part of an echoed key behind.
            text = shorten(redact(f"{kind[:60]}: {message}", self._secret), 240)
        else:
            text = f"an error object without a type ({describe(data)})"
        status = _ERROR_STATUS.get(kind, 500) if isinstance(kind, str) else 500
        return error_for_status(status, f"error event: {text}", provider=self.provider)


def _obj(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError("expected an object")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _opt_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _index(payload: dict[str, Any]) -> int:
    index = payload["index"]
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError("expected an index")
    return index
