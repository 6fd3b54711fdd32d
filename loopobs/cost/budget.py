"""Budgets: limits on what a run or a session may spend, checked as it spends.

A :class:`Budget` sets any of: USD, input / output / total tokens, tool calls,
model calls, wall time. A :class:`BudgetTracker` holds one scope's
:class:`Spend` (a run, or a session across its runs) and gives the verdicts:

- :meth:`BudgetTracker.before_call` — before a model call, with the request's
  estimated usage and cost: a call that would cross a limit is not made;
- :meth:`BudgetTracker.check` — after a response or a tool call, on what was
  actually used.

A verdict is a :class:`~loopobs.contract.events.BudgetExceededContext` to emit:
``action="stop"`` once when a limit is crossed (value over the limit), and
``action="warn"`` once when the budget's ``warn_at`` share of a limit is reached.

Trackers are driven by one path, :class:`~loopobs.cost.spending.RunSpending`:
``AgentLoop(budget=...)`` and ``Conversation(budget=...)`` drive it from the loop's
phases, and :class:`~loopobs.cost.spending.BudgetGuard` from the events of a loop
that is not ours (by hand or through an adapter).

USD counts priced model calls only: a call whose model has no known price adds
no dollars (the run's cost is then unknown, and the call is counted in
:attr:`Spend.unpriced_calls`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal
from uuid import UUID

from loopobs.contract.errors import BudgetExceeded
from loopobs.contract.events import BudgetExceededContext, BudgetLimit, Usage

__all__ = ["DEFAULT_MAX_RUNS", "Budget", "BudgetGuard", "BudgetTracker", "Spend", "error_of"]

Scope = Literal["run", "session"]

_LIMITS: Final[tuple[BudgetLimit, ...]] = (
    "usd",
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "tool_calls",
    "model_calls",
    "wall_time_s",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """Limits for one run or one session; ``None`` means no limit.

    ``warn_at`` (a share in (0, 1), e.g. ``0.8``) emits one warning per limit
    when that share of it is used, without stopping.

    Raises:
        ValueError: a limit is negative, NaN or infinite (which would silently disable
            it), or ``warn_at`` is outside (0, 1).
        TypeError: a limit is not a number.
    """

    usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    tool_calls: int | None = None
    model_calls: int | None = None
    wall_time_s: float | None = None
    warn_at: float | None = None

    def __post_init__(self) -> None:
        for name in _LIMITS:
            limit = getattr(self, name)
            if limit is None:
                continue
            if isinstance(limit, bool) or not isinstance(limit, (int, float)):
                raise TypeError(f"Budget: {name} must be a number, got {limit!r}")
            # NaN compares false with everything: a NaN limit would never be crossed.
            if not math.isfinite(limit) or limit < 0:
                raise ValueError(
                    f"Budget: {name} must be a finite, non-negative number, got {limit!r}"
                )
        warn_at = self.warn_at
        if warn_at is not None and (
            isinstance(warn_at, bool)
            or not isinstance(warn_at, (int, float))
            or not 0 < warn_at < 1
        ):
            raise ValueError("Budget: warn_at must be a share between 0 and 1")

    def limits(self) -> Iterator[tuple[BudgetLimit, float]]:
        """The limits that are set, as (name, setting)."""
        for name in _LIMITS:
            limit = getattr(self, name)
            if limit is not None:
                yield name, float(limit)


@dataclass(slots=True)
class Spend:
    """What a run or a session has used so far."""

    usd: float = 0.0
    """USD of the priced model calls."""
    unpriced_calls: int = 0
    """Model calls whose price is unknown (their dollars are not in :attr:`usd`)."""
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    """Model call attempts started."""
    tool_calls: int = 0
    """Tool call attempts ended."""
    wall_time_s: float = 0.0
    """Time spent running (for a session, summed over its runs)."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens

    @property
    def cost_usd(self) -> float | None:
        """The USD total, or ``None`` when some model call's price is unknown."""
        return None if self.unpriced_calls else self.usd

    def value(self, limit: BudgetLimit) -> float:
        """The amount used of ``limit``."""
        return float(getattr(self, limit))

    def add_call(self, usage: Usage | None, cost_usd: float | None) -> None:
        """Count a completed model call's tokens and cost (``None``: price unknown)."""
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.usd += cost_usd


@dataclass(slots=True)
class BudgetTracker:
    """One scope's budget and spend, and the verdicts on them.

    A limit is crossed when its value goes over the setting; each limit stops
    once and warns once — except that every later run of a stopped session gets
    the stop too, at its first check. Not thread-safe: one run (or the guard's lock) drives it.
    """

    budget: Budget
    scope: Scope = "run"
    spend: Spend = field(default_factory=Spend)
    clock: Callable[[], float] = time.monotonic
    _started: float | None = None
    _running: int = 0
    _base_wall_s: float = 0.0
    _warned: set[str] = field(default_factory=set)
    _stopped: BudgetExceededContext | None = None
    _stopped_runs: set[UUID] = field(default_factory=set)

    def start(self) -> None:
        """A run of the scope starts: the wall clock runs while any run of it runs.

        Runs that overlap (branches of one run, concurrent runs of one session)
        count the time they overlap once; runs one after another add up.
        """
        if self._running == 0:
            self._started = self.clock()
            self._base_wall_s = self.spend.wall_time_s
        self._running += 1

    def stop(self) -> None:
        """A run of the scope ends; the clock stops, keeping the time, when none is left."""
        if self._running == 0:
            return
        self._running -= 1
        if self._running == 0:
            self._tick()
            self._started = None

    def _tick(self) -> None:
        if self._started is not None:
            self.spend.wall_time_s = self._base_wall_s + (self.clock() - self._started)

    @property
    def stopped(self) -> BudgetExceededContext | None:
        """The stop verdict, once a limit was crossed."""
        return self._stopped

    def before_call(
        self, run_id: UUID, estimate: Usage, estimated_usd: float | None
    ) -> list[BudgetExceededContext]:
        """Verdicts for making one more model call of ``estimate`` usage and cost.

        The call's tokens and dollars, and one more model call, are added to
        what was used; a stop means the call must not be made.
        """
        spend = self.spend
        extra = {
            "usd": estimated_usd or 0.0,
            "input_tokens": estimate.input_tokens,
            "output_tokens": estimate.output_tokens,
            "total_tokens": estimate.total_tokens,
            "model_calls": 1,
        }
        self._tick()
        return self._verdicts(run_id, lambda name: spend.value(name) + extra.get(name, 0))

    def check(self, run_id: UUID) -> list[BudgetExceededContext]:
        """Verdicts on what was actually used (after a response or a tool call)."""
        self._tick()
        return self._verdicts(run_id, self.spend.value)

    def _verdicts(
        self, run_id: UUID, value_of: Callable[[BudgetLimit], float]
    ) -> list[BudgetExceededContext]:
        stopped = self._stopped
        if stopped is not None:
            if run_id in self._stopped_runs:
                return []
            self._stopped_runs.add(run_id)
            return [replace(stopped, run_id=run_id, time_ns=time.time_ns())]
        budget = self.budget
        out: list[BudgetExceededContext] = []
        for name, limit in budget.limits():
            value = value_of(name)
            if value > limit:
                self._stopped = BudgetExceededContext(
                    run_id=run_id,
                    time_ns=time.time_ns(),
                    limit=name,
                    value=value,
                    budget=limit,
                    scope=self.scope,
                    action="stop",
                )
                self._stopped_runs.add(run_id)
                return [*out, self._stopped]
            if (
                budget.warn_at is not None
                and name not in self._warned
                and value >= budget.warn_at * limit
            ):
                self._warned.add(name)
                out.append(
                    BudgetExceededContext(
                        run_id=run_id,
                        time_ns=time.time_ns(),
                        limit=name,
                        value=value,
                        budget=limit,
                        scope=self.scope,
                        action="warn",
                    )
                )
        return out


def error_of(verdict: BudgetExceededContext) -> BudgetExceeded:
    """The error a stop verdict ends the run with."""
    return BudgetExceeded(
        limit=verdict.limit,
        value=verdict.value,
        budget=verdict.budget,
        scope=verdict.scope_key or verdict.scope,
    )


if TYPE_CHECKING:
    from loopobs.cost.spending import DEFAULT_MAX_RUNS, BudgetGuard

_MOVED_TO_SPENDING: Final = ("BudgetGuard", "DEFAULT_MAX_RUNS")


def __getattr__(name: str) -> Any:
    # BudgetGuard moved to loopobs.cost.spending (it runs on RunSpending, the one budget
    # path); these names keep ``from loopobs.cost.budget import BudgetGuard`` working.
    if name in _MOVED_TO_SPENDING:
        from loopobs.cost import spending

        return getattr(spending, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
