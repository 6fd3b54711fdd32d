"""Budgets shared across processes: reserve a call's worst case, commit what it cost.

A budget that lives in one process cannot hold across a fleet: three workers each
allowed $5 spend $15. A :class:`BudgetLedger` keeps the spend of named scopes
(``"session:…"``, ``"tenant:acme"``, ``"api_key:…"``) where every worker sees it, and
enforces limits with reservations:

1. before a model call the worker :meth:`~BudgetLedger.reserve` s the call's worst
   case (the estimated input tokens plus the request's ``max_tokens``, priced for the
   model) in every scope the call counts against, atomically: either all scopes have
   room for committed spend + open reservations + this one, or nothing is reserved and
   the call is not made;
2. after the call it :meth:`~BudgetLedger.commit` s the real amounts (the rest of the
   reservation is released in the same step);
3. when the call fails or is cancelled it :meth:`~BudgetLedger.release` s.

Reservations expire (``ttl_s``), so a worker killed mid-call frees its share. Spend is
a ledger of committed calls: each commit appends one entry and adds it to the totals in
the same atomic step, so the totals are the ledger's sum (:meth:`InProcessLedger.reconcile`
and the Redis ledger's recompute it to prove it).

:class:`InProcessLedger` is the default (one process, no dependencies);
``loopobs.redis.RedisLedger`` (the ``redis`` extra) is the fleet one.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, Protocol

from loopobs.contract.errors import BudgetExceeded, BudgetUnavailable, StoreUnavailable
from loopobs.cost.budget import Budget

__all__ = [
    "DIMENSIONS",
    "Amounts",
    "BudgetLedger",
    "FailurePolicy",
    "InProcessLedger",
    "Refusal",
    "Reservation",
    "ScopeLimit",
    "SharedBudget",
    "first_refusal",
    "limits_of",
]

DIMENSIONS: Final = ("usd", "input_tokens", "output_tokens", "model_calls", "tool_calls")
"""What a shared budget counts (wall time stays per process: it is not additive)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Amounts:
    """What one call may spend (a reservation) or spent (a commit).

    Raises:
        ValueError: an amount is negative or not finite.
    """

    usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    tool_calls: int = 0

    def __post_init__(self) -> None:
        for name in DIMENSIONS:
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"Amounts: {name} must be finite and not negative, not {value!r}")

    def as_dict(self) -> dict[str, float]:
        """The amounts by dimension name."""
        return {name: float(getattr(self, name)) for name in DIMENSIONS}

    @classmethod
    def from_dict(cls, values: Mapping[str, float]) -> Amounts:
        """The amounts of a mapping written by :meth:`as_dict` (missing names are 0)."""
        return cls(
            usd=float(values.get("usd", 0.0)),
            input_tokens=int(values.get("input_tokens", 0)),
            output_tokens=int(values.get("output_tokens", 0)),
            model_calls=int(values.get("model_calls", 0)),
            tool_calls=int(values.get("tool_calls", 0)),
        )


def limits_of(budget: Budget) -> dict[str, float]:
    """The shared limits of ``budget``: the dimensions above, plus ``total_tokens``."""
    return {
        name: limit
        for name, limit in budget.limits()
        if name in DIMENSIONS or name == "total_tokens"
    }


@dataclass(frozen=True, slots=True)
class ScopeLimit:
    """One scope a call counts against, and its limits (a scope without limits only counts)."""

    key: str
    """The scope's name in the ledger, e.g. ``"tenant:acme"`` or ``"session:<id>"``."""
    budget: Budget | None = None


@dataclass(frozen=True, slots=True)
class Reservation:
    """An open reservation: what was held, where, until when."""

    id: str
    scopes: tuple[str, ...]
    amounts: Amounts
    ttl_s: float


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a reservation did not fit: the first scope and limit it would have crossed."""

    scope: str
    limit: str
    """A dimension name, or ``total_tokens``."""
    committed: float
    reserved: float
    requested: float
    setting: float

    @property
    def message(self) -> str:
        """One line for errors and events (no values of the call's content)."""
        return (
            f"{self.scope}: {self.limit} would reach "
            f"{self.committed + self.reserved + self.requested:g} of {self.setting:g} "
            f"(committed {self.committed:g}, reserved {self.reserved:g}, "
            f"this call {self.requested:g})"
        )


class BudgetLedger(Protocol):
    """Where shared spend lives. Every method is atomic with respect to every other caller."""

    name: str
    """The store's name in errors (``"memory"``, ``"redis://127.0.0.1:6379/0"``)."""

    async def reserve(
        self, scopes: Sequence[ScopeLimit], amounts: Amounts, *, ttl_s: float
    ) -> Reservation | Refusal:
        """Hold ``amounts`` in every scope, or nothing when one of them has no room."""
        ...

    async def commit(self, reservation: Reservation, actual: Amounts) -> None:
        """Close ``reservation`` and add ``actual`` to its scopes' ledgers (even if expired)."""
        ...

    async def release(self, reservation: Reservation) -> None:
        """Close ``reservation`` without spending (idempotent)."""
        ...

    async def spent(self, scope: str) -> Amounts:
        """The committed totals of ``scope``."""
        ...

    async def reserved(self, scope: str) -> Amounts:
        """What the open (unexpired) reservations of ``scope`` hold."""
        ...


def _total_tokens(values: Mapping[str, float]) -> float:
    return values.get("input_tokens", 0.0) + values.get("output_tokens", 0.0)


def first_refusal(
    scope: ScopeLimit,
    committed: Mapping[str, float],
    reserved: Mapping[str, float],
    requested: Mapping[str, float],
) -> Refusal | None:
    """The first limit of ``scope`` that ``requested`` would cross, if any.

    A limit is crossed when committed + reserved + requested exceeds it; exactly
    reaching it fits. Dimensions the call does not use (requested 0) never refuse,
    so a scope already at its limit still lets calls that add nothing to it through.
    """
    if scope.budget is None:
        return None
    for name, setting in limits_of(scope.budget).items():
        if name == "total_tokens":
            want = _total_tokens(requested)
            have, held = _total_tokens(committed), _total_tokens(reserved)
        else:
            want = requested.get(name, 0.0)
            have, held = committed.get(name, 0.0), reserved.get(name, 0.0)
        if want > 0 and have + held + want > setting:
            return Refusal(scope.key, name, have, held, want, setting)
    return None


@dataclass(slots=True)
class _Open:
    scopes: tuple[str, ...]
    amounts: dict[str, float]
    expires_at: float


@dataclass(slots=True)
class _Scope:
    committed: dict[str, float] = field(default_factory=lambda: dict.fromkeys(DIMENSIONS, 0.0))
    ledger: list[dict[str, float]] = field(default_factory=list)


class InProcessLedger:
    """A :class:`BudgetLedger` in this process's memory (thread-safe; the default).

    ``max_entries`` bounds each scope's ledger: past it the oldest entries are folded
    into one, so the totals stay the ledger's sum and memory stays bounded.
    """

    name = "memory"

    def __init__(
        self, *, clock: Callable[[], float] = time.monotonic, max_entries: int = 10_000
    ) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._lock = threading.Lock()
        self._scopes: dict[str, _Scope] = {}
        self._open: dict[str, _Open] = {}
        self.expired = 0
        """Reservations that expired before they were committed or released."""

    def _purge(self, now: float) -> None:
        for rid in [r for r, o in self._open.items() if o.expires_at <= now]:
            del self._open[rid]
            self.expired += 1

    def _reserved(self, scope: str) -> dict[str, float]:
        held = dict.fromkeys(DIMENSIONS, 0.0)
        for o in self._open.values():
            if scope in o.scopes:
                for name, value in o.amounts.items():
                    held[name] += value
        return held

    async def reserve(
        self, scopes: Sequence[ScopeLimit], amounts: Amounts, *, ttl_s: float
    ) -> Reservation | Refusal:
        """Hold ``amounts`` in every scope, or nothing (see :class:`BudgetLedger`)."""
        requested = amounts.as_dict()
        with self._lock:
            now = self._clock()
            self._purge(now)
            for scope in scopes:
                state = self._scopes.get(scope.key)
                committed = state.committed if state else {}
                refusal = first_refusal(scope, committed, self._reserved(scope.key), requested)
                if refusal is not None:
                    return refusal
            rid = uuid.uuid4().hex
            keys = tuple(s.key for s in scopes)
            self._open[rid] = _Open(keys, requested, now + ttl_s)
            return Reservation(rid, keys, amounts, ttl_s)

    async def commit(self, reservation: Reservation, actual: Amounts) -> None:
        """Close the reservation and append ``actual`` to each scope's ledger."""
        spent = actual.as_dict()
        with self._lock:
            self._open.pop(reservation.id, None)
            for key in reservation.scopes:
                state = self._scopes.setdefault(key, _Scope())
                state.ledger.append(spent)
                for name, value in spent.items():
                    state.committed[name] += value
                if len(state.ledger) > self._max_entries:
                    # Fold the two oldest entries: the sum is unchanged.
                    first, second = state.ledger[0], state.ledger[1]
                    state.ledger[:2] = [{n: first[n] + second[n] for n in DIMENSIONS}]

    async def release(self, reservation: Reservation) -> None:
        """Close the reservation without spending."""
        with self._lock:
            self._open.pop(reservation.id, None)

    async def spent(self, scope: str) -> Amounts:
        """The committed totals of ``scope``."""
        with self._lock:
            state = self._scopes.get(scope)
            return Amounts.from_dict(state.committed) if state else Amounts()

    async def reserved(self, scope: str) -> Amounts:
        """What the open reservations of ``scope`` hold now."""
        with self._lock:
            self._purge(self._clock())
            return Amounts.from_dict(self._reserved(scope))

    def reconcile(self, scope: str) -> bool:
        """True when ``scope``'s totals equal the sum of its ledger (they always should)."""
        with self._lock:
            state = self._scopes.get(scope)
            if state is None:
                return True
            return all(
                math.isclose(
                    state.committed[n], sum(e[n] for e in state.ledger), rel_tol=1e-9, abs_tol=1e-9
                )
                for n in DIMENSIONS
            )


FailurePolicy = Literal["fail_closed", "fail_open"]

_log = logging.getLogger("loopobs.budget")


class SharedBudget:
    """Limits that hold across every worker: which scopes a call counts against, and what
    to do when the ledger cannot answer.

    A call counts against its session (``"session:<id>"``, limited by ``session``) and
    against one scope per entry of the conversation's attribution
    (``Conversation(attribution={"tenant": "acme"})`` → ``"tenant:acme"``, limited by
    ``scopes["tenant"]``); an entry without a limit only counts.

    ``on_unavailable`` decides what a ledger that fails or passes its deadline means:
    ``"fail_closed"`` (the default) refuses the call with
    :class:`~loopobs.contract.errors.BudgetUnavailable` naming the store;
    ``"fail_open"`` lets it through unguarded, counted in :attr:`unguarded_calls` and
    logged once per outage (and once when the store answers again).

    A reservation is the call's worst case: its estimated input tokens and its
    request's ``max_tokens`` (``assumed_output_tokens`` when it sets none), priced for
    the model. Keep ``reservation_ttl_s`` longer than a model call can take: a
    reservation that expires before its call ends stops counting, and the call's
    commit is then added on top of whatever was reserved meanwhile.
    """

    def __init__(
        self,
        ledger: BudgetLedger | None = None,
        *,
        session: Budget | None = None,
        scopes: Mapping[str, Budget] | None = None,
        on_unavailable: FailurePolicy = "fail_closed",
        reservation_ttl_s: float = 600.0,
        assumed_output_tokens: int = 4096,
    ) -> None:
        if on_unavailable not in ("fail_closed", "fail_open"):
            raise ValueError("SharedBudget: on_unavailable is 'fail_closed' or 'fail_open'")
        if not math.isfinite(reservation_ttl_s) or reservation_ttl_s <= 0:
            raise ValueError("SharedBudget: reservation_ttl_s must be positive")
        if (
            isinstance(assumed_output_tokens, bool)
            or not isinstance(assumed_output_tokens, int)
            or assumed_output_tokens < 1
        ):
            raise ValueError("SharedBudget: assumed_output_tokens must be a positive integer")
        self.assumed_output_tokens = assumed_output_tokens
        """Output tokens reserved for a call whose request sets no ``max_tokens``."""
        self.ledger: BudgetLedger = ledger if ledger is not None else InProcessLedger()
        self.session = session
        self.scopes: dict[str, Budget] = dict(scopes or {})
        self.on_unavailable: FailurePolicy = on_unavailable
        self.reservation_ttl_s = reservation_ttl_s
        self.unguarded_calls = 0
        """Calls let through under ``fail_open`` while the ledger was unavailable."""
        self.refused_calls = 0
        """Calls refused: no room in a scope, or the ledger unavailable under ``fail_closed``."""
        self.store_errors = 0
        """Ledger operations that failed or passed their deadline."""
        self._outage = False
        self._lock = threading.Lock()
        self._expired_seen = 0

    def take_expired(self) -> int:
        """Reservations the ledger found expired since the previous call (each counted once).

        Read from the ledger's ``expired`` count (``InProcessLedger`` and ``RedisLedger``
        keep one; a ledger without it reports 0)."""
        total = getattr(self.ledger, "expired", 0)
        if not isinstance(total, int):
            return 0
        with self._lock:
            new, self._expired_seen = (
                max(0, total - self._expired_seen),
                max(total, self._expired_seen),
            )
        return new

    def scopes_for(
        self, session_id: object, attribution: Mapping[str, str] | None = None
    ) -> list[ScopeLimit]:
        """The scopes of a call in ``session_id`` for ``attribution``."""
        out = [ScopeLimit(f"session:{session_id}", self.session)]
        for name, value in sorted((attribution or {}).items()):
            out.append(ScopeLimit(f"{name}:{value}", self.scopes.get(name)))
        return out

    def _failed(self, exc: BaseException, what: str) -> None:
        with self._lock:
            self.store_errors += 1
            first = not self._outage
            self._outage = True
        if first:
            _log.warning(
                "shared budget store %s unavailable (%s): %s; calls are %s until it answers",
                self.ledger.name,
                what,
                exc,
                "refused" if self.on_unavailable == "fail_closed" else "unguarded",
            )

    def _answered(self) -> None:
        if self._outage:
            with self._lock:
                was, self._outage = self._outage, False
            if was:
                _log.warning("shared budget store %s answers again", self.ledger.name)

    async def reserve(self, scopes: Sequence[ScopeLimit], amounts: Amounts) -> Reservation | None:
        """Reserve a call's worst case; None means "let through unguarded" (``fail_open``).

        Raises:
            BudgetExceeded: a scope has no room (the call must not be made).
            BudgetUnavailable: the ledger failed and the policy is ``fail_closed``.
        """
        try:
            result = await self.ledger.reserve(scopes, amounts, ttl_s=self.reservation_ttl_s)
        except StoreUnavailable as exc:
            self._failed(exc, "reserve")
            if self.on_unavailable == "fail_open":
                with self._lock:
                    self.unguarded_calls += 1
                return None
            with self._lock:
                self.refused_calls += 1
            raise BudgetUnavailable(
                f"shared budget store {self.ledger.name} unavailable: {exc.reason}",
                store=self.ledger.name,
                reason=exc.reason,
            ) from exc
        self._answered()
        if isinstance(result, Refusal):
            with self._lock:
                self.refused_calls += 1
            raise BudgetExceeded(
                f"shared budget: {result.message}",
                limit=result.limit,
                value=result.committed + result.reserved + result.requested,
                budget=result.setting,
                scope=result.scope,
            )
        return result

    async def commit(self, reservation: Reservation | None, actual: Amounts) -> bool:
        """Record what the call cost (never raises: the call was made; a failure is logged
        and counted, and the reservation then expires on its own). False: the store failed."""
        if reservation is None:
            return True
        try:
            await self.ledger.commit(reservation, actual)
        except StoreUnavailable as exc:
            self._failed(exc, "commit")
            return False
        self._answered()
        return True

    async def release(self, reservation: Reservation | None) -> bool:
        """Give a reservation back (the call failed or was cancelled); never raises.
        False: the store failed (the reservation then expires on its own)."""
        if reservation is None:
            return True
        try:
            await self.ledger.release(reservation)
        except StoreUnavailable as exc:
            self._failed(exc, "release")
            return False
        return True
