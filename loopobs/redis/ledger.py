"""A :class:`~loopobs.cost.shared.BudgetLedger` on Redis: one atomic script per step.

Per scope ``S`` (under ``prefix``) the ledger keeps:

- ``{prefix}:{S}:committed`` — a hash of committed totals by dimension;
- ``{prefix}:{S}:open`` and ``{prefix}:{S}:expiry`` — the open reservations (id →
  amounts) and their expiry times, on the Redis server's clock (``TIME``), so workers'
  clocks never matter;
- ``{prefix}:{S}:ledger`` — a stream with one entry per committed call, and
  ``{prefix}:{S}:folded``, the sum of entries trimmed off past ``max_entries``.

``reserve`` purges expired reservations and checks every scope's limits against
committed + open + requested before it writes anything; ``commit`` deletes the
reservation, adds the real amounts to the totals and appends the ledger entry in the
same script, so the totals are always the ledger's sum (:meth:`RedisLedger.reconcile`
checks it). The keys of one call are not in one hash slot: use a standalone Redis (or
one primary), not Redis Cluster.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loopobs.cost.shared import (
    DIMENSIONS,
    Amounts,
    Refusal,
    Reservation,
    ScopeLimit,
    limits_of,
)
from loopobs.redis._client import bounded, store_name

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["RedisLedger"]

_KEYS_PER_SCOPE = 5

_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rid, ttl, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local requested = cjson.decode(ARGV[4])
local expired = {}
local nexpired = 0
local function num(x) return tonumber(x) or 0 end
local function tokens(m) return num(m['input_tokens']) + num(m['output_tokens']) end
for i = 1, n do
  local base = (i - 1) * 5
  local open, expiry = KEYS[base + 2], KEYS[base + 3]
  local old = redis.call('ZRANGEBYSCORE', expiry, '-inf', now)
  for _, r in ipairs(old) do
    redis.call('HDEL', open, r)
    if not expired[r] then expired[r] = true; nexpired = nexpired + 1 end
  end
  if #old > 0 then redis.call('ZREMRANGEBYSCORE', expiry, '-inf', now) end
end
for i = 1, n do
  local limits = cjson.decode(ARGV[4 + i])
  if next(limits) ~= nil then
    local base = (i - 1) * 5
    local committed = {}
    local flat = redis.call('HGETALL', KEYS[base + 1])
    for j = 1, #flat, 2 do committed[flat[j]] = tonumber(flat[j + 1]) end
    local held = {}
    for _, v in ipairs(redis.call('HVALS', KEYS[base + 2])) do
      for name, amount in pairs(cjson.decode(v)) do held[name] = num(held[name]) + amount end
    end
    for name, setting in pairs(limits) do
      local want, have, h
      if name == 'total_tokens' then
        want, have, h = tokens(requested), tokens(committed), tokens(held)
      else
        want, have, h = num(requested[name]), num(committed[name]), num(held[name])
      end
      if want > 0 and have + h + want > setting then
        return {0, i, name, tostring(have), tostring(h), tostring(want), tostring(setting),
                nexpired}
      end
    end
  end
end
for i = 1, n do
  local base = (i - 1) * 5
  redis.call('HSET', KEYS[base + 2], rid, ARGV[4])
  redis.call('ZADD', KEYS[base + 3], now + ttl, rid)
end
return {1, nexpired}
"""

_COMMIT = """
local rid, n, maxlen = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local spent = cjson.decode(ARGV[4])
local fields = {'rid', rid}
for name, amount in pairs(spent) do
  table.insert(fields, name); table.insert(fields, tostring(amount))
end
for i = 1, n do
  local base = (i - 1) * 5
  redis.call('HDEL', KEYS[base + 2], rid)
  redis.call('ZREM', KEYS[base + 3], rid)
  for name, amount in pairs(spent) do
    if amount ~= 0 then redis.call('HINCRBYFLOAT', KEYS[base + 1], name, amount) end
  end
  redis.call('XADD', KEYS[base + 4], '*', unpack(fields))
  local extra = redis.call('XLEN', KEYS[base + 4]) - maxlen
  if extra > 0 then
    for _, entry in ipairs(redis.call('XRANGE', KEYS[base + 4], '-', '+', 'COUNT', extra)) do
      local kv = entry[2]
      for j = 1, #kv, 2 do
        if kv[j] ~= 'rid' then redis.call('HINCRBYFLOAT', KEYS[base + 5], kv[j], kv[j + 1]) end
      end
      redis.call('XDEL', KEYS[base + 4], entry[1])
    end
  end
end
return 1
"""

_RELEASE = """
for i = 1, tonumber(ARGV[2]) do
  local base = (i - 1) * 5
  redis.call('HDEL', KEYS[base + 2], ARGV[1])
  redis.call('ZREM', KEYS[base + 3], ARGV[1])
end
return 1
"""

_RESERVED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')
if #live == 0 then return {} end
return redis.call('HMGET', KEYS[1], unpack(live))
"""


class RedisLedger:
    """Shared budgets on one Redis: reservations, commits and a ledger (see the module).

    Args:
        client: a ``redis.asyncio.Redis`` (``decode_responses`` either way).
        prefix: the key prefix of every key this ledger writes.
        timeout_s: the deadline of each operation; past it (or on any Redis error) the
            operation raises :class:`~loopobs.contract.errors.StoreUnavailable`.
        max_entries: ledger entries kept per scope; older ones are folded into a sum.
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "loopobs:budget",
        timeout_s: float = 0.5,
        max_entries: int = 10_000,
    ) -> None:
        if not math.isfinite(timeout_s) or timeout_s <= 0:
            raise ValueError("RedisLedger: timeout_s must be a positive number of seconds")
        if max_entries < 1:
            raise ValueError("RedisLedger: max_entries must be at least 1")
        self._client = client
        self.prefix = prefix
        self.timeout_s = timeout_s
        self.max_entries = max_entries
        self.name = store_name(client)
        self.expired = 0
        """Reservations this process saw expire (purged by one of its reserve calls)."""
        self._reserve = client.register_script(_RESERVE)
        self._commit = client.register_script(_COMMIT)
        self._release = client.register_script(_RELEASE)
        self._reserved = client.register_script(_RESERVED)

    def _keys(self, scope: str) -> list[str]:
        base = f"{self.prefix}:{scope}"
        return [
            f"{base}:committed",
            f"{base}:open",
            f"{base}:expiry",
            f"{base}:ledger",
            f"{base}:folded",
        ]

    async def _run(self, script: Any, keys: list[str], args: list[Any], what: str) -> Any:
        return await bounded(
            script(keys=keys, args=args), timeout_s=self.timeout_s, store=self.name, what=what
        )

    async def reserve(
        self, scopes: Sequence[ScopeLimit], amounts: Amounts, *, ttl_s: float
    ) -> Reservation | Refusal:
        """Hold ``amounts`` in every scope atomically, or nothing (the first refusal)."""
        import uuid

        if not math.isfinite(ttl_s) or ttl_s <= 0:
            raise ValueError("reserve: ttl_s must be a positive number of seconds")
        rid = uuid.uuid4().hex
        keys = [k for s in scopes for k in self._keys(s.key)]
        args: list[Any] = [
            rid,
            max(1, round(ttl_s * 1000)),
            len(scopes),
            json.dumps(amounts.as_dict()),
        ]
        args += [json.dumps(limits_of(s.budget) if s.budget is not None else {}) for s in scopes]
        reply = await self._run(self._reserve, keys, args, "reserve")
        if int(reply[0]) == 1:
            self.expired += int(reply[1])
            return Reservation(rid, tuple(s.key for s in scopes), amounts, ttl_s)
        self.expired += int(reply[7])
        scope = scopes[int(reply[1]) - 1]
        limit = reply[2].decode() if isinstance(reply[2], bytes) else str(reply[2])
        committed, held, want, setting = (float(x) for x in reply[3:7])
        return Refusal(scope.key, limit, committed, held, want, setting)

    async def commit(self, reservation: Reservation, actual: Amounts) -> None:
        """Close the reservation and add ``actual`` to every scope's totals and ledger."""
        keys = [k for s in reservation.scopes for k in self._keys(s)]
        await self._run(
            self._commit,
            keys,
            [
                reservation.id,
                len(reservation.scopes),
                self.max_entries,
                json.dumps(actual.as_dict()),
            ],
            "commit",
        )

    async def release(self, reservation: Reservation) -> None:
        """Close the reservation without spending (idempotent)."""
        keys = [k for s in reservation.scopes for k in self._keys(s)]
        await self._run(self._release, keys, [reservation.id, len(reservation.scopes)], "release")

    async def spent(self, scope: str) -> Amounts:
        """The committed totals of ``scope``."""
        raw = await bounded(
            self._client.hgetall(self._keys(scope)[0]),
            timeout_s=self.timeout_s,
            store=self.name,
            what="read spend",
        )
        return Amounts.from_dict(_floats(raw))

    async def reserved(self, scope: str) -> Amounts:
        """What the unexpired open reservations of ``scope`` hold."""
        keys = self._keys(scope)
        values = await self._run(self._reserved, [keys[1], keys[2]], [], "read reservations")
        held = dict.fromkeys(DIMENSIONS, 0.0)
        for value in values:
            if value is None:
                continue
            for name, amount in json.loads(value).items():
                held[name] = held.get(name, 0.0) + float(amount)
        return Amounts.from_dict(held)

    async def reconcile(self, scope: str) -> bool:
        """True when ``scope``'s committed totals equal its ledger's sum (folded part included)."""
        keys = self._keys(scope)
        totals = _floats(
            await bounded(
                self._client.hgetall(keys[0]),
                timeout_s=self.timeout_s,
                store=self.name,
                what="reconcile",
            )
        )
        folded = _floats(
            await bounded(
                self._client.hgetall(keys[4]),
                timeout_s=self.timeout_s,
                store=self.name,
                what="reconcile",
            )
        )
        entries = await bounded(
            self._client.xrange(keys[3]),
            timeout_s=self.timeout_s * 10,
            store=self.name,
            what="reconcile",
        )
        summed = dict.fromkeys(DIMENSIONS, 0.0)
        for name, value in folded.items():
            summed[name] = summed.get(name, 0.0) + value
        for _, fields in entries or ():
            for name, value in _floats(fields or {}).items():
                if name != "rid":
                    summed[name] = summed.get(name, 0.0) + value
        return all(
            math.isclose(totals.get(n, 0.0), summed.get(n, 0.0), rel_tol=1e-9, abs_tol=1e-6)
            for n in DIMENSIONS
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _floats(mapping: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    for key, value in dict(mapping).items():
        name = _text(key)
        if name == "rid":
            continue
        out[name] = float(_text(value))
    return out
