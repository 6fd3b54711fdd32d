"""Exactly one resume of a parked run across a fleet: a claim is a Redis ``SET NX``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from loopobs.redis._client import bounded, store_name

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from loopobs.loop.checkpoint import Checkpoint

__all__ = ["RedisCheckpointClaims"]


class RedisCheckpointClaims:
    """A ``claim_checkpoint`` hook for ``AgentLoop``: the first worker to ask wins.

    ``AgentLoop(claim_checkpoint=RedisCheckpointClaims(client))`` asks before each
    resume; the claim is an atomic ``SET {prefix}:{run_id} <worker> NX EX ttl_s``, so of
    any number of workers resuming the same checkpoint one gets True and runs, and
    the others get False (the loop raises ``CheckpointAlreadyResumed``). The claim
    expires after ``ttl_s`` (default 30 days): keep it longer than a checkpoint can
    be resumed. A Redis that does not answer within ``timeout_s`` fails the resume
    with :class:`~loopobs.contract.errors.StoreUnavailable` — never a second run.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "loopobs:claim",
        ttl_s: float = 30 * 86_400,
        timeout_s: float = 2.0,
        worker: str | None = None,
    ) -> None:
        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError("RedisCheckpointClaims: ttl_s must be a positive number of seconds")
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("RedisCheckpointClaims: timeout_s must be positive")
        import os
        import socket

        self._client = client
        self.prefix = prefix
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.name = store_name(client)

    def key(self, run_id: object) -> str:
        """The claim's key for a parked run id."""
        return f"{self.prefix}:{run_id}"

    async def __call__(self, checkpoint: Checkpoint) -> bool:
        """Claim ``checkpoint``'s run; True for exactly one caller across the fleet."""
        granted = await bounded(
            self._client.set(
                self.key(checkpoint.run_id), self.worker, nx=True, ex=max(1, math.ceil(self.ttl_s))
            ),
            timeout_s=self.timeout_s,
            store=self.name,
            what="claim checkpoint",
        )
        return bool(granted)

    async def holder(self, run_id: object) -> str | None:
        """Which worker holds the claim of ``run_id`` (None: unclaimed or expired)."""
        value = await bounded(
            self._client.get(self.key(run_id)),
            timeout_s=self.timeout_s,
            store=self.name,
            what="read claim",
        )
        if value is None:
            return None
        return value.decode() if isinstance(value, bytes) else str(value)
