"""What the HTTP model clients share: the streaming call, and HTTP failures as ``LoopError``s.

The retry verdicts, for every provider:

=============================================  ===========================================
what happened                                  error
=============================================  ===========================================
429                                            ``RateLimited`` (``retry_after`` from the
                                               ``retry-after-ms`` / ``retry-after`` header)
529, or an "overloaded" error event            ``RateLimited`` (overloaded)
408, 409, 5xx                                  ``ModelError(retryable=True)`` (also when the
                                               error body cannot be read or decoded)
connect error, timeout, other transport error  ``ModelError(retryable=True)``
too many redirects, unsupported URL scheme,    ``ModelError(retryable=False)``
a body that cannot be encoded as JSON
other 4xx (400, 401, 403, 404, 413, 422, …)    ``ModelError(retryable=False)`` with the
                                               server's message
the stream breaks off, ends early, or its      ``StreamError`` (retryable)
body cannot be decoded (``Content-Encoding``)
the call runs past its ``deadline``            ``ModelError`` before the response starts,
                                               ``StreamError`` after (both retryable)
the body grows past ``max_response_bytes``,    ``StreamError`` (retryable)
or one line past ``max_line_chars``
a line or payload that is not the protocol     ``StreamError`` describing it (offset,
                                               length, hash), never quoting it
=============================================  ===========================================

Limits: ``timeout`` bounds each connect and each read; ``deadline`` (default
:data:`DEFAULT_DEADLINE` seconds) bounds the whole call, so a server that
trickles bytes or only sends keep-alive comments cannot hold a run; the body
read is bounded by ``max_response_bytes`` (default :data:`DEFAULT_MAX_RESPONSE_BYTES`)
and one SSE line or event by ``max_line_chars`` (:data:`DEFAULT_MAX_LINE_CHARS`).

Every message a client builds is redacted (the key whole, escaped, or cut off)
before it is shortened, so the API key never reaches an error, a log line or a
span, even when a server echoes it. Model output is never quoted in an error:
errors reach span status, and message content stays out of telemetry.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import hashlib
import json
import logging
import math
import os
import sys
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

import httpx

from loopobs.contract.errors import LoopError, ModelError, RateLimited, StreamError, shorten
from loopobs.contract.model import ModelRequest, StreamEvent
from loopobs.llm._sse import DEFAULT_MAX_LINE_CHARS, LineTooLong, SSEDecoder
from loopobs.llm.secrets import check_secret, redact

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "DEFAULT_DEADLINE",
    "DEFAULT_MAX_LINE_CHARS",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "EventDecoder",
    "HttpModelClient",
    "describe",
    "error_for_status",
    "json_body",
    "parse_retry_after",
    "quote",
    "redact",
    "stream_events",
]

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
"""Reads may wait long: a reasoning model can think for minutes before its first chunk."""

DEFAULT_DEADLINE = 1800.0
"""Seconds one model call may take in all, from connecting to the last byte."""

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024
"""Bytes one response body may have (after content decoding)."""

DRAIN_LIMIT = 64 * 1024
DRAIN_SECONDS = 2.0
_QUOTE_LIMIT = 200
_ERROR_BODY_LIMIT = 64 * 1024

_T = TypeVar("_T")

_usage_logger = logging.getLogger("loopobs.usage")


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


def quote(text: str, limit: int = _QUOTE_LIMIT, *, secret: str | None = None) -> str:
    """``text`` redacted, then shortened to ``limit`` characters, as a Python literal.

    For what servers say about a failure (error bodies); never for model output.
    """
    text = redact(text, secret)
    if len(text) > limit:
        return repr(text[:limit]) + f"… ({len(text)} chars)"
    return repr(text)


def describe(data: str, *, offset: int | None = None) -> str:
    """Where a payload is broken, without its content: offset, length and a short hash.

    Error messages end up as span status and in logs, where model output must
    not go; the hash lets someone holding the full event log find the line.
    """
    digest = hashlib.sha256(data.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    where = f"at offset {offset} of " if offset is not None else ""
    return f"{where}a {len(data)}-char payload, sha256 {digest}"


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


def server_message(body: bytes, secret: str | None = None) -> str:
    """The human-readable message of an error body, as OpenAI, Anthropic and most servers send it.

    ``{"error": {"message": ...}}`` (OpenAI, Anthropic, vLLM), ``{"error": "..."}``
    (Ollama), ``{"message": ...}``/``{"detail": ...}`` (others); anything else
    is quoted as text. ``secret`` is masked before anything is shortened.
    """
    text = redact(body.decode("utf-8", errors="replace").strip(), secret)
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
            text = shorten(message, _QUOTE_LIMIT)
            return f"{kind}: {text}" if isinstance(kind, str) and kind else text
    if isinstance(error, str) and error:
        return shorten(error, _QUOTE_LIMIT)
    for key in ("message", "detail"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            return shorten(value, _QUOTE_LIMIT)
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


class _DeadlinePassed(Exception):
    """The call's own deadline fired (unlike a ``TimeoutError`` from below, an ``OSError``)."""


if sys.version_info >= (3, 11):

    async def _by(when: float | None, step: Awaitable[_T]) -> _T:
        """``await step``; :class:`_DeadlinePassed` at loop time ``when`` (None: no bound)."""
        if when is None:
            return await step
        bound = asyncio.timeout_at(when)
        try:
            async with bound:
                return await step
        except TimeoutError:
            if bound.expired():
                raise _DeadlinePassed from None
            raise

else:  # pragma: no cover - Python 3.10

    async def _by(when: float | None, step: Awaitable[_T]) -> _T:
        """``await step``; :class:`_DeadlinePassed` at loop time ``when`` (None: no bound)."""
        if when is None:
            return await step
        remaining = max(0.0, when - asyncio.get_running_loop().time())
        try:
            return await asyncio.wait_for(step, remaining)
        except asyncio.TimeoutError:
            raise _DeadlinePassed from None


def json_body(body: object) -> bytes:
    """``body`` as UTF-8 JSON; text holding lone UTF-16 surrogates is repaired, never an error.

    Surrogate pairs that arrived split (``"\\ud83d"`` then ``"\\ude00"``) are joined
    into their character, and a surrogate left alone becomes U+FFFD: one odd
    character in a conversation must not make every later request of the session fail.
    """
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace").encode()


def _transport_error(
    exc: Exception, *, provider: str, host: str, secret: str | None, streaming: bool
) -> ModelError:
    """The ``LoopError`` for an exception of the HTTP stack, with its retry verdict."""
    detail = shorten(redact(f"{type(exc).__name__}: {exc}", secret), _QUOTE_LIMIT)
    if isinstance(exc, (httpx.TooManyRedirects, httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return ModelError(
            f"{provider}: cannot send the request to {host}: {detail}",
            retryable=False,
            provider=provider,
        )
    if isinstance(exc, httpx.TimeoutException):
        if streaming:
            return StreamError(
                f"{provider}: read timed out while streaming ({type(exc).__name__})",
                provider=provider,
            )
        return ModelError(
            f"{provider}: request to {host} timed out ({type(exc).__name__})",
            retryable=True,
            provider=provider,
        )
    if streaming:
        what = (
            "the response body cannot be decoded"
            if isinstance(exc, httpx.DecodingError)
            else "the stream broke off"
        )
        return StreamError(f"{provider}: {what}: {detail}", provider=provider)
    return ModelError(
        f"{provider}: cannot reach {host}: {detail}", retryable=True, provider=provider
    )


def _cause(exc: BaseException, secret: str | None) -> BaseException | None:
    """``exc`` to chain as ``__cause__``, unless its text holds the secret in some form."""
    if secret and redact(str(exc), secret) != str(exc):
        return None
    return exc


async def stream_events(
    http: httpx.AsyncClient,
    url: str,
    *,
    headers: Mapping[str, str],
    body: Mapping[str, Any] | Callable[[], bytes],
    timeout: httpx.Timeout | float | None,
    provider: str,
    secret: str | None,
    decoder: EventDecoder,
    auth_hint: str = "",
    deadline: float | None = DEFAULT_DEADLINE,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
) -> AsyncGenerator[StreamEvent, None]:
    """POST ``body`` to ``url`` and stream the decoded events.

    The response is opened in an ``async with``: however the caller leaves
    (end of stream, an error, ``aclose()`` on cancellation) the connection
    goes back to the pool or is closed. ``auth_hint`` is appended to 401
    messages (e.g. when no API key was configured). Every failure is a
    ``LoopError`` (see the module's table); ``deadline`` seconds bound the
    whole call and ``max_response_bytes`` its body. ``body`` is the JSON body, or
    a function that encodes it (called here, so its failures are reported as above).
    """
    host = ""
    try:
        content = body() if callable(body) else json_body(body)
        request = http.build_request(
            "POST",
            url,
            content=content,
            headers={**headers, "content-type": "application/json"},
            # The injected client's own timeout applies unless one was given.
            timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else timeout,
        )
    except (ValueError, TypeError) as exc:  # a body json.dumps refuses, a header httpx refuses
        raise ModelError(
            shorten(
                redact(
                    f"{provider}: cannot build the request: {type(exc).__name__}: {exc}", secret
                ),
                300,
            ),
            retryable=False,
            provider=provider,
        ) from None
    except httpx.InvalidURL as exc:
        raise _transport_error(
            exc, provider=provider, host=host, secret=secret, streaming=False
        ) from None
    host = request.url.host
    when = None if deadline is None else asyncio.get_running_loop().time() + deadline
    started = False
    try:
        response = await _by(when, http.send(request, stream=True))
    except _DeadlinePassed:
        raise ModelError(
            f"{provider}: no response from {host} within the deadline of {deadline:g}s",
            retryable=True,
            provider=provider,
        ) from None
    except (httpx.HTTPError, OSError) as exc:  # OSError: from a transport httpx does not wrap
        raise _transport_error(
            exc, provider=provider, host=host, secret=secret, streaming=False
        ) from _cause(exc, secret)
    try:
        if response.status_code >= 300:
            try:
                message = server_message(await _by(when, _read_capped(response)), secret)
            except (httpx.HTTPError, OSError, _DeadlinePassed) as exc:
                # The status says enough; the body is only the message.
                message = f"(the error body could not be read: {type(exc).__name__})"
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
            raw = await _by(when, _read_capped(response))
            text = redact(raw.decode("utf-8", errors="replace").strip(), secret)
            try:
                found = _message_in(json.loads(text))
            except (ValueError, RecursionError):
                found = None
            raise StreamError(
                f"{provider}: expected an event stream, got {shorten(content_type, 60)}: "
                f"{found if found is not None else describe(text)}",
                retryable=False,
                status_code=response.status_code,
                provider=provider,
            )
        sse = SSEDecoder(max_line_chars=max_line_chars)
        chunks = response.aiter_bytes()
        received = 0
        ended = True
        while True:
            try:
                chunk = await _by(when, chunks.__anext__())
            except StopAsyncIteration:
                break
            started = True
            received += len(chunk)
            if received > max_response_bytes:
                raise StreamError(
                    f"{provider}: the response grew past max_response_bytes "
                    f"({max_response_bytes} bytes) without finishing",
                    provider=provider,
                )
            for event in sse.feed(chunk):
                for item in decoder.feed(event.event, event.data):
                    yield item
                if decoder.done:
                    break
            if decoder.done:
                ended = False
                break
        if ended:
            for event in sse.flush():
                for item in decoder.feed(event.event, event.data):
                    yield item
                if decoder.done:
                    break
            if not decoder.done:
                for item in decoder.end():
                    yield item
        else:
            await _drain(chunks)
    except _DeadlinePassed:
        where = "while streaming" if started else "waiting for the first chunk"
        raise StreamError(
            f"{provider}: the call ran past its deadline of {deadline:g}s {where}",
            provider=provider,
        ) from None
    except LineTooLong as exc:
        raise StreamError(f"{provider}: {exc}", provider=provider) from None
    except (httpx.HTTPError, OSError) as exc:
        raise _transport_error(
            exc, provider=provider, host=host, secret=secret, streaming=True
        ) from _cause(exc, secret)
    except ModelError as exc:
        # Decoders quote what servers say about errors, and a server may echo the key.
        masked = redact(exc.message, secret)
        if masked != exc.message:
            data = exc.to_dict()
            data["message"] = masked
            raise LoopError.from_dict(data) from None
        raise
    finally:
        await response.aclose()


class HttpModelClient:
    """What the HTTP clients share: the streaming call, the connection pool, a key-free ``repr``.

    One ``httpx.AsyncClient`` serves every call, so connections are reused.
    An injected client belongs to the caller and is never closed here.
    A subclass names its ``endpoint`` and ``key_env`` and builds headers, body and decoder.

    The key is checked once, here: surrounding whitespace (a newline from a key
    file) is stripped, and a key with control or non-ASCII characters is refused
    with a ``ValueError`` that does not show it. ``extra_headers`` values are
    checked the same way.
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
        deadline: float | None = DEFAULT_DEADLINE,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        max_line_chars: int = DEFAULT_MAX_LINE_CHARS,
    ) -> None:
        if deadline is not None and not deadline > 0:
            raise ValueError("deadline must be a positive number of seconds, or None")
        if max_response_bytes < 1 or max_line_chars < 1:
            raise ValueError("max_response_bytes and max_line_chars must be positive")
        self.base_url = base_url.rstrip("/")
        self.provider = provider
        parsed = httpx.URL(self.base_url)
        self.server_address: str | None = parsed.host or None
        """The host of ``base_url`` (``server.address`` on the telemetry)."""
        self.server_port: int | None = parsed.port or (
            {"https": 443, "http": 80}.get(parsed.scheme) if parsed.host else None
        )
        """The port of ``base_url``, the scheme's default when it names none."""
        # An explicit key wins; None means "read the provider's environment variable".
        if api_key is not None:
            self._api_key = check_secret(api_key, "api_key")
        else:
            self._api_key = check_secret(os.environ.get(self.key_env), self.key_env)
        self._extra_headers = {
            name: check_secret(value, f"the value of extra header {name!r}") or ""
            for name, value in (extra_headers or {}).items()
        }
        self._owns_http = http_client is None
        self._http = (
            http_client if http_client is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
        )
        self._timeout = timeout
        self.deadline = deadline
        self.max_response_bytes = max_response_bytes
        self.max_line_chars = max_line_chars
        self._rejected_token_counts = 0

    @property
    def rejected_token_counts(self) -> int:
        """Token counts the server reported that were implausible and treated as unknown.

        Negative, non-integer, or above :data:`~loopobs.contract.token_counts.MAX_TOKEN_COUNT`;
        each is also logged (``loopobs.usage``) once per call that had any.
        """
        return self._rejected_token_counts

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

    def build_content(self, request: ModelRequest) -> bytes:
        """The encoded body of one streaming call: ``json_body(self.build_body(request))``.

        Clients override it to reuse the encoding of messages sent before.
        """
        return json_body(self.build_body(request))

    def decoder(self) -> EventDecoder:
        """A fresh decoder for one response's events."""
        raise NotImplementedError

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Run one streaming call and yield its events; the response is always closed."""
        decoder = self.decoder()
        events = stream_events(
            self._http,
            f"{self.base_url}{self.endpoint}",
            headers=self.build_headers(),
            body=lambda: self.build_content(request),
            timeout=self._timeout,
            provider=self.provider,
            secret=self._api_key,
            decoder=decoder,
            auth_hint="" if self._api_key else f"no API key: pass api_key= or set {self.key_env}",
            deadline=self.deadline,
            max_response_bytes=self.max_response_bytes,
            max_line_chars=self.max_line_chars,
        )
        try:
            async for event in events:
                yield event
        finally:
            await events.aclose()
            rejected = getattr(decoder, "rejected_token_counts", 0)
            if rejected:
                self._rejected_token_counts += rejected
                _usage_logger.warning(
                    "%s reported %d implausible token count(s); treated as unknown",
                    self.provider,
                    rejected,
                )

    async def aclose(self) -> None:
        """Close the connection pool, if this client created it."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
