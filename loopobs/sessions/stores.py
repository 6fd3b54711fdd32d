"""Where an :class:`~loopobs.sessions.session.AgentSession` keeps its history.

A store is anything with the :class:`SessionStore` methods: ``load`` a
session's messages, ``append`` new ones, ``clear`` them (a reset), ``flush``
what is buffered, and ``close``. The session calls ``append`` once per message
(it tracks what it has persisted), so a store never sees a message twice.
:class:`MemoryStore` keeps messages in the process; :class:`FileStore` writes
one JSON line per message to ``<directory>/<session id>.jsonl``, buffered
until :meth:`~FileStore.flush` (the session flushes after every run and on
close). A database store implements the same five methods.
"""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from loopobs.contract.model import Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = ["FileStore", "MemoryStore", "SessionStore"]


@runtime_checkable
class SessionStore(Protocol):
    """A session's persistent history."""

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """The messages stored for ``session_id``, oldest first ([] if none)."""

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Add ``messages`` after those stored (each message is appended exactly once)."""

    async def clear(self, session_id: uuid.UUID) -> None:
        """Forget every message of ``session_id``."""

    async def flush(self) -> None:
        """Make every appended message durable."""

    async def close(self) -> None:
        """Flush and release resources; the store is not used afterwards."""


class MemoryStore:
    """Messages kept in this process, per session id."""

    def __init__(self) -> None:
        self.messages: dict[uuid.UUID, list[Message]] = {}

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """A copy of the stored messages."""
        return list(self.messages.get(session_id, ()))

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Keep ``messages``."""
        self.messages.setdefault(session_id, []).extend(messages)

    async def clear(self, session_id: uuid.UUID) -> None:
        """Drop the session's messages."""
        self.messages.pop(session_id, None)

    async def flush(self) -> None:
        """Nothing to flush."""

    async def close(self) -> None:
        """Nothing to release."""


@functools.cache
def _message_adapter() -> TypeAdapter[Any]:
    # Built on first use: pydantic and the message schema cost more to load than the
    # rest of the package, and only a FileStore needs them.
    from pydantic import TypeAdapter

    return TypeAdapter(Message)


class FileStore:
    """One JSON line per message in ``<directory>/<session id>.jsonl``; appends are buffered.

    Writes happen on a worker thread at :meth:`flush` (and :meth:`close`), so
    the event loop never waits on the disk; a flush ends with ``fsync``.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._buffer: dict[uuid.UUID, list[str]] = {}
        self._lock = asyncio.Lock()

    def path(self, session_id: uuid.UUID) -> Path:
        """The file of ``session_id``."""
        return self.directory / f"{session_id}.jsonl"

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """The messages of the file, then those not yet flushed."""
        path = self.path(session_id)
        lines: list[str] = []
        if path.exists():
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
            lines = [line for line in text.splitlines() if line.strip()]
        lines.extend(self._buffer.get(session_id, ()))
        adapter = _message_adapter()
        return [adapter.validate_json(line) for line in lines]

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Buffer ``messages`` until the next flush."""
        adapter = _message_adapter()
        self._buffer.setdefault(session_id, []).extend(
            adapter.dump_json(m).decode() for m in messages)

    async def clear(self, session_id: uuid.UUID) -> None:
        """Delete the session's file and its buffered messages."""
        async with self._lock:
            self._buffer.pop(session_id, None)
            await asyncio.to_thread(self.path(session_id).unlink, missing_ok=True)

    async def flush(self) -> None:
        """Write every buffered message to its file and fsync it."""
        async with self._lock:
            buffered, self._buffer = self._buffer, {}
            for session_id, lines in buffered.items():
                if lines:
                    await asyncio.to_thread(_append_lines, self.path(session_id), lines)

    async def close(self) -> None:
        """Flush."""
        await self.flush()


def _append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as out:
        out.write("".join(line + "\n" for line in lines))
        out.flush()
        os.fsync(out.fileno())
