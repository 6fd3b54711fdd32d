"""What the HTTP model clients share: the streaming call, and HTTP failures as ``LoopError``s.

The retry verdicts, for every provider:

=============================================  ===========================================
what happened                                  error
=============================================  ===========================================
429                                            ``RateLimited`` (``retry_after`` from the
                                               ``retry-after-ms`` / ``retry-after`` header)
529, or an "overloaded" error event            ``RateLimited`` (overloaded)
408, 409, 5xx                                  ``ModelError(retryable=True)``
connect error, timeout, other transport error  ``ModelError(retryable=True)``
other 4xx (400, 401, 403, 404, 413, 422, …)    ``ModelError(retryable=False)`` with the
                                               server's message
the stream breaks off or ends early            ``StreamError`` (retryable)
a line or payload that is not the protocol     ``StreamError`` quoting it (truncated)
=============================================  ===========================================

Every message a client builds goes through :func:`redact`, so the API key
never reaches an error, a log line or a span, even when a server echoes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import math
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import httpx

from loopobs.core.errors import LoopError, ModelError, RateLimited, StreamError
from loopobs.core.model import ModelRequest, StreamEvent
from loopobs.llm._sse import SSEDecoder

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "DEFAULT_TIMEOUT",
    "EventDecoder",
    "HttpModelClient",
    "error_for_status",
    "parse_retry_after",
    "quote",
    "redact",
    "stream_events",
]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Reads may wait long: a reasoning model can think for minutes before its first chunk."""

DRAIN_LIMIT = 64 * 1024
DRAIN_SECONDS = 2.0
_QUOTE_LIMIT = 200
_ERROR_BODY_LIMIT = 64 * 1024


class EventDecoder(Protocol):
    """Turns one provider's SSE events into stream events.

    ``feed`` takes each ``(event, data)`` pair and returns what it completed;
    once ``done`` is true the driver stops reading. ``end`` is called when
    the body ends before that: it returns the final events, or raises
    :class:`StreamError` if the stream was cut off. Both raise only
    ``LoopError``s, whatever the input.
    """

    done: bool

    def feed(self, event: str, data: str) -> list[StreamEvent]: ...

    def end(self) -> list[StreamEvent]: ...


def quote(text: str, limit: int = _QUOTE_LIMIT) -> str:
    """``text`` shortened to ``limit`` characters, as a Python literal, for error messages."""
    if len(text) > limit:
        return repr(text[:limit]) + f"… ({len(text)} chars)"
    return repr(text)


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` masked."""
    if secret and secret in text:
        return text.replace(secret, "***")
    return text


def parse_retry_after(headers: httpx.Headers | Mapping[str, str]) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            pass
        else:
            if math.isfinite(value) and value >= 0:
                return value
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - time.time())
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


def server_message(body: bytes) -> str:
    """The human-readable message of an error body, as OpenAI, Anthropic and most servers send it.

    ``{"error": {"message": ...}}`` (OpenAI, Anthropic, vLLM), ``{"error": "..."}``
    (Ollama), ``{"message": ...}``/``{"detail": ...}`` (others); anything else
    is quoted as text.
    """
    text = body.decode("utf-8", errors="replace").strip()
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested too deeply
        return quote(text) if text else "(empty body)"
    found = _message_in(payload)
    return found if found is not None else quote(text)


def _message_in(payload: Any) -> str | None:
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if isinstance(error, dict):
        message = error.get("message")
        kind = error.get("type") or error.get("code")
        if isinstance(message, str) and message:
            text = message[:_QUOTE_LIMIT]
            return f"{kind}: {text}" if isinstance(kind, str) and kind else text
    if isinstance(error, str) and error:
        return error[:_QUOTE_LIMIT]
    for key in ("message", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return value[:_QUOTE_LIMIT]
    return None


def error_for_status(
    status: int,
    message: str,
    *,
    provider: str,
    retry_after: float | None = None,
) -> ModelError:
    """The error for an HTTP status (or the status an error event stands for)."""
    text = f"{provider}: HTTP {status}: {message}"
    if status == 429:
        return RateLimited(text, retry_after=retry_after, status_code=status, provider=provider)
    if status == 529:
        return RateLimited(text, retry_after=retry_after, status_code=status, provider=provider)
    retryable = status in (408, 409) or status >= 500
    return ModelError(text, retryable=retryable, status_code=status, provider=provider)


async def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        body += chunk
        if len(body) >= _ERROR_BODY_LIMIT:
            break
    return bytes(body[:_ERROR_BODY_LIMIT])


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the final event, so that the connection goes back to the pool.

    Usually that is only the end of the chunked body; a server that keeps
    sending (or stalls) costs at most ``DRAIN_LIMIT`` bytes or ``DRAIN_SECONDS``,
    after which the connection is closed instead of reused.
    """

    async def read() -> None:
        total = 0
        async for chunk in chunks:
            total += len(chunk)
            if total > DRAIN_LIMIT:
                return

    with contextlib.suppress(asyncio.TimeoutError, httpx.HTTPError):
        await asyncio.wait_for(read(), DRAIN_SECONDS)


async def stream_events(
    http: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    timeout: httpx.Timeout | float | None,
    provider: str,
    secret: str | None,
    decoder: EventDecoder,
    auth_hint: str = "",
) -> AsyncGenerator[StreamEvent, None]:
    """POST ``body`` to ``url`` and stream the decoded events.

    The response is opened in an ``async with``: however the caller leaves
    (end of stream, an error, ``aclose()`` on cancellation) the connection
    goes back to the pool or is closed. ``auth_hint`` is appended to 401
    messages (e.g. when no API key was configured).
    """
    # The injected client's own timeout applies unless one was given.
    request = http.build_request(
        "POST",
        url,
        json=dict(body),
        headers=dict(headers),
        timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
    )
    started = False
    try:
        response = await http.send(request, stream=True)
    except httpx.TimeoutException as exc:
        raise ModelError(
            redact(
                f"{provider}: request to {request.url.host} timed out ({type(exc).__name__})",
                secret,
            ),
            retryable=True,
            provider=provider,
        ) from exc
    except httpx.TransportError as exc:
        raise ModelError(
            redact(
                f"{provider}: cannot reach {request.url.host}: {type(exc).__name__}: {exc}", secret
            ),
            retryable=True,
            provider=provider,
        ) from exc
    try:
        if response.status_code >= 300:
            try:
                raw = await _read_capped(response)
            except httpx.TransportError:
                raw = b""
            message = server_message(raw)
            if response.status_code == 401 and auth_hint:
                message = f"{message} ({auth_hint})"
            raise error_for_status(
                response.status_code,
                redact(message, secret),
                provider=provider,
                retry_after=parse_retry_after(response.headers),
            )
        content_type = response.headers.get("content-type", "")
        if "json" in content_type:
            # A server that ignored ``stream: true`` (or sent an error with status 200).
            raw = await _read_capped(response)
            raise StreamError(
                redact(
                    f"{provider}: expected an event stream, got {content_type}: "
                    f"{server_message(raw)}",
                    secret,
                ),
                retryable=False,
                status_code=response.status_code,
                provider=provider,
            )
        sse = SSEDecoder()
        chunks = response.aiter_bytes()
        async for chunk in chunks:
            started = True
            for event in sse.feed(chunk):
                for item in decoder.feed(event.event, event.data):
                    yield item
                if decoder.done:
                    break
            if decoder.done:
                break
        else:
            for event in sse.flush():
                for item in decoder.feed(event.event, event.data):
                    yield item
                if decoder.done:
                    break
            if not decoder.done:
                for item in decoder.end():
                    yield item
        if decoder.done:
            await _drain(chunks)
    except httpx.TimeoutException as exc:
        where = "while streaming" if started else "waiting for the first chunk"
        raise StreamError(
            f"{provider}: read timed out {where} ({type(exc).__name__})", provider=provider
        ) from exc
    except httpx.TransportError as exc:
        raise StreamError(
            redact(f"{provider}: the stream broke off: {type(exc).__name__}: {exc}", secret),
            provider=provider,
        ) from exc
    except ModelError as exc:
        # Decoders quote what the server sent, and a server may echo the key.
        if secret and secret in exc.message:
            data = exc.to_dict()
            data["message"] = redact(exc.message, secret)
            raise LoopError.from_dict(data) from None
        raise
    finally:
        await response.aclose()


class HttpModelClient:
    """What the HTTP clients share: the streaming call, the connection pool, a key-free ``repr``.

    One ``httpx.AsyncClient`` serves every call, so connections are reused.
    An injected client belongs to the caller and is never closed here.
    A subclass names its ``endpoint`` and ``key_env`` and builds headers, body and decoder.
    """

    provider: str
    endpoint: ClassVar[str]
    """The streaming endpoint's path below ``base_url``."""
    key_env: ClassVar[str]
    """The environment variable the API key is read from."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        http_client: httpx.AsyncClient | None,
        timeout: httpx.Timeout | float | None,
        provider: str,
        extra_headers: Mapping[str, str] | None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        # An explicit key wins; None means "read the provider's environment variable".
        self._api_key = (api_key if api_key is not None else os.environ.get(self.key_env)) or None
        self._extra_headers = dict(extra_headers or {})
        self._owns_http = http_client is None
        self._http = (
            http_client if http_client is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
        )
        self._timeout = timeout

    def __repr__(self) -> str:
        key = "set" if self._api_key else "none"
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, provider={self.provider!r}, "
            f"api_key={key})"
        )

    def build_headers(self) -> dict[str, str]:
        """The request headers (the key included: never log them)."""
        raise NotImplementedError

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body of one streaming call."""
        raise NotImplementedError

    def decoder(self) -> EventDecoder:
        """A fresh decoder for one response's events."""
        raise NotImplementedError

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Run one streaming call and yield its events; the response is always closed."""
        events = stream_events(
            self._http,
            f"{self.base_url}{self.endpoint}",
            headers=self.build_headers(),
            body=self.build_body(request),
            timeout=self._timeout,
            provider=self.provider,
            secret=self._api_key,
            decoder=self.decoder(),
            auth_hint="" if self._api_key else f"no API key: pass api_key= or set {self.key_env}",
        )
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()

    async def aclose(self) -> None:
        """Close the connection pool, if this client created it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
