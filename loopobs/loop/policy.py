"""The loop's policy on detector and budget verdicts: queue them during a step, apply them
between steps.

Detectors emit ``on_loop_detected`` and ``on_convergence_detected`` into the
loop's observer set, and the run's budget checks emit ``on_budget_exceeded``;
:class:`RunPolicy` is the last member of that set, so every observer has seen
a verdict before the loop acts on it. Verdicts are queued only for runs the
policy was told about (:meth:`RunPolicy.open`), and :meth:`RunPolicy.apply` is
the one place they take effect.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

from loopobs.contract.errors import BudgetExceeded, LoopDetected
from loopobs.contract.events import (
    BudgetExceededContext,
    ConvergenceDetectedContext,
    LoopDetectedContext,
    RunStatus,
)
from loopobs.contract.observer import LoopObserver
from loopobs.cost.budget import error_of
from loopobs.loop.run import Session

__all__ = ["RunPolicy", "Stop", "Verdict"]

Verdict = LoopDetectedContext | ConvergenceDetectedContext | BudgetExceededContext

NOTE_PREFIX = "[loopobs] Note: "
"""Start of the note a warning adds to the next model request."""


@dataclass(frozen=True, slots=True)
class Stop:
    """A verdict ended the run: with ``status``, and ``error`` as the run's error."""

    status: RunStatus
    error: LoopDetected | BudgetExceeded


class RunPolicy(LoopObserver):
    """Collects detector and budget verdicts for the loop's own runs and applies them.

    Actions: ``stop`` and ``ask_user`` end the run (the first such verdict
    wins; a budget's stop ends it ``budget_exceeded``); ``compact`` asks for
    compaction before the next model call; ``warn`` and ``switch_phase`` add a
    note to the next model request (a budget's ``warn`` changes nothing).
    """

    name = "loopobs.policy"

    def __init__(self) -> None:
        self._queues: dict[uuid.UUID, list[Verdict]] = {}
        self._lock = threading.Lock()

    @property
    def open_runs(self) -> int:
        """Runs whose verdicts are being collected (0 between runs)."""
        return len(self._queues)

    def open(self, run_id: uuid.UUID) -> None:
        """Start collecting verdicts for ``run_id``."""
        with self._lock:
            self._queues[run_id] = []

    def close(self, run_id: uuid.UUID) -> None:
        """Stop collecting for ``run_id`` and drop what was not applied."""
        with self._lock:
            self._queues.pop(run_id, None)

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        """Queue the verdict if the run is one of ours."""
        self._queue(ctx)

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        """Queue the verdict if the run is one of ours."""
        self._queue(ctx)

    def on_budget_exceeded(self, ctx: BudgetExceededContext) -> None:
        """Queue the verdict if the run is one of ours (a stop ends the run)."""
        self._queue(ctx)

    def _queue(self, verdict: Verdict) -> None:
        with self._lock:
            queue = self._queues.get(verdict.run_id)
            if queue is not None:
                queue.append(verdict)

    def take(self, run_id: uuid.UUID) -> list[Verdict]:
        """The verdicts queued for ``run_id`` since the last call, oldest first."""
        with self._lock:
            queue = self._queues.get(run_id)
            if not queue:
                return []
            taken = list(queue)
            queue.clear()
            return taken

    def apply(self, run_id: uuid.UUID, session: Session) -> Stop | None:
        """Apply the queued verdicts to ``session``: notes, compaction requests; or a stop."""
        stop: Stop | None = None
        for verdict in self.take(run_id):
            if isinstance(verdict, BudgetExceededContext):
                if verdict.action == "stop" and stop is None:
                    stop = Stop(RunStatus.BUDGET_EXCEEDED, error_of(verdict))
                continue
            if isinstance(verdict, LoopDetectedContext):
                # The model sees the calls it made; the run's error, which reaches span
                # status and logs, names the tool and the arguments' hash, never their values.
                what = (f"the tool call pattern {verdict.pattern} "
                        f"repeated {verdict.repetitions} times")
                stopped = (f"stopped: the tool call pattern {verdict.summary()} "
                           f"repeated {verdict.repetitions} times")
                status = RunStatus.LOOP_DETECTED
                pattern = verdict.summary()
            else:
                what = f"your last {verdict.consecutive} answers are nearly identical"
                stopped = f"stopped: {what}"
                status = RunStatus.CONVERGED
                pattern = "converged answers"
            action = verdict.action
            if action in ("stop", "ask_user"):
                if stop is None:
                    stop = Stop(status, LoopDetected(stopped, pattern=pattern))
            elif action == "compact":
                session.compact_requested = True
            else:
                session.pending_notes.append(
                    f"{NOTE_PREFIX}{what}. Try a different approach or give your final answer."
                )
        return stop
