"""Sessions, run results and checkpoints of parked runs."""

from __future__ import annotations

import datetime as _dt
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from loopobs.core.budget import Budget, BudgetTracker, Spend
from loopobs.core.errors import LoopError
from loopobs.core.events import RunStatus, Usage
from loopobs.core.model import Message, ToolCallPart, ToolResultMessage

__all__ = ["Checkpoint", "ParkedCall", "RunResult", "RunStatus", "Session"]


class Session:
    """One conversation: its id, its messages, its turn counter and what it spent.

    Turn numbers keep counting across the runs of a session. A session runs
    one run at a time; runs on different sessions share nothing. ``budget``
    limits the session's runs together (:attr:`spend` adds up over them); a
    session that crossed it stops every later run before its first model call.
    """

    def __init__(
        self,
        *,
        id: uuid.UUID | None = None,
        messages: list[Message] | None = None,
        turn: int = 0,
        budget: Budget | None = None,
    ) -> None:
        self.id = id or uuid.uuid4()
        self.budget = budget
        self.spend = Spend()
        """Tokens, calls, USD and running time over the session's runs."""
        self._budget_tracker: BudgetTracker | None = None
        self.messages: list[Message] = list(messages or [])
        self.turn = turn
        self.last_model: str | None = None
        self.last_input_tokens: int | None = None
        """Input tokens the provider reported for the last call, and the message count then."""
        self.messages_at_last_usage = 0
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
            tracker = self._budget_tracker = BudgetTracker(self.budget, "session",
                                                           spend=self.spend)
        return tracker

    def __repr__(self) -> str:
        return f"Session(id={self.id}, messages={len(self.messages)}, turn={self.turn})"


class ParkedCall(BaseModel):
    """A tool call that parked the run, as recorded in a checkpoint."""

    # defer_build: the validator is built at first use, not when `import loopobs` runs.
    model_config = ConfigDict(frozen=True, defer_build=True)

    id: str
    name: str
    arguments: dict[str, Any]
    attempt: int = 0


class Checkpoint(BaseModel):
    """Everything needed to resume a parked run, in another process if need be.

    Serialise with ``checkpoint.model_dump_json()`` and read back with
    ``Checkpoint.model_validate_json(text)``.
    """

    model_config = ConfigDict(frozen=True, defer_build=True)

    version: Literal[1] = 1
    run_id: uuid.UUID
    session_id: uuid.UUID
    turn: int
    """The session's next turn number."""
    model: str
    messages: list[Message]
    kind: Literal["suspend", "sleep"]
    parked: ParkedCall
    """The call that parked the run: it receives the resume input, or runs again after waking."""
    rerun: list[ParkedCall] = Field(default_factory=list)
    """Other calls of the same wave that parked too: they run again on resume."""
    results: list[ToolResultMessage | None]
    """Tool results of the parked wave, in the model's order (None where a call is parked)."""
    reason: str = ""
    input_schema: dict[str, Any] | None = None
    suspension_kind: Literal["human", "signal"] = "human"
    wake_at: _dt.datetime | None = None
    trace_context: dict[str, str] | None = None
    """W3C trace context (``traceparent``) of the parked run's span, for the resumed run's link."""

    @staticmethod
    def part(call: ParkedCall) -> ToolCallPart:
        """The model's tool call this record stands for."""
        return ToolCallPart(id=call.id, name=call.name, arguments=call.arguments)


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
    session: Session
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
