"""A streaming client for OpenAI's Chat Completions API and the servers that speak it.

Works against OpenAI and against OpenAI-compatible servers (vLLM, Ollama,
llama.cpp server, LM Studio, OpenRouter, …): point ``base_url`` at the
server's ``/v1``. Every request streams with ``stream_options.include_usage``
so the run reports its tokens.

What comes back:

- ``delta.content`` → :class:`TextDelta`; ``delta.reasoning_content`` (DeepSeek,
  llama.cpp, older vLLM) or ``delta.reasoning`` (vLLM, Ollama, OpenRouter)
  → :class:`ThinkingDelta` (a server that sends both sends the same text
  twice: the first one present wins).
- ``delta.tool_calls`` fragments are assembled by ``index`` (ids, names and
  argument JSON split over many chunks, several calls interleaved) and each
  complete call is a :class:`ToolCallReady`, in index order, once the
  choice finishes. Fragments without an ``index`` (servers that send each
  call whole) start a new call when their id changes; a call without an id
  gets ``call_<index>``.
- ``usage`` (``prompt_tokens``, ``completion_tokens``, cached prompt tokens,
  reasoning tokens) → one :class:`UsageReport` before the :class:`Finish`.
- ``finish_reason`` is kept as the server says it (``stop``, ``tool_calls``,
  ``length``, …), with the response ``id`` and ``model``.

The stream is complete at ``data: [DONE]``; a body that ends after the
choice's ``finish_reason`` but without ``[DONE]`` (some older local servers)
is accepted too. A body that ends before either is a retryable
:class:`~loopobs.contract.errors.StreamError`.

Only choice 0 is read: the loop asks for one completion.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from loopobs.contract.errors import ModelError, RateLimited, StreamError, shorten
from loopobs.contract.events import Usage, UsageDetail
from loopobs.contract.model import (
    AssistantMessage,
    Finish,
    Message,
    ModelRequest,
    StreamEvent,
    SystemMessage,
    TextDelta,
    ThinkingDelta,
    ToolCallPart,
    ToolCallReady,
    ToolDefinition,
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

__all__ = ["OpenAIClient"]


class OpenAIClient(HttpModelClient):
    """Streams Chat Completions from OpenAI or any OpenAI-compatible server.

    Args:
        base_url: the API root, ending in ``/v1`` (``http://localhost:11434/v1``
            for Ollama, ``http://localhost:8000/v1`` for vLLM).
        api_key: sent as ``Authorization: Bearer``; defaults to the
            ``OPENAI_API_KEY`` environment variable. Servers that need no
            key get no header. Keyword only, as for every client (a second
            positional argument is still taken as the key, with a ``DeprecationWarning``).
        http_client: an ``httpx.AsyncClient`` to send through (its
            connection pool, proxies and timeout are used). Without one the
            client makes its own, closed by :meth:`aclose`.
        timeout: httpx's per-operation timeout (each connect, each read: a
            server that keeps sending never trips it; ``deadline`` bounds the
            whole call); by default the injected client's, or
            10 s to connect and 600 s per read for the client's own. httpx's
            own default is 5 s, too short for a model that thinks before its
            first token: set one on an injected client, or pass this.
        provider: the provider name observers and spans report.
        extra_headers: headers added to every request (``OpenAI-Organization``, …).
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

    endpoint = "/chat/completions"
    key_env = "OPENAI_API_KEY"

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        *legacy_key: str,
        api_key: str | None = None,
        http_client: httpx.AsyncClient | None = None,
        timeout: httpx.Timeout | float | None = None,
        provider: str = "openai",
        extra_headers: Mapping[str, str] | None = None,
        deadline: float | None = DEFAULT_DEADLINE,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> None:
        if legacy_key:
            if len(legacy_key) > 1:
                raise TypeError("OpenAIClient takes one positional argument (base_url)")
            warnings.warn(
                "OpenAIClient(base_url, api_key): pass api_key= by keyword, as every "
                "client takes it; the positional form goes away in loopobs 0.3",
                DeprecationWarning,
                stacklevel=2,
            )
            api_key = api_key if api_key is not None else legacy_key[0]
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
        self._encoded: EncodedMessages[bytes] = EncodedMessages(
            lambda message: json_body(_message(message)), len
        )

    def build_content(self, request: ModelRequest) -> bytes:
        """``json_body(self.build_body(request))``, byte for byte, encoding only new messages.

        Each message's JSON is kept from the requests it was sent in (see
        :class:`~loopobs.llm._encoded.EncodedMessages`), so a turn of a long
        conversation encodes the turn's messages, not the history.
        """
        if "messages" in request.options:
            return json_body(self.build_body(request))
        messages = b",".join([self._encoded.get(m) for m in request.messages])
        content = splice_messages(self.build_body(request, messages=False), messages)
        return content if content is not None else json_body(self.build_body(request))

    def build_body(self, request: ModelRequest, *, messages: bool = True) -> dict[str, Any]:
        """The JSON body of the Chat Completions request for ``request``.

        ``request.options`` are passed through (``temperature``, ``max_tokens``,
        ``reasoning_effort``, …); ``stream`` is always true and
        ``stream_options.include_usage`` always set. ``messages=False`` leaves
        the message list empty (:meth:`build_content` splices in the encoded one).
        """
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [_message(m) for m in request.messages] if messages else [],
        }
        if request.tools:
            body["tools"] = [_tool(t) for t in request.tools]
        body.update(request.options)
        body["stream"] = True
        stream_options = body.get("stream_options")
        body["stream_options"] = {
            **(stream_options if isinstance(stream_options, Mapping) else {}),
            "include_usage": True,
        }
        return body

    def build_headers(self) -> dict[str, str]:
        """The request headers (the key included: never log them)."""
        headers = {"accept": "text/event-stream", **self._extra_headers}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def decoder(self) -> ChatCompletionsDecoder:
        """A fresh decoder for one response."""
        return ChatCompletionsDecoder(provider=self.provider, secret=self._api_key)


# -- request translation ------------------------------------------------------------------


def _message(message: Message) -> dict[str, Any]:
    if isinstance(message, SystemMessage):
        return {"role": "system", "content": message.content}
    if isinstance(message, UserMessage):
        return {"role": "user", "content": message.content}
    if isinstance(message, AssistantMessage):
        # Reasoning is not sent back: the API has no field for it (and DeepSeek rejects one).
        out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(dict(call.arguments), ensure_ascii=False),
                    },
                }
                for call in message.tool_calls
            ]
        elif out["content"] is None:
            out["content"] = ""
        return out
    # Chat Completions has no error flag on tool results: the content says what went wrong.
    return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}


def _tool(tool: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {"name": tool.name, "parameters": dict(tool.parameters)}
    if tool.description:
        function["description"] = tool.description
    return {"type": "function", "function": function}


# -- response decoding --------------------------------------------------------------------


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: str = ""


class ChatCompletionsDecoder:
    """Decodes the ``chat.completion.chunk`` SSE stream into stream events.

    Raises only ``LoopError``s: a payload that is not JSON, or not the shape
    the API documents, is a :class:`StreamError` describing where (never
    quoting it: it is model output); an error object in the stream is a
    :class:`ModelError` with the right retry verdict and the server's message,
    ``secret`` masked in it. Surrogate pairs split across chunks are joined.
    Token counts that are not plausible are reported as 0 and counted in
    :attr:`rejected_token_counts`.
    """

    def __init__(self, *, provider: str = "openai", secret: str | None = None) -> None:
        self.provider = provider
        self.done = False
        self.rejected_token_counts = 0
        self._secret = secret
        self._text = SurrogateJoiner()
        self._thinking = SurrogateJoiner()
        self._calls: dict[int, _PartialCall] = {}
        self._finish_reason: str | None = None
        self._calls_emitted = False
        self._response_id: str | None = None
        self._response_model: str | None = None
        self._service_tier: str | None = None
        self._system_fingerprint: str | None = None
        self._usage: Usage | None = None

    def feed(self, event: str, data: str) -> list[StreamEvent]:
        """Decode one SSE event."""
        if self.done:
            return []
        if data.strip() == "[DONE]":
            return self._finish()
        payload = self._json(data)
        if event == "error" or payload.get("error") is not None or payload.get("object") == "error":
            raise self._stream_error(payload, data)
        try:
            return self._chunk(payload)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            # The shape checks below cover what the API documents; this is the net under them.
            raise self._bad(f"unexpected chunk ({type(exc).__name__})", data) from None

    def end(self) -> list[StreamEvent]:
        """The body ended without ``[DONE]``: fine after a finish reason, broken before."""
        if self.done:
            return []
        if self._finish_reason is None:
            raise StreamError(
                f"{self.provider}: the stream ended before the response finished "
                "(no finish_reason, no [DONE])",
                provider=self.provider,
            )
        return self._finish()

    def _json(self, data: str) -> dict[str, Any]:
        try:
            payload = json.loads(data)
        except json.JSONDecodeError as exc:
            raise self._bad("invalid JSON in a data line", data, exc.pos) from None
        except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
            raise self._bad("invalid JSON in a data line", data) from None
        if not isinstance(payload, dict):
            raise self._bad("a data line that is not a JSON object", data)
        return payload

    def _bad(self, what: str, data: str, offset: int | None = None) -> StreamError:
        return StreamError(
            f"{self.provider}: {what} ({describe(data, offset=offset)})", provider=self.provider
        )

    def _chunk(self, payload: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        if isinstance(payload.get("id"), str) and payload["id"]:
            self._response_id = payload["id"]
        if isinstance(payload.get("model"), str) and payload["model"]:
            self._response_model = payload["model"]
        if isinstance(payload.get("service_tier"), str) and payload["service_tier"]:
            self._service_tier = payload["service_tier"]
        if isinstance(payload.get("system_fingerprint"), str) and payload["system_fingerprint"]:
            self._system_fingerprint = payload["system_fingerprint"]
        usage = payload.get("usage")
        if usage is not None:
            self._usage = self._read_usage(usage)
        choices = payload.get("choices") or []
        if not isinstance(choices, list):
            raise TypeError("choices")
        for choice in choices:
            if not isinstance(choice, dict):
                raise TypeError("choice")
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise TypeError("delta")
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                thought = self._thinking.feed(_text(reasoning))
                if thought:
                    out.append(ThinkingDelta(thought))
            content = delta.get("content")
            if content:
                text = self._text.feed(_text(content))
                if text:
                    out.append(TextDelta(text))
            for fragment in delta.get("tool_calls") or ():
                self._tool_fragment(fragment)
            reason = choice.get("finish_reason")
            if reason is not None:
                self._finish_reason = _text(reason)
                out.extend(self._ready_calls())
        return out

    def _tool_fragment(self, fragment: Any) -> None:
        if not isinstance(fragment, dict):
            raise TypeError("tool call")
        index = fragment.get("index")
        if index is None:
            # Servers that send each call whole omit the index: a new id starts a new call.
            index = max(self._calls, default=0)
            current = self._calls.get(index)
            if current is not None and fragment.get("id") and current.id != fragment["id"]:
                index += 1
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError("tool call index")
        call = self._calls.setdefault(index, _PartialCall())
        if fragment.get("id"):
            call.id = _text(fragment["id"])
        function = fragment.get("function") or {}
        if not isinstance(function, dict):
            raise TypeError("function")
        if function.get("name"):
            # Names arrive whole in the first fragment; a few servers repeat them.
            name = _text(function["name"])
            call.name = name if not call.name or call.name == name else call.name + name
        if function.get("arguments"):
            call.arguments += _text(function["arguments"])

    def _count(self, value: Any) -> int:
        """A reported token count; an implausible one is unknown (0) and counted."""
        if value is None:
            return 0
        count = plausible_token_count(value)
        if count is None:
            self.rejected_token_counts += 1
            return 0
        return count

    def _read_usage(self, raw: Any) -> Usage:
        if not isinstance(raw, dict):
            raise TypeError("usage")
        prompt_details = raw.get("prompt_tokens_details") or {}
        completion_details = raw.get("completion_tokens_details") or {}
        if not isinstance(prompt_details, dict) or not isinstance(completion_details, dict):
            raise TypeError("usage details")
        # prompt_tokens already counts the cached tokens, completion_tokens the reasoning ones.
        details: list[UsageDetail] = []
        if prompt_details.get("cached_tokens") is not None:
            details.append("cache_read")
        if completion_details.get("reasoning_tokens") is not None:
            details.append("reasoning")
        return Usage(
            details=tuple(details),
            input_tokens=self._count(raw.get("prompt_tokens")),
            output_tokens=self._count(raw.get("completion_tokens")),
            cache_read_input_tokens=self._count(prompt_details.get("cached_tokens")),
            reasoning_output_tokens=self._count(completion_details.get("reasoning_tokens")),
        )

    def _ready_calls(self) -> list[StreamEvent]:
        if self._calls_emitted:
            return []
        self._calls_emitted = True
        out: list[StreamEvent] = []
        for index in sorted(self._calls):
            call = self._calls[index]
            if not call.name:
                raise StreamError(
                    f"{self.provider}: tool call {index} has no function name",
                    provider=self.provider,
                )
            out.append(
                ToolCallReady(
                    _tool_call_part(call.id or f"call_{index}", call.name, call.arguments)
                )
            )
        return out

    def _finish(self) -> list[StreamEvent]:
        self.done = True
        out: list[StreamEvent] = []
        thought, text = self._thinking.flush(), self._text.flush()
        if thought:
            out.append(ThinkingDelta(thought))
        if text:
            out.append(TextDelta(text))
        out.extend(self._ready_calls())
        if self._usage is not None:
            out.append(UsageReport(self._usage))
        out.append(
            Finish(
                reason=self._finish_reason,
                response_id=self._response_id,
                response_model=self._response_model,
                service_tier=self._service_tier,
                system_fingerprint=self._system_fingerprint,
            )
        )
        return out

    def _stream_error(self, payload: dict[str, Any], data: str) -> ModelError:
        error = payload.get("error", payload)
        if not isinstance(error, dict):
            error = {"message": str(error)}
        message = error.get("message")
        kind = error.get("type") or error.get("code") or ""
        if kind and isinstance(message, str):
            # Redact first: a cut must never leave part of an echoed key behind.
            text = shorten(redact(f"{str(kind)[:60]}: {message}", self._secret), 240)
        else:
            text = f"an error object without a message ({describe(data)})"
        code = error.get("code")
        status = code if isinstance(code, int) and 400 <= code <= 599 else None
        kind_text = str(kind).lower()
        if status is None and "rate_limit" in kind_text:
            status = 429
        if status is not None:
            return error_for_status(status, f"error event: {text}", provider=self.provider)
        if "overloaded" in kind_text:
            return RateLimited(
                f"{self.provider}: error event: {text}",
                status_code=None,
                provider=self.provider,
            )
        # An error after a 200 is the server's trouble unless it says the request was bad.
        retryable = not any(
            word in kind_text for word in ("invalid", "auth", "permission", "not_found")
        )
        return ModelError(
            f"{self.provider}: error event: {text}",
            retryable=retryable,
            provider=self.provider,
        )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _tool_call_part(call_id: str, name: str, arguments: str) -> ToolCallPart:
    """The call, with its arguments parsed; text that is not a JSON object travels raw.

    The loop answers a call with raw arguments with an ``InvalidToolInput`` error
    result, so the model sees what was wrong and can try again in the same run.
    """
    call_id, name = fix_surrogates(call_id), fix_surrogates(name)
    arguments = fix_surrogates(arguments)
    if not arguments.strip():
        return ToolCallPart(id=call_id, name=name)
    try:
        value = json.loads(arguments)
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        return ToolCallPart(id=call_id, name=name, raw_arguments=arguments)
    return ToolCallPart(id=call_id, name=name, arguments=fix_surrogates_in(value))
