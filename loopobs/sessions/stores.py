"""Where an :class:`~loopobs.sessions.session.AgentSession` keeps its history.

A store is anything with the :class:`SessionStore` methods: ``load`` a
session's messages, ``append`` new ones, ``clear`` them (a reset), ``flush``
what is buffered, and ``close``. The session calls ``append`` once per message
(it tracks what it has persisted), so a store never sees a message twice.
:class:`MemoryStore` keeps messages in the process; :class:`FileStore` writes
one JSON line per message to ``<directory>/<session id>.jsonl``, buffered
until :meth:`~FileStore.flush` (the session flushes after every run and on
close). A database store implements the same five methods.

A store may also keep a session's *detector state* (:class:`StateStore`: ``save_state``
and ``load_state`` of one opaque, bounded blob per session, replaced on each save and
dropped by ``clear``), so that a session reopened on another worker keeps its loop
history; the three stores here and ``RedisSessionStore`` do.

A failed write keeps what was buffered (the next flush writes it again, and a
partly written batch is cut back first, so nothing is written twice). A file
whose last line was torn by a crash mid-write loads what is whole: the torn
tail is reported (a warning naming the file and line, and :attr:`FileStore.torn`)
and cut off by the next write; a malformed line elsewhere raises
:class:`StoreCorrupt` naming the file and line.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from loopobs.contract.errors import LoopError
from loopobs.contract.model import Message

if TYPE_CHECKING:
    from pydantic import TypeAdapter

__all__ = [
    "FileStore",
    "MemoryStore",
    "SessionStore",
    "StateStore",
    "StoreCorrupt",
    "StoreFailed",
]

logger = logging.getLogger("loopobs.sessions")


class StoreFailed(LoopError):
    """A session's store failed (raised, or ran past the session's ``store_timeout``).

    ``operation`` is the store method (``load``, ``append``, ``flush``, ``clear``,
    ``close``). On a send's future, ``result`` is the run's own result: the run
    happened, but its messages may not be durable (they are written again at the
    next flush).
    """

    _fields: ClassVar[tuple[str, ...]] = ("operation",)

    def __init__(self, message: str = "", *, operation: str = "") -> None:
        super().__init__(message or f"the session store's {operation} failed")
        self.operation = operation
        self.result: Any = None


class StoreCorrupt(LoopError, ValueError):
    """A stored line that is not a message (other than a torn last line): file and line."""

    _fields: ClassVar[tuple[str, ...]] = ("path", "line")

    def __init__(self, message: str = "", *, path: str = "", line: int = 0) -> None:
        super().__init__(message or f"{path}:{line}: not a stored message")
        self.path = path
        self.line = line


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


@runtime_checkable
class StateStore(Protocol):
    """A store that also keeps one state blob per session (the detectors' snapshot)."""

    async def save_state(self, session_id: uuid.UUID, data: bytes) -> None:
        """Replace the session's state with ``data`` (atomically: the old or the new)."""

    async def load_state(self, session_id: uuid.UUID) -> bytes | None:
        """The session's state as last saved, or None."""


class MemoryStore:
    """Messages kept in this process, per session id."""

    def __init__(self) -> None:
        self.messages: dict[uuid.UUID, list[Message]] = {}
        self.states: dict[uuid.UUID, bytes] = {}

    async def save_state(self, session_id: uuid.UUID, data: bytes) -> None:
        """Keep ``data`` as the session's state."""
        self.states[session_id] = bytes(data)

    async def load_state(self, session_id: uuid.UUID) -> bytes | None:
        """The session's state, or None."""
        return self.states.get(session_id)

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """A copy of the stored messages."""
        return list(self.messages.get(session_id, ()))

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Keep ``messages``."""
        self.messages.setdefault(session_id, []).extend(messages)

    async def clear(self, session_id: uuid.UUID) -> None:
        """Drop the session's messages and state."""
        self.messages.pop(session_id, None)
        self.states.pop(session_id, None)

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
    ``torn`` maps a session whose file ended in a torn line (found by
    :meth:`load`) to that line's number.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._buffer: dict[uuid.UUID, list[str]] = {}
        self._lock = asyncio.Lock()
        self.torn: dict[uuid.UUID, int] = {}

    def path(self, session_id: uuid.UUID) -> Path:
        """The file of ``session_id``."""
        return self.directory / f"{session_id}.jsonl"

    def state_path(self, session_id: uuid.UUID) -> Path:
        """The state file of ``session_id`` (replaced whole on each save)."""
        return self.directory / f"{session_id}.state.json"

    async def save_state(self, session_id: uuid.UUID, data: bytes) -> None:
        """Write ``data`` to a temporary file, fsync it, and rename it over the state file."""
        await asyncio.to_thread(_replace_file, self.state_path(session_id), bytes(data))

    async def load_state(self, session_id: uuid.UUID) -> bytes | None:
        """The state file's bytes, or None when there is none."""
        path = self.state_path(session_id)
        try:
            return await asyncio.to_thread(path.read_bytes)
        except FileNotFoundError:
            return None

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """The messages of the file, then those not yet flushed.

        Raises:
            StoreCorrupt: a line other than a torn last one is not a message.
        """
        path = self.path(session_id)
        messages: list[Message] = []
        if path.exists():
            data = await asyncio.to_thread(path.read_bytes)
            messages = self._parse(session_id, path, data)
        adapter = _message_adapter()
        messages.extend(adapter.validate_json(line) for line in self._buffer.get(session_id, ()))
        return messages

    def _parse(self, session_id: uuid.UUID, path: Path, data: bytes) -> list[Message]:
        from pydantic import ValidationError

        adapter = _message_adapter()
        lines = data.split(b"\n")
        tail = len(lines)  # the last line: torn if the file does not end with a newline
        messages: list[Message] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                # Strict UTF-8 per line: a write cut inside a character tears only its line.
                messages.append(adapter.validate_json(line.decode("utf-8")))
            except (ValidationError, UnicodeDecodeError) as exc:
                if number == tail:
                    self.torn[session_id] = number
                    logger.warning(
                        "%s:%d: the last line is torn (a write cut short, %d "
                        "characters); loaded the %d whole messages before it",
                        path,
                        number,
                        len(line),
                        len(messages),
                    )
                    break
                reason = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else "not UTF-8"
                raise StoreCorrupt(
                    f"{path}:{number}: not a stored message: {reason}", path=str(path), line=number
                ) from None
        return messages

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Buffer ``messages`` until the next flush."""
        adapter = _message_adapter()
        self._buffer.setdefault(session_id, []).extend(
            adapter.dump_json(m).decode() for m in messages
        )

    async def clear(self, session_id: uuid.UUID) -> None:
        """Delete the session's file and its buffered messages."""
        async with self._lock:
            self._buffer.pop(session_id, None)
            self.torn.pop(session_id, None)
            await asyncio.to_thread(self.path(session_id).unlink, missing_ok=True)
            await asyncio.to_thread(self.state_path(session_id).unlink, missing_ok=True)

    async def flush(self) -> None:
        """Write every buffered message to its file and fsync it.

        Messages a failed write did not make durable stay buffered (before any
        appended meanwhile), whether or not this call is still waiting.
        """
        async with self._lock:
            buffered, self._buffer = self._buffer, {}
            pending = {sid: lines for sid, lines in buffered.items() if lines}
            if not pending:
                return
            paths = {sid: self.path(sid) for sid in pending}
            job = asyncio.ensure_future(asyncio.to_thread(_write_all, paths, pending))
            # Restored when the thread ends, even if this flush was cancelled meanwhile.
            job.add_done_callback(lambda done: self._restore(done, pending))
            await job
            for sid in paths:
                self.torn.pop(sid, None)

    def _restore(self, done: asyncio.Future[None], unwritten: dict[uuid.UUID, list[str]]) -> None:
        if not done.cancelled():
            done.exception()  # retrieved: a flush cancelled meanwhile no longer awaits it
        for sid, lines in unwritten.items():
            self._buffer[sid] = [*lines, *self._buffer.get(sid, ())]

    async def close(self) -> None:
        """Flush."""
        await self.flush()


def _replace_file(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def _write_all(paths: dict[uuid.UUID, Path], pending: dict[uuid.UUID, list[str]]) -> None:
    """Append each session's lines to its file; a written session leaves ``pending``."""
    for sid, path in paths.items():
        _append_lines(path, pending[sid])
        del pending[sid]


def _append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a+b") as out:
        size = out.seek(0, os.SEEK_END)
        start = _whole_end(out, size)
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if start != size:
            out.seek(start)
            if _is_json(out.read(size - start)):
                data, start = b"\n" + data, size  # a whole record that lost its newline
            else:
                out.truncate(start)  # a torn tail (reported by load): never a record
        try:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        except BaseException:
            # Cut back what this write added, so writing the batch again never doubles it.
            try:
                out.truncate(start)
            except OSError:
                logger.warning("%s: could not cut back a failed write", path)
            raise


def _is_json(fragment: bytes) -> bool:
    import json

    try:
        json.loads(fragment)
    except ValueError:
        return False
    return True


def _whole_end(out: IO[bytes], size: int) -> int:
    """Where the file's whole lines end: ``size``, or just after its last newline."""
    if size == 0:
        return 0
    out.seek(size - 1)
    if out.read(1) == b"\n":
        return size
    position = size
    while position > 0:
        step = min(4096, position)
        position -= step
        out.seek(position)
        newline = out.read(step).rfind(b"\n")
        if newline != -1:
            return position + newline + 1
    return 0
