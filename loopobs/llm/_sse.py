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

The parser only splits text; what the payloads mean is the clients' business.
Its one error is :class:`LineTooLong`: a line, or the data of one event, past
``max_line_chars`` (a server streaming without line ends would otherwise grow
memory without bound). Work is linear in the input, however long the lines:
a partial line is kept as pieces and joined once, when its end arrives.
"""

from __future__ import annotations

import codecs
import re
from typing import NamedTuple

__all__ = ["DEFAULT_MAX_LINE_CHARS", "LineTooLong", "SSEDecoder", "ServerSentEvent"]

DEFAULT_MAX_LINE_CHARS = 16 * 1024 * 1024
"""Characters one line, or the joined data of one event, may have."""

_LINE_END = re.compile(r"[\r\n]")


class LineTooLong(ValueError):
    """A line or an event's data ran past the decoder's ``max_line_chars``."""


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

    def __init__(self, *, max_line_chars: int = DEFAULT_MAX_LINE_CHARS) -> None:
        self.max_line_chars = max_line_chars
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial: list[str] = []  # the current line's pieces, when it spans chunks
        self._partial_len = 0
        self._skip_lf = False  # the last chunk ended in CR: an LF next is the same line end
        self._event = ""
        self._data: list[str] = []
        self._data_len = 0
        self._bom_checked = False

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Consume ``chunk`` and return the events it completed.

        Raises:
            LineTooLong: a line or an event's data is longer than ``max_line_chars``.
        """
        return self._feed_text(self._text.decode(chunk))

    def flush(self) -> list[ServerSentEvent]:
        """End of stream: return whatever the last, unterminated lines completed."""
        events = self._feed_text(self._text.decode(b"", final=True))
        if self._partial:
            self._line("".join(self._partial), events)
            self._partial.clear()
            self._partial_len = 0
        self._line("", events)
        return events

    def _feed_text(self, text: str) -> list[ServerSentEvent]:
        if not self._bom_checked and text:
            text = text.removeprefix("\ufeff")
            self._bom_checked = True
        events: list[ServerSentEvent] = []
        start = 0
        n = len(text)
        if self._skip_lf and n:
            self._skip_lf = False
            if text[0] == "\n":
                start = 1
        search = _LINE_END.search
        while start < n:
            found = search(text, start)
            if found is None:
                break
            end = found.start()
            line = text[start:end]
            if self._partial:
                self._partial.append(line)
                line = "".join(self._partial)
                self._partial.clear()
                self._partial_len = 0
            if len(line) > self.max_line_chars:
                raise self._too_long("a line")
            self._line(line, events)
            if text[end] == "\n":
                start = end + 1
            elif end + 1 < n:
                start = end + 2 if text[end + 1] == "\n" else end + 1
            else:
                self._skip_lf = True  # a CR at the very end may be half a CRLF
                start = n
        if start < n:
            self._partial_len += n - start
            if self._partial_len > self.max_line_chars:
                raise self._too_long("a line")
            self._partial.append(text[start:])
        return events

    def _too_long(self, what: str) -> LineTooLong:
        return LineTooLong(
            f"{what} of the event stream is longer than max_line_chars "
            f"({self.max_line_chars} characters)"
        )

    def _line(self, line: str, events: list[ServerSentEvent]) -> None:
        if not line:
            if self._data:
                events.append(ServerSentEvent(self._event or "message", "\n".join(self._data)))
            self._event = ""
            self._data = []
            self._data_len = 0
            return
        if line.startswith(":"):
            return
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_len += len(value) + 1
            if self._data_len > self.max_line_chars:
                raise self._too_long("the data of an event")
            self._data.append(value)
        elif name == "event":
            self._event = value
