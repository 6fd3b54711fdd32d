"""The one stop policy: what each detector and budget verdict asks of a run, for every loop.

:func:`decide` maps one verdict to a :class:`Decision` — stop the run (with its
status, its error and the error's message), compact before the next model
call, or add a note to the next request — and is the only place that mapping
and its messages live. :class:`RunPolicy` collects the verdicts of the runs it
was told about (:meth:`RunPolicy.open`) and applies them: ``AgentLoop`` applies
them between steps (:meth:`RunPolicy.apply`); the adapters ask for the run's
stop (:meth:`RunPolicy.stop_of`) and raise it into the framework. A new action
is taught here once.

Detectors emit ``on_loop_detected`` and ``on_convergence_detected`` into the
run's observer set, and the budget checks (``loopobs.cost.spending``) emit
``on_budget_exceeded``; the policy is the last member of that set, so every
observer has seen a verdict before the run acts on it.
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
from loopobs.loop.run import Conversation

__all__ = ["NOTE_PREFIX", "Decision", "RunPolicy", "Stop", "Stopped", "Verdict", "decide"]

Verdict = LoopDetectedContext | ConvergenceDetectedContext | BudgetExceededContext

NOTE_PREFIX = "[loopobs] Note: "
"""Start of the note a warning adds to the next model request."""


@dataclass(frozen=True, slots=True)
class Stop:
    """A verdict ended the run: with ``status``, and ``error`` as the run's error.

    ``pattern`` names what the stop is about (the repeated call, ``converged
    answers``, ``<limit> budget``): adapters carry it on the exception they raise.
    """

    status: RunStatus
    error: LoopDetected | BudgetExceeded
    pattern: str = ""

    @property
    def message(self) -> str:
        """The stop's message, as the run's error and the adapters' exception say it."""
        return str(self.error)


class Stopped(Exception):
    """Raised inside a step of ``AgentLoop`` when the policy stopped the run mid-step.

    The driver catches it and ends the run with :attr:`stop`; it never leaves the run.
    """

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.message)
        self.stop = stop


@dataclass(frozen=True, slots=True)
class Decision:
    """What one verdict asks of its run: a stop, a compaction, a note, or nothing."""

    stop: Stop | None = None
    compact: bool = False
    note: str | None = None


_NOTHING = Decision()


def decide(verdict: Verdict) -> Decision:
    """The decision on one verdict.

    Actions: ``stop`` and ``ask_user`` stop the run (a repetition ends it
    ``loop_detected``, a convergence ``converged``, a budget ``budget_exceeded``);
    ``compact`` asks for compaction before the next model call; ``warn`` and
    ``switch_phase`` of a detector add a note to the next model request; a
    budget's ``warn`` changes nothing.
    """
    if isinstance(verdict, BudgetExceededContext):
        if verdict.action == "stop":
            return Decision(
                stop=Stop(RunStatus.BUDGET_EXCEEDED, error_of(verdict), f"{verdict.limit} budget")
            )
        return _NOTHING
    if isinstance(verdict, LoopDetectedContext):
        # The model sees the calls it made; the run's error, which reaches span status and
        # logs, names the tool and the arguments' hash, never their values.
        pattern = verdict.summary()
        told = f"the tool call pattern {verdict.pattern} repeated {verdict.repetitions} times"
        stopped = f"stopped: the tool call pattern {pattern} repeated {verdict.repetitions} times"
        status = RunStatus.LOOP_DETECTED
    else:
        pattern = "converged answers"
        told = f"your last {verdict.consecutive} answers are nearly identical"
        stopped = f"stopped: the last {verdict.consecutive} answers are nearly identical"
        status = RunStatus.CONVERGED
    action = verdict.action
    if action in ("stop", "ask_user"):
        return Decision(stop=Stop(status, LoopDetected(stopped, pattern=pattern), pattern))
    if action == "compact":
        return Decision(compact=True)
    return Decision(
        note=f"{NOTE_PREFIX}{told}. Try a different approach or give your final answer."
    )


class RunPolicy(LoopObserver):
    """Collects detector and budget verdicts for the runs it watches, decided by :func:`decide`.

    The first stop of a run is its stop; later verdicts still apply (a
    compaction, notes) where the loop can act on them.
    """

    name = "loopobs.policy"

    def __init__(self) -> None:
        self._queues: dict[uuid.UUID, list[Verdict]] = {}
        self._stops: dict[uuid.UUID, Stop] = {}
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
            self._stops.pop(run_id, None)

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

    def impose(self, run_id: uuid.UUID, stop: Stop) -> None:
        """Stop ``run_id`` with ``stop`` (a guard of its own), unless it is already stopped."""
        with self._lock:
            if run_id in self._queues:
                self._stops.setdefault(run_id, stop)

    def apply(self, run_id: uuid.UUID, session: Conversation) -> Stop | None:
        """Apply the queued verdicts to ``session``: notes, compaction requests; or a stop.

        Returns the stop a verdict taken now decided (the first one wins), if any.
        """
        stop: Stop | None = None
        for verdict in self.take(run_id):
            decision = decide(verdict)
            if decision.stop is not None:
                stop = stop or decision.stop
            elif decision.compact:
                session.compact_requested = True
            elif decision.note is not None:
                session.pending_notes.append(decision.note)
        if stop is not None:
            self.impose(run_id, stop)
        return stop

    def stop_of(self, run_id: uuid.UUID) -> Stop | None:
        """The run's stop, deciding the verdicts queued so far (the first stop wins).

        For runs that cannot take notes or compaction (a framework's): those
        decisions are dropped.
        """
        for verdict in self.take(run_id):
            decision = decide(verdict)
            if decision.stop is not None:
                self.impose(run_id, decision.stop)
        return self._stops.get(run_id)
