"""A :class:`~loopobs.sessions.stores.SessionStore` on Redis: one list per conversation.

Each message is one JSON entry ``RPUSH``-ed to ``{prefix}:{session id}``, so appends
are atomic and ordered and a conversation can be reopened on any worker
(``AgentSession(loop, store=RedisSessionStore(client), session_id=…)``). Writes are
made when appended (``flush`` has nothing to do; durability is the server's
persistence setting). Every operation has a deadline; a failure raises
:class:`~loopobs.contract.errors.StoreUnavailable`, and an append that failed wrote
nothing, so the session can append the same messages again.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loopobs.contract.model import Message
from loopobs.redis._client import bounded, store_name
from loopobs.sessions.stores import StoreCorrupt

if TYPE_CHECKING:
    from pydantic import TypeAdapter
    from redis.asyncio import Redis

__all__ = ["RedisSessionStore"]


@functools.cache
def _message_adapter() -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(Message)


class RedisSessionStore:
    """Append-only conversation histories on Redis, shared by every worker.

    Args:
        client: a ``redis.asyncio.Redis``.
        prefix: the key prefix.
        timeout_s: the deadline of each operation.
        ttl_s: when set, a conversation's key expires this long after its last append.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "loopobs:session",
        timeout_s: float = 2.0,
        ttl_s: float | None = None,
    ) -> None:
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("RedisSessionStore: timeout_s must be positive")
        if ttl_s is not None and (not math.isfinite(ttl_s) or ttl_s <= 0):
            raise ValueError("RedisSessionStore: ttl_s must be positive")
        self._client = client
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.name = store_name(client)

    def key(self, session_id: uuid.UUID) -> str:
        """The list holding ``session_id``'s messages."""
        return f"{self.prefix}:{session_id}"

    def state_key(self, session_id: uuid.UUID) -> str:
        """The string holding ``session_id``'s detector state."""
        return f"{self.prefix}:{session_id}:state"

    async def save_state(self, session_id: uuid.UUID, data: bytes) -> None:
        """Replace the session's state (one ``SET``, with the store's TTL when set)."""
        ttl = None if self.ttl_s is None else max(1, math.ceil(self.ttl_s))
        await bounded(
            self._client.set(self.state_key(session_id), bytes(data), ex=ttl),
            timeout_s=self.timeout_s,
            store=self.name,
            what="save_state",
        )

    async def load_state(self, session_id: uuid.UUID) -> bytes | None:
        """The session's state as last saved, or None."""
        raw = await bounded(
            self._client.get(self.state_key(session_id)),
            timeout_s=self.timeout_s,
            store=self.name,
            what="load_state",
        )
        if raw is None:
            return None
        return raw.encode() if isinstance(raw, str) else bytes(raw)

    async def load(self, session_id: uuid.UUID) -> list[Message]:
        """The stored messages, oldest first.

        Raises:
            StoreUnavailable: Redis failed or passed the deadline.
            StoreCorrupt: an entry is not a message (its key and 1-based position are
                named; nothing is skipped silently).
        """
        raw = await bounded(
            self._client.lrange(self.key(session_id), 0, -1),
            timeout_s=self.timeout_s,
            store=self.name,
            what="load",
        )
        adapter = _message_adapter()
        out: list[Message] = []
        for index, entry in enumerate(raw):
            try:
                out.append(adapter.validate_json(entry))
            except ValueError:
                raise StoreCorrupt(
                    f"{self.name} {self.key(session_id)}: entry {index + 1} is "
                    "not a stored message",
                    path=self.key(session_id),
                    line=index + 1,
                ) from None
        return out

    async def append(self, session_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Append ``messages`` in one atomic step (all or none)."""
        if not messages:
            return
        adapter = _message_adapter()
        entries = [adapter.dump_json(m) for m in messages]
        key = self.key(session_id)

        async def write() -> Any:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.rpush(key, *entries)
                if self.ttl_s is not None:
                    pipe.expire(key, max(1, math.ceil(self.ttl_s)))
                return await pipe.execute()

        await bounded(write(), timeout_s=self.timeout_s, store=self.name, what="append")

    async def clear(self, session_id: uuid.UUID) -> None:
        """Delete the conversation and its state."""
        await bounded(
            self._client.delete(self.key(session_id), self.state_key(session_id)),
            timeout_s=self.timeout_s,
            store=self.name,
            what="clear",
        )

    async def flush(self) -> None:
        """Nothing is buffered: each append was written when it was made."""

    async def close(self) -> None:
        """Nothing to release: the client belongs to the caller, who closes it."""
