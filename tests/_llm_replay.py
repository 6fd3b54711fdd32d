"""Replay recorded HTTP responses (``tests/data/sse/*.txt``) through ``httpx.MockTransport``.

A transcript is an HTTP response as text: a status line, headers, a blank
line, then the body exactly as the server sent it. ``{{API_KEY}}`` in a body
stands for the key the test planted (servers echo keys in 401 messages).

:class:`Replay` serves transcripts in order, one per request; it records the
requests (headers and JSON bodies) and can re-chunk bodies and change their
line endings, so every transcript also proves the SSE parser's framing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from loopobs import tool
from loopobs.contract.events import TextDeltaContext
from loopobs.testing import RecordingObserver

DATA = Path(__file__).parent / "data" / "sse"
PLANTED_KEY = "sk-planted-Zq8v3KxW1sLr0"


@dataclass(frozen=True)
class Transcript:
    """One recorded response."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


def load(name: str, *, key: str = PLANTED_KEY) -> Transcript:
    """Read ``tests/data/sse/<name>.txt``."""
    raw = (DATA / f"{name}.txt").read_bytes()
    head, sep, body = raw.partition(b"\n\n")
    assert sep, f"{name}: no blank line after the headers"
    status_line, *header_lines = head.decode("ascii").split("\n")
    status = int(status_line.split()[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in header_lines)]
    return Transcript(status, headers, body.replace(b"{{API_KEY}}", key.encode()))


class TrackedBody(httpx.AsyncByteStream):
    """A response body served in chunks, which records whether it was closed.

    With ``hang=True`` it stops after its chunks and waits forever, like a
    server in the middle of a response.
    """

    def __init__(self, data: bytes, chunk_size: int, *, hang: bool = False) -> None:
        self.data = data
        self.chunk_size = chunk_size
        self.hang = hang
        self.closed = False
        self.chunks_sent = 0
        self.exhausted = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), self.chunk_size):
            self.chunks_sent += 1
            yield self.data[start : start + self.chunk_size]
            await asyncio.sleep(0)
        if self.hang:
            await asyncio.Event().wait()
        self.exhausted = True

    async def aclose(self) -> None:
        self.closed = True


@dataclass
class Replay:
    """A MockTransport handler serving transcripts in order."""

    transcripts: list[Transcript]
    chunk_size: int = 1 << 20
    newline: bytes = b"\n"
    hang: bool = False
    requests: list[httpx.Request] = field(default_factory=list)
    bodies: list[TrackedBody] = field(default_factory=list)

    @classmethod
    def of(cls, names: Iterable[str], **kwargs: Any) -> Replay:
        key = kwargs.pop("key", PLANTED_KEY)
        return cls([load(n, key=key) for n in names], **kwargs)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if not self.transcripts:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        t = self.transcripts.pop(0)
        data = t.body
        if self.newline != b"\n":
            data = data.replace(b"\n", self.newline)
        body = TrackedBody(data, self.chunk_size, hang=self.hang)
        self.bodies.append(body)
        return httpx.Response(t.status, headers=t.headers, stream=body)

    def http(self) -> httpx.AsyncClient:
        """An AsyncClient sending to this replay (and nowhere else)."""
        return httpx.AsyncClient(transport=httpx.MockTransport(self))

    def json(self, i: int = -1) -> Any:
        """The JSON body of request ``i``."""
        return json.loads(self.requests[i].content)

    @property
    def all_closed(self) -> bool:
        return all(b.closed for b in self.bodies)


class TextSeen(RecordingObserver):
    """Records, and signals the first text delta (to cancel a run mid-stream)."""

    def __init__(self) -> None:
        super().__init__()
        self.text_seen = asyncio.Event()

    def on_text_delta(self, ctx: TextDeltaContext) -> None:
        self.on_event(ctx)
        self.text_seen.set()


# The tools of the recorded agent runs: the transcripts call them by these names.
@tool
async def get_weather(city: str) -> str:
    """Current weather in a city."""
    return {"Paris": "18°C, cloudy", "Tokyo": "24°C, clear"}[city]


@tool
def local_time() -> str:
    """The local time."""
    raise RuntimeError("clock unavailable")
