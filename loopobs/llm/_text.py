"""Text as streams deliver it: UTF-16 surrogate pairs split across chunks, joined again.

JSON escapes characters outside the Basic Multilingual Plane as a surrogate
pair (``"\\ud83d\\ude00"``), and a server that cuts its chunks by UTF-16 units
can send the two halves in two chunks. Decoded one chunk at a time, each half
is a lone surrogate, which no UTF-8 encoder accepts: an answer holding one
would make every later request of the session fail. The helpers here join
the halves, and turn a half that stays alone into U+FFFD.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SurrogateJoiner", "fix_surrogates", "fix_surrogates_in"]


def fix_surrogates(text: str) -> str:
    """``text`` with adjacent surrogate halves joined and lone ones replaced by U+FFFD."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


def fix_surrogates_in(value: Any) -> Any:
    """A decoded JSON value with :func:`fix_surrogates` applied to every string in it."""
    if isinstance(value, str):
        return fix_surrogates(value)
    if isinstance(value, dict):
        return {fix_surrogates_in(k): fix_surrogates_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [fix_surrogates_in(v) for v in value]
    return value


class SurrogateJoiner:
    """Repairs one stream of text deltas: a high surrogate at a delta's end waits for the next.

    :meth:`feed` returns the text to pass on (possibly ``""``); :meth:`flush`
    at the end of the stream returns what is still held (U+FFFD, or ``""``).
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, text: str) -> str:
        """The repaired text of the next delta."""
        if self._held:
            text = self._held + text
            self._held = ""
        if text and "\ud800" <= text[-1] <= "\udbff":
            self._held = text[-1]
            text = text[:-1]
        return fix_surrogates(text)

    def flush(self) -> str:
        """What is still held at the end of the stream: a lone high surrogate, as U+FFFD."""
        held, self._held = self._held, ""
        return "\ufffd" if held else ""
