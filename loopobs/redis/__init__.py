"""Fleet state on Redis (the ``redis`` extra: ``pip install loopobs[redis]``).

- :class:`RedisLedger`: a :class:`~loopobs.cost.shared.BudgetLedger` whose reservations
  and committed spend every worker shares (atomic Lua scripts, reservations that expire
  on the server's clock, a ledger the totals are the sum of);
- :class:`RedisCheckpointClaims`: ``AgentLoop(claim_checkpoint=...)`` that lets exactly
  one worker of the fleet resume a parked run (``SET NX`` with an expiry);
- :class:`RedisSessionStore`: an append-only :class:`~loopobs.sessions.stores.SessionStore`
  so an ``AgentSession`` can be reopened on another worker with its history.

Each takes a ``redis.asyncio.Redis`` client the caller configured (address, TLS,
pool); every operation runs under a deadline. Nothing imports ``redis`` until one of
these is used.
"""

from loopobs.redis.claims import RedisCheckpointClaims
from loopobs.redis.ledger import RedisLedger
from loopobs.redis.store import RedisSessionStore

__all__ = ["RedisCheckpointClaims", "RedisLedger", "RedisSessionStore"]
