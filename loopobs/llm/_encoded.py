"""Encoded messages kept between requests, so a request encodes only what is new.

A conversation's request carries the whole history; each turn adds a message or
two. :class:`EncodedMessages` remembers the JSON of each message object it has
encoded (messages are immutable), so building a request costs JSON encoding
for the new messages and a byte join for the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from loopobs.llm._http import json_body

__all__ = ["DEFAULT_CACHE_BYTES", "EncodedMessages", "splice_messages"]

DEFAULT_CACHE_BYTES = 32 * 1024 * 1024
"""Encoded bytes kept per client; the oldest entries go first beyond it."""

_T = TypeVar("_T")


class EncodedMessages(Generic[_T]):
    """``encode(message)`` remembered per message object, up to ``max_bytes`` of results.

    An entry holds its message, so the identity it is found by stays valid. The
    cache is shared by every run of a client (thread-safe); once it holds more
    than ``max_bytes``, the oldest half is dropped (those messages are encoded
    again when next seen). ``size(value)`` says how many bytes a result counts for.
    """

    def __init__(
        self,
        encode: Callable[[Any], _T],
        size: Callable[[_T], int],
        *,
        max_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        self._encode = encode
        self._size = size
        self.max_bytes = max_bytes
        self._entries: dict[int, tuple[object, _T, int]] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.encoded = 0
        """Messages encoded so far (not found in the cache)."""

    def get(self, message: object) -> _T:
        """The encoding of ``message``, computed once while it stays in the cache."""
        entry = self._entries.get(id(message))
        if entry is not None and entry[0] is message:
            return entry[1]
        value = self._encode(message)
        size = self._size(value)
        with self._lock:
            self.encoded += 1
            old = self._entries.pop(id(message), None)
            if old is not None:
                self._bytes -= old[2]
            self._entries[id(message)] = (message, value, size)
            self._bytes += size
            if self._bytes > self.max_bytes:
                self._evict()
        return value

    def _evict(self) -> None:
        keep = self.max_bytes // 2
        for key in list(self._entries):
            if self._bytes <= keep:
                break
            self._bytes -= self._entries.pop(key)[2]

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._entries.clear()
            self._bytes = 0


_EMPTY_MESSAGES = b',"messages":[]'


def splice_messages(body: Mapping[str, Any], messages: bytes) -> bytes | None:
    """``json_body(body)`` with its empty ``"messages"`` list replaced by ``messages``.

    ``messages`` is the encoded list's inside (items joined by commas). ``body``
    must hold ``"messages": []`` after its first key; None when it does not.
    The result is byte for byte what encoding the whole body would give:
    ``json_body`` uses compact separators, so a dict's JSON is its items' JSON
    joined, and an earlier value's quotes are escaped, so the first match is the key.
    """
    head = json_body(body)
    at = head.find(_EMPTY_MESSAGES)
    if at < 0:
        return None
    cut = at + len(_EMPTY_MESSAGES) - 1
    return b"".join((head[:cut], messages, head[cut:]))
