"""An incremental Server-Sent Events parser (the WHATWG ``text/event-stream`` format).

Both model clients read their responses through it. Bytes go in as they
arrive, in chunks of any size; complete events come out as
:class:`ServerSentEvent` ``(event, data)`` pairs:

- lines end in LF, CRLF or a lone CR, and a CRLF split across two chunks
  is still one line end;
- ``event:`` names the event (``"message"`` when absent), ``data:`` lines
  accumulate and are joined with ``"\\n"``, a blank line dispatches;
- lines starting with ``:`` are comments (keep-alives) and are skipped, as
  are ``id:``, ``retry:`` and unknown fields;
- one space after the colon is part of the syntax and is dropped;
- a block without any ``data:`` line dispatches nothing;
- bytes that are not UTF-8 are replaced with U+FFFD rather than failing
  here: whatever JSON they were part of then fails to parse, and the client
  reports that with the text it received.

The parser never raises; it only splits text. What the payloads mean is the
clients' business.
"""

from __future__ import annotations

import codecs
from typing import NamedTuple

__all__ = ["SSEDecoder", "ServerSentEvent"]


class ServerSentEvent(NamedTuple):
    """One dispatched event: its type and its (joined) data."""

    event: str
    data: str


class SSEDecoder:
    """Turns a byte stream into events, one chunk at a time.

    Call :meth:`feed` with each chunk and :meth:`flush` once at the end of
    the stream. A block the stream ends inside (no blank line after it) is
    dispatched by :meth:`flush`, since servers that close right after their
    last event are common and lose nothing that way.
    """

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._event = ""
        self._data: list[str] = []
        self._bom_checked = False

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume ``chunk`` and return the events it completed."""
        return self._feed_text(self._text.decode(chunk))

    def flush(self) -> list[ServerSentEvent]:
        """End of stream: return whatever the last, unterminated lines completed."""
        # A final "\n" ends an unterminated line, and merges with a trailing CR.
        events = self._feed_text(self._text.decode(b"", final=True) + "\n")
        self._line("", events)
        return events

    def _feed_text(self, text: str) -> list[ServerSentEvent]:
        if not self._bom_checked and text:
            text = text.removeprefix("\ufeff")
            self._bom_checked = True
        buf = self._pending + text
        events: list[ServerSentEvent] = []
        start = 0
        n = len(buf)
        cr = lf = -1
        while start < n:
            # Positions are searched again only once passed: a chunk is scanned once, not per line.
            if cr < start:
                cr = buf.find("\r", start)
                cr = n if cr == -1 else cr
            if lf < start:
                lf = buf.find("\n", start)
                lf = n if lf == -1 else lf
            if lf < cr:
                self._line(buf[start:lf], events)
                start = lf + 1
            elif cr < n - 1:
                self._line(buf[start:cr], events)
                start = cr + 2 if buf[cr + 1] == "\n" else cr + 1
            else:
                # No line end left, or a CR at the very end that may be half a CRLF: wait.
                break
        self._pending = buf[start:]
        return events

    def _line(self, line: str, events: list[ServerSentEvent]) -> None:
        if not line:
            if self._data:
                events.append(ServerSentEvent(self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            return
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
