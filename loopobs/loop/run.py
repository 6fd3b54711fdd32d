"""Sessions, run results and checkpoints of parked runs.

:class:`Checkpoint` and :class:`ParkedCall` (pydantic models, defined in
:mod:`loopobs.loop.checkpoint`) are exported here too, loaded on first access so
that importing this module does not load pydantic.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loopobs.contract.errors import LoopError
from loopobs.contract.events import RunStatus, Usage
from loopobs.contract.model import Message
from loopobs.cost.budget import Budget, BudgetTracker, Spend

if TYPE_CHECKING:
    from loopobs.loop.checkpoint import Checkpoint, ParkedCall

__all__ = ["Checkpoint", "Conversation", "ParkedCall", "RunResult", "RunStatus"]


MAX_ATTRIBUTION_ENTRIES = 16
"""How many attribution names (``tenant``, ``user`` …) a conversation may carry."""
MAX_ATTRIBUTION_TEXT = 256
"""The longest attribution name or value, in characters."""


def _checked_attribution(attribution: Mapping[str, str] | None) -> dict[str, str]:
    """A copy of ``attribution``, refused unless it is a small mapping of short strings.

    Raises:
        TypeError: a name or value is not a ``str``.
        ValueError: too many entries, an empty or over-long name or value, or a name with
            ``:`` (shared budget scopes are ``name:value``).
    """
    if not attribution:
        return {}
    if len(attribution) > MAX_ATTRIBUTION_ENTRIES:
        raise ValueError(
            f"attribution: at most {MAX_ATTRIBUTION_ENTRIES} entries, not {len(attribution)}"
        )
    out: dict[str, str] = {}
    for name, value in attribution.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError("attribution: names and values are strings")
        if not name or not value or max(len(name), len(value)) > MAX_ATTRIBUTION_TEXT:
            raise ValueError(
                f"attribution: names and values are 1 to {MAX_ATTRIBUTION_TEXT} characters"
            )
        if ":" in name:
            raise ValueError(f"attribution: a name may not contain ':' ({name!r})")
        out[name] = value
    return out


class Conversation:
    """One conversation: its id, its messages, its turn counter and what it spent.

    Turn numbers keep counting across the runs of a session. A session runs
    one run at a time; runs on different sessions share nothing. ``budget``
    limits the session's runs together (:attr:`spend` adds up over them); a
    session that crossed it stops every later run before its first model call.
    ``attribution`` says who the conversation is for (``{"tenant": "acme", "user":
    "u-17"}``): on every run's telemetry, and the scopes of a shared budget.
    """

    def __init__(
        self,
        *,
        id: uuid.UUID | None = None,
        messages: list[Message] | None = None,
        turn: int = 0,
        budget: Budget | None = None,
        attribution: Mapping[str, str] | None = None,
    ) -> None:
        self.id = id or uuid.uuid4()
        self.budget = budget
        self.attribution: dict[str, str] = _checked_attribution(attribution)
        """Who the conversation is for (``{"tenant": …, "user": …}``): on every run's
        ``on_run_start``, and the scopes a shared budget counts its calls against."""
        self.spend = Spend()
        """Tokens, calls, USD and running time over the session's runs."""
        self._budget_tracker: BudgetTracker | None = None
        self.messages: list[Message] = list(messages or [])
        self.turn = turn
        self.last_model: str | None = None
        self.last_input_tokens: int | None = None
        """Input tokens the provider reported for the last call, and the message count then."""
        self.messages_at_last_usage = 0
        self.extra_tokens_at_last_usage = 0
        """Estimated tokens of that call's context texts and notes (not in the history)."""
        self.pending_notes: list[str] = []
        """Detector notes for the next model request (kept across runs of the session)."""
        self.context_texts: list[str] = []
        """Context providers' texts for the current turn's model calls (never history)."""
        self.compact_requested = False
        """A detector asked for compaction before the next model call."""
        self.busy = False

    @property
    def cost_usd(self) -> float | None:
        """USD over the session's runs; ``None`` when some model call's price is unknown."""
        return self.spend.cost_usd

    @property
    def budget_tracker(self) -> BudgetTracker | None:
        """The tracker of :attr:`budget` over :attr:`spend` (None without a budget)."""
        if self.budget is None:
            return None
        tracker = self._budget_tracker
        if tracker is None or tracker.budget is not self.budget:
            tracker = self._budget_tracker = BudgetTracker(self.budget, "session", spend=self.spend)
        return tracker

    def __repr__(self) -> str:
        return f"Conversation(id={self.id}, messages={len(self.messages)}, turn={self.turn})"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """What a run produced."""

    status: RunStatus
    answer: str | None
    messages: tuple[Message, ...]
    turns: int
    """Turns this run took."""
    usage: Usage
    """Token usage summed over the run's successful model calls."""
    error: LoopError | None
    checkpoint: Checkpoint | None
    session: Conversation
    run_id: uuid.UUID
    spend: Spend = field(default_factory=Spend)
    """What the run used: tokens, model and tool calls, USD, wall time."""

    @property
    def cost_usd(self) -> float | None:
        """USD of the run's model calls; ``None`` when some call's price is unknown."""
        return self.spend.cost_usd

    @property
    def ok(self) -> bool:
        """True when the run completed with an answer."""
        return self.status is RunStatus.COMPLETED


_LAZY = ("Checkpoint", "ParkedCall")

RENAMED_SESSION = (
    "Session was renamed Conversation (it is one conversation's history; "
    "AgentSession is the long-lived session): the old name goes away in loopobs 0.3"
)


def __getattr__(name: str) -> Any:
    # The checkpoint classes are pydantic models: loading them only when asked for
    # keeps pydantic out of `import loopobs`.
    if name in _LAZY:
        from loopobs.loop import checkpoint

        return getattr(checkpoint, name)
    if name == "Session":
        warnings.warn(RENAMED_SESSION, DeprecationWarning, stacklevel=2)
        return Conversation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
