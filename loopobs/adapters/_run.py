"""The shared base of every framework adapter: framework callbacks in, the event contract out.

An adapter owns one :class:`RunTracker` (the observers, the detectors and the stop
policy, shared by all the runs it sees) and opens one :class:`AdapterRun` per
framework run. It calls the run's methods from the framework's hooks; the run
numbers turns, pairs every start with exactly one end, and emits the same
contexts, in the same order and with the same guarantees as ``AgentLoop``
(``docs/events.md``), so every observer works unchanged and
:func:`loopobs.testing.check_contract` holds on what it emits.

Building an adapter on it::

    tracker = RunTracker(observers=[...])              # once per adapter instance
    run = tracker.start_run(agent="support", model="gpt-4o")   # framework run begins
    run.before_model_call(model="gpt-4o")              # budgets; raises RunStopped if stopped
    run.model_start(key, model="gpt-4o")               # a model call (opens a turn)
    run.text_delta(key, "Hel")                         # streamed text, if any
    run.model_end(key, usage=Usage(...), tool_calls=[FrameworkToolCall(...)])
    run.raise_if_stopped()                             # where the framework propagates
    run.tool_start(tool_key, tool="search", call_id="call_1", arguments={...})
    run.tool_end(tool_key, result="...")               # or error=exc
    run.end(error=None)                                # exactly once, from any exit path

``key`` is whatever the framework uses to tell one model call or tool call from
another (a callback run id, a span id); the run never interprets it. What the run
guarantees, whatever order the framework calls it in:

- one ``run_id`` per run, and turn numbers that start at 0 and keep counting
  across the runs of one session (``session_id``);
- a model call opens a new turn unless the current turn is still waiting for its
  response (a retry is the next ``attempt`` of the same turn); a tool started
  outside any turn opens one;
- exactly one ``on_stream_success`` / ``on_stream_failure`` per ``on_stream_start``,
  and deltas only between them;
- exactly one ``on_tool_post`` per ``on_tool_pre``, paired by call id and attempt
  (a call id seen twice is the next attempt, so duplicate ids still pair);
  ``on_tool_call_received`` once per call, before its first attempt;
- exactly one ``on_turn_end`` and one ``on_run_end``: :meth:`AdapterRun.end` closes
  whatever is still open (tools, the stream, the turn) and is idempotent, so an
  adapter may call it from every exit path (success, error, cancellation);
- a context is built only when some observer listens to its hook, and an observer
  that raises never reaches the framework (:class:`~loopobs.contract.observer.ObserverSet`);
- a call for an unknown or already ended key is ignored, never an error: frameworks
  sometimes report an end twice or for a start they never reported.

Stopping: detectors (:class:`~loopobs.detectors.RepetitionDetector`,
:class:`~loopobs.detectors.ConvergenceDetector`) sit in the tracker's
emission set after the user's observers, as in ``AgentLoop``. A verdict with
action ``stop`` (or ``ask_user``) marks the run stopped; the adapter then raises
:class:`RunStopped` into the framework at the next point where the framework lets
an exception through (:meth:`AdapterRun.raise_if_stopped`). ``warn`` (and
``switch_phase``, ``compact``) leave the run alone: the detection is still
reported to every observer. A :class:`~loopobs.cost.spending.BudgetGuard` passed
among the detectors stops a run over budget the same way (status
``budget_exceeded``); other guards call :meth:`StopPolicy.stop`. The verdicts are
decided by the loop's own policy (:func:`loopobs.loop.policy.decide`), so a framework
run stops where, why and with the message an ``AgentLoop`` run would.

Hooks of an adapter must never break the framework: wrap each framework callback
in :func:`shielded`, which logs and swallows anything but :class:`RunStopped`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import uuid
import warnings
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from loopobs.contract import hashing
from loopobs.contract.errors import (
    Cancelled,
    LoopDetected,
    LoopError,
    ModelError,
    ToolError,
    ToolExecutionError,
)
from loopobs.contract.events import (
    ResponseContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    ToolCallReceivedContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
    Usage,
)
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.contract.token_counts import plausible_usage
from loopobs.cost.budget import Spend
from loopobs.cost.pricing import PriceLookup, PricesArg, price_lookup, safe_cost
from loopobs.cost.spending import BudgetGuard
from loopobs.loop.policy import RunPolicy, Stop

__all__ = [
    "AdapterRun",
    "RunStopped",
    "RunTracker",
    "StopPolicy",
    "FrameworkToolCall",
    "model_error",
    "shielded",
    "token_count",
    "tool_error",
]

logger = logging.getLogger("loopobs.adapters")

_now_ns = time.time_ns
_perf = time.perf_counter

_MAX_SESSIONS = 4096
"""Sessions whose next turn number a tracker remembers; the least recently used go first."""

_LOG_INTERVAL_S = 60.0

_F = TypeVar("_F", bound=Callable[..., Any])


class RunStopped(LoopDetected):
    """The loop policy stopped a framework run: raised into the framework by its adapter.

    Raised from a framework hook (a callback, a processor, a guard) where the
    framework lets exceptions through, so it ends the framework's run and reaches
    the code that started it. ``status`` says why, as a
    :class:`~loopobs.contract.events.RunStatus` value the run ends with:
    ``loop_detected`` (a runaway tool loop), ``converged`` (the same answer again
    and again), or the one a guard stops with (a value the contract does not know
    ends the run ``failed``); ``pattern`` names what repeated. Catch it as
    :class:`~loopobs.contract.errors.LoopDetected` or :class:`~loopobs.contract.errors.LoopError`.
    """

    _fields: ClassVar[tuple[str, ...]] = ("pattern", "status")

    def __init__(
        self, message: str = "", *, pattern: str = "", status: str = "loop_detected"
    ) -> None:
        super().__init__(message or f"stopped: {pattern}", pattern=pattern)
        self.status = status

    @classmethod
    def of(cls, stop: Stop) -> RunStopped:
        """The exception for a stop the policy decided: its message, pattern and status."""
        return cls(stop.message, pattern=stop.pattern, status=stop.status.value)


@dataclass(frozen=True, slots=True)
class FrameworkToolCall:
    """A tool call the model asked for, as the adapter read it from the response."""

    id: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


# -- token counts ---------------------------------------------------------------------------


def token_count(value: Any) -> Any:
    """A framework's token count, ready for :class:`~loopobs.contract.events.Usage`.

    ``None`` (not reported) is 0, an integral float its ``int``; anything else is
    returned unchanged, so :meth:`AdapterRun.model_end` refuses it as implausible
    (a NaN, an infinity, a fraction, a string) and counts it, as it does a negative
    or absurd ``int``, instead of an ``int()`` raising in the framework's hook.
    """
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# -- errors ---------------------------------------------------------------------------------


def _cancelled(error: BaseException) -> bool:
    return isinstance(error, (asyncio.CancelledError, KeyboardInterrupt, Cancelled))


def model_error(error: BaseException | None, provider: str | None = None) -> LoopError:
    """What a failed model call reports: its own ``LoopError``, ``Cancelled`` or ``ModelError``."""
    if isinstance(error, LoopError):
        return error
    if error is None:
        return ModelError("the model call failed", provider=provider or None)
    if _cancelled(error):
        return Cancelled("the model call was cancelled")
    return ModelError(f"{type(error).__name__}: {error}", provider=provider or None)


def tool_error(error: BaseException | None, tool: str) -> ToolError | Cancelled:
    """What a failed tool reports: its ``ToolError``, ``Cancelled`` or ``ToolExecutionError``."""
    if isinstance(error, (ToolError, Cancelled)):
        return error
    if error is None:
        return ToolExecutionError("the tool failed", tool=tool, error_type="Error")
    if _cancelled(error):
        return Cancelled("the tool call was cancelled")
    return ToolExecutionError(
        f"{type(error).__name__}: {error}", tool=tool, error_type=type(error).__name__
    )


def _run_error(error: BaseException) -> LoopError:
    if isinstance(error, LoopError):
        return error
    if _cancelled(error):
        return Cancelled("the run was cancelled")
    return LoopError(f"{type(error).__name__}: {error}")


# -- the policy -------------------------------------------------------------------------------


class StopPolicy(RunPolicy):
    """The stop policy of an adapter's runs: :class:`~loopobs.loop.policy.RunPolicy`, whose
    stops are raised into the framework as :class:`RunStopped`.

    Verdicts arrive as ``on_loop_detected`` / ``on_convergence_detected`` (detectors)
    and ``on_budget_exceeded`` (a :class:`~loopobs.cost.spending.BudgetGuard` among the
    tracker's detectors) and are decided by :func:`loopobs.loop.policy.decide`, as for
    ``AgentLoop``: the same stops, statuses and messages. Notes and compaction, which a
    framework run cannot take, are dropped. Other guards call :meth:`stop` directly.
    The first stop of a run wins; the adapter raises it into the framework.
    """

    name = "loopobs.adapter_policy"

    def __init__(self) -> None:
        super().__init__()
        self._raised: dict[uuid.UUID, RunStopped] = {}

    def watch(self, run_id: uuid.UUID) -> None:
        """Start taking verdicts for ``run_id``."""
        self.open(run_id)

    def forget(self, run_id: uuid.UUID) -> None:
        """Stop taking verdicts for ``run_id`` (it ended)."""
        self.close(run_id)
        self._raised.pop(run_id, None)

    def stop(self, run_id: uuid.UUID, error: RunStopped) -> None:
        """Stop ``run_id`` with ``error``, unless it is already stopped or not watched."""
        if self.stop_of(run_id) is not None:
            return
        self.impose(run_id, Stop(_status(error.status), error, error.pattern))
        decided = self.stop_of(run_id)
        if decided is not None and decided.error is error:
            self._raised.setdefault(run_id, error)

    def stopped(self, run_id: uuid.UUID) -> RunStopped | None:
        """The stop decided for ``run_id``, as the exception to raise, if any."""
        raised = self._raised.get(run_id)
        if raised is not None:
            return raised
        stop = self.stop_of(run_id)
        if stop is None:
            return None
        return self._raised.setdefault(run_id, RunStopped.of(stop))


def _default_detectors() -> list[LoopObserver]:
    from loopobs.detectors import ConvergenceDetector, RepetitionDetector

    return [RepetitionDetector(), ConvergenceDetector()]


class RunTracker:
    """The observers, detectors and stop policy an adapter feeds; shared by all its runs.

    Args:
        observers: observers to attach (see :attr:`observers`).
        detectors: observers whose verdicts can stop a run; ``None`` means the
            default :class:`~loopobs.detectors.RepetitionDetector` and
            :class:`~loopobs.detectors.ConvergenceDetector` (as ``AgentLoop``),
            ``[]`` none. A detector built with ``stop_after=0`` / ``action="warn"``
            only reports.
        agent: the agent name runs report when the framework gives none.
        prices: how model calls are priced, as ``AgentLoop(prices=...)``: None for
            ``genai-prices`` (when installed; else every cost is unknown), a mapping
            of model → rates, a function or a ``PriceLookup``.

    Thread-safe: runs may start and end concurrently on any thread or task.
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
    ) -> None:
        self.agent = agent
        self.prices: PriceLookup = price_lookup(prices)
        """How model calls are priced (``cost_usd`` on the contexts), as for ``AgentLoop``."""
        self._observers = ObserverSet(observers)
        # Detectors after the user's observers: every user observer has seen an event
        # before a detector reacts to it, and the verdicts reach everyone.
        self.receivers = ObserverSet([self._observers])
        """Everyone an event goes to: the user's observers, then the detectors, then the policy."""
        self.detectors = tuple(_default_detectors() if detectors is None else detectors)
        for detector in self.detectors:
            self.receivers.add(detector)
        self.guards = tuple(d for d in self.detectors if isinstance(d, BudgetGuard))
        """The budget guards among the detectors, asked before each model call."""
        self.policy = StopPolicy()
        self.receivers.add(self.policy)
        self._lock = threading.Lock()
        self._turns: OrderedDict[uuid.UUID, int] = OrderedDict()
        self._active: dict[uuid.UUID, AdapterRun] = {}
        self._rejected_token_counts = 0

    @property
    def observers(self) -> ObserverSet:
        """The user's observers; attach and detach at any time, also while runs go on."""
        return self._observers

    @property
    def emit(self) -> ObserverSet:
        """Deprecated: :attr:`receivers` (``emit`` is the verb of ``ObserverSet.emit``)."""
        warnings.warn(
            "RunTracker.emit is RunTracker.receivers; the old name goes away in loopobs 0.3",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.receivers

    def attach(self, observer: LoopObserver) -> None:
        """Add an observer; it receives events from the next one emitted."""
        self._observers.add(observer)

    def detach(self, observer: LoopObserver) -> None:
        """Remove an observer."""
        self._observers.remove(observer)

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended (0 when nothing is left open)."""
        return len(self._active)

    @property
    def rejected_token_counts(self) -> int:
        """Token counts the framework reported that were implausible and treated as unknown.

        The model clients' rules (:mod:`loopobs.contract.token_counts`): not an
        ``int``, negative, or above ``MAX_TOKEN_COUNT``; each call that had any is
        also logged (``loopobs.usage``).
        """
        return self._rejected_token_counts

    def _rejected(self, count: int) -> None:
        with self._lock:
            self._rejected_token_counts += count

    def start_run(
        self,
        *,
        agent: str | None = None,
        model: str = "",
        session_id: uuid.UUID | None = None,
        instructions: str = "",
        query: str = "",
        resumed_from: uuid.UUID | None = None,
        time_ns: int | None = None,
        branch_of: AdapterRun | None = None,
    ) -> AdapterRun:
        """Begin a run: emits ``on_run_start`` and returns the run to report into.

        ``session_id`` ties runs of one conversation together (turn numbers keep
        counting across them); ``None`` makes a fresh session. ``query`` is the
        user's latest message, reported on each turn start (content).

        ``branch_of`` reports a parallel branch of a running run as a run of its own
        that is still part of it: it joins that run's session, counts against its
        budgets (the budget guards are told before ``on_run_start``), and is stopped
        when that run is.
        """
        if branch_of is not None:
            session_id = branch_of.session_id
        return AdapterRun(
            self,
            agent=agent or self.agent,
            model=model,
            session_id=session_id or uuid.uuid4(),
            instructions=instructions,
            query=query,
            resumed_from=resumed_from,
            time_ns=time_ns,
            branch_of=branch_of,
        )

    # -- used by AdapterRun ----------------------------------------------------------------
    def _next_turn(self, session_id: uuid.UUID) -> int:
        with self._lock:
            turn = self._turns.pop(session_id, 0)
            self._turns[session_id] = turn + 1
            if len(self._turns) > _MAX_SESSIONS:
                self._turns.popitem(last=False)
        return turn

    def _opened(self, run: AdapterRun) -> None:
        with self._lock:
            self._active[run.run_id] = run
        self.policy.watch(run.run_id)

    def _closed(self, run: AdapterRun) -> None:
        with self._lock:
            self._active.pop(run.run_id, None)
        self.policy.forget(run.run_id)


# -- one run --------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Stream:
    model: str
    provider: str
    attempt: int
    started_ns: int
    started: float
    first: float | None = None


@dataclass(slots=True, eq=False)
class _Tool:
    tool: str
    call_id: str
    attempt: int
    started_ns: int
    started: float


@dataclass(slots=True, eq=False)
class _Turn:
    number: int
    started_ns: int
    started: float
    attempts: int = 0
    answered: bool = False
    tools_ran: bool = False
    usage: Usage | None = None
    cost_usd: float | None = 0.0
    error: LoopError | None = None


def _duration_ms(start_ns: int, start_perf: float, at: int | None) -> float:
    if at is not None:
        return max(0.0, (at - start_ns) / 1e6)
    return (_perf() - start_perf) * 1000.0


class AdapterRun:
    """One framework run, reported as one run of the event contract.

    Created by :meth:`RunTracker.start_run` (which emits ``on_run_start``). Every
    method is thread-safe and never raises for the framework's sake: events for
    unknown keys, or after :meth:`end`, are ignored. Methods take an optional
    ``time_ns`` (when the framework reports the event after the fact, as span
    processors do); durations are then measured between the given times.
    """

    def __init__(
        self,
        tracker: RunTracker,
        *,
        agent: str,
        model: str,
        session_id: uuid.UUID,
        instructions: str,
        query: str,
        resumed_from: uuid.UUID | None,
        time_ns: int | None,
        branch_of: AdapterRun | None = None,
    ) -> None:
        self.tracker = tracker
        self.run_id = uuid.uuid4()
        self.branch_of = branch_of
        """The run this one is a parallel branch of (see :meth:`RunTracker.start_run`)."""
        self.session_id = session_id
        self.agent = agent
        self.model = model
        self.query = query
        self.usage = Usage()
        """Token usage summed over the run's successful model calls."""
        self.spend = Spend()
        """What the run used: tokens, priced dollars and unpriced calls."""
        self.turns = 0
        """Turns this run took so far."""
        self._lock = threading.RLock()
        self._ended = False
        self._turn: _Turn | None = None
        self._stream_key: Hashable | None = None
        self._stream: _Stream | None = None
        self._tools: dict[Hashable, _Tool] = {}
        self._attempts: dict[str, int] = {}
        self._received: set[str] = set()
        self._started_ns = time_ns if time_ns is not None else _now_ns()
        self._started = _perf()
        tracker._opened(self)
        if branch_of is not None:
            for guard in tracker.guards:
                guard.branch(self.run_id, of=branch_of.run_id)
        em = tracker.receivers
        if em.listens("on_run_start"):
            em.on_run_start(
                RunStartContext(
                    run_id=self.run_id,
                    time_ns=self._started_ns,
                    session_id=session_id,
                    agent=agent,
                    model=model,
                    resumed_from=resumed_from,
                    instructions=instructions,
                )
            )

    # -- state -----------------------------------------------------------------------------
    @property
    def ended(self) -> bool:
        """Whether :meth:`end` has run."""
        return self._ended

    @property
    def turn(self) -> int | None:
        """The open turn's number, or None between turns."""
        turn = self._turn
        return turn.number if turn is not None else None

    @property
    def busy(self) -> bool:
        """A model call or a tool of this run is in flight: another model call cannot join it.

        An adapter seeing a second model call while this is true (parallel branches
        of one graph) reports that call in a run of its own.
        """
        return self._stream is not None or bool(self._tools)

    @property
    def stopped(self) -> RunStopped | None:
        """The stop the policy decided for this run (or the run it is a branch of), if any."""
        policy = self.tracker.policy
        stop = policy.stopped(self.run_id)
        if stop is None and self.branch_of is not None:
            stop = policy.stopped(self.branch_of.run_id)
            if stop is not None:
                policy.stop(self.run_id, stop)
        return stop

    def raise_if_stopped(self) -> None:
        """Raise the run's :class:`RunStopped` if the policy stopped it.

        Call it from a framework hook that propagates exceptions into the run.
        """
        stop = self.stopped
        if stop is not None and not self._ended:
            raise stop

    def stop(self, error: RunStopped) -> None:
        """Stop this run (for guards other than the detectors); the adapter raises it next."""
        self.tracker.policy.stop(self.run_id, error)

    def before_model_call(self, *, model: str = "", provider: str = "") -> None:
        """Call before a model call the adapter can still prevent.

        Budget guards among the tracker's detectors check one more call (the
        request's size is unknown to an adapter: the model call itself, the wall
        time, and what was used so far count); then, like :meth:`raise_if_stopped`,
        raises the run's :class:`RunStopped` if it is stopped, so the call is not made.
        """
        if self._ended:
            return
        for guard in self.tracker.guards:
            guard.before_call(self.run_id, model or self.model, provider, Usage())
        self.raise_if_stopped()

    # -- turns -----------------------------------------------------------------------------
    def _open_turn(self, at: int | None) -> _Turn:
        """Open a new turn (ending the current one); lock held."""
        if self._turn is not None:
            self._close_turn(at)
        turn = _Turn(
            self.tracker._next_turn(self.session_id), at if at is not None else _now_ns(), _perf()
        )
        self._turn = turn
        em = self.tracker.receivers
        if em.listens("on_turn_start"):
            em.on_turn_start(
                TurnStartContext(
                    run_id=self.run_id, time_ns=turn.started_ns, turn=turn.number, query=self.query
                )
            )
        return turn

    def _close_turn(self, at: int | None, error: LoopError | None = None) -> None:
        """End the open turn: open tools and the stream first; lock held."""
        turn = self._turn
        if turn is None:
            return
        # What is still in flight was abandoned by the framework: it ends cancelled.
        for key in list(self._tools):
            self._end_tool(key, None, Cancelled("the turn ended before the tool call"), at)
        if self._stream is not None:
            self._fail_stream(Cancelled("the turn ended before the model call"), at)
        self._turn = None
        self.turns += 1
        error = error or turn.error
        em = self.tracker.receivers
        if em.listens("on_turn_end"):
            usage = turn.usage
            em.on_turn_end(
                TurnEndContext(
                    run_id=self.run_id,
                    time_ns=at if at is not None else _now_ns(),
                    turn=turn.number,
                    success=error is None,
                    error=error,
                    duration_ms=_duration_ms(turn.started_ns, turn.started, at),
                    input_tokens=usage.input_tokens if usage else 0,
                    output_tokens=usage.output_tokens if usage else 0,
                    cost_usd=turn.cost_usd if turn.answered else 0.0,
                )
            )

    def end_turn(self, *, error: BaseException | None = None, time_ns: int | None = None) -> None:
        """End the open turn now (adapters that know turn boundaries); no-op between turns."""
        with self._lock:
            if not self._ended:
                self._close_turn(time_ns, _run_error(error) if error is not None else None)

    # -- model calls -----------------------------------------------------------------------
    def model_start(
        self,
        key: Hashable,
        *,
        model: str = "",
        provider: str = "",
        time_ns: int | None = None,
        stream: bool | None = None,
    ) -> bool:
        """A model call begins: ``on_stream_start`` (and ``on_turn_start`` for a new turn).

        ``stream`` says whether the framework asked for a streamed response (None: not
        known yet; :meth:`model_end` / :meth:`model_error` can say it then).

        A call opens a new turn unless the open turn has not had its response yet
        (then it is the turn's next attempt: a retry or a fallback). Returns False,
        emitting nothing, when another model call or a tool of this run is in
        flight (see :attr:`busy`) or the run has ended.
        """
        with self._lock:
            if self._ended or self.busy:
                return False
            turn = self._turn
            if turn is None or turn.answered or turn.tools_ran:
                turn = self._open_turn(time_ns)
            model = model or self.model
            current = _Stream(
                model,
                provider,
                turn.attempts,
                time_ns if time_ns is not None else _now_ns(),
                _perf(),
            )
            turn.attempts += 1
            self._stream_key, self._stream = key, current
            em = self.tracker.receivers
            if em.listens("on_stream_start"):
                em.on_stream_start(
                    StreamStartContext(
                        run_id=self.run_id,
                        time_ns=current.started_ns,
                        turn=turn.number,
                        model=model,
                        provider=provider,
                        attempt=current.attempt,
                        stream=stream,
                    )
                )
            return True

    def text_delta(self, key: Hashable, delta: str, *, time_ns: int | None = None) -> None:
        """A chunk of visible text of the model call ``key``."""
        with self._lock:
            stream, turn = self._stream, self._turn
            if stream is None or self._stream_key != key or turn is None or not delta:
                return
            if stream.first is None:
                stream.first = _perf()
            em = self.tracker.receivers
            if em.listens("on_text_delta"):
                em.on_text_delta(
                    TextDeltaContext(
                        run_id=self.run_id,
                        time_ns=time_ns if time_ns is not None else _now_ns(),
                        turn=turn.number,
                        delta=delta,
                    )
                )

    def thinking_delta(self, key: Hashable, delta: str, *, time_ns: int | None = None) -> None:
        """A chunk of reasoning of the model call ``key`` (``""``: redacted)."""
        with self._lock:
            stream, turn = self._stream, self._turn
            if stream is None or self._stream_key != key or turn is None:
                return
            if stream.first is None:
                stream.first = _perf()
            em = self.tracker.receivers
            if em.listens("on_thinking_delta"):
                em.on_thinking_delta(
                    ThinkingDeltaContext(
                        run_id=self.run_id,
                        time_ns=time_ns if time_ns is not None else _now_ns(),
                        turn=turn.number,
                        delta=delta,
                    )
                )

    def model_end(
        self,
        key: Hashable,
        *,
        usage: Usage | None = None,
        text: str = "",
        tool_calls: Sequence[FrameworkToolCall] = (),
        finish_reason: str | None = None,
        response_id: str | None = None,
        response_model: str | None = None,
        time_to_first_token_ms: float | None = None,
        time_ns: int | None = None,
        stream: bool | None = None,
    ) -> None:
        """The model call ``key`` succeeded.

        Emits ``on_stream_success`` (with ``usage`` as reported, but for implausible
        counts: as the model clients do, a count that is not an ``int``, is negative
        or absurd is unknown, 0, and counted in :attr:`RunTracker.rejected_token_counts`;
        the call's cost is then unknown too; ``usage=None``, none reported, is unknown:
        ``usage_reported=False``), ``on_response`` and one ``on_tool_call_received``
        per call, in order. ``stream`` says whether the response came streamed, when
        the framework let that be known only now.
        """
        with self._lock:
            current, turn = self._stream, self._turn
            if current is None or self._stream_key != key or turn is None:
                return
            self._stream_key, self._stream = None, None
            rejected = 0
            if usage is not None:
                usage, rejected = plausible_usage(usage)
                if rejected:
                    self.tracker._rejected(rejected)
            at = time_ns if time_ns is not None else _now_ns()
            u = usage or Usage()
            cost = None
            if usage is not None:
                self.usage = self.usage + usage
                if not rejected:
                    cost = safe_cost(
                        self.tracker.prices,
                        current.model,
                        current.provider,
                        usage,
                        response_model=response_model,
                    )
            self.spend.add_call(usage, cost)
            turn.answered, turn.usage, turn.cost_usd, turn.error = True, usage, cost, None
            em = self.tracker.receivers
            if time_to_first_token_ms is None and current.first is not None:
                time_to_first_token_ms = (current.first - current.started) * 1000.0
            if em.listens("on_stream_success"):
                em.on_stream_success(
                    StreamSuccessContext(
                        run_id=self.run_id,
                        time_ns=at,
                        turn=turn.number,
                        model=current.model,
                        input_tokens=u.input_tokens,
                        output_tokens=u.output_tokens,
                        provider=current.provider,
                        attempt=current.attempt,
                        duration_ms=_duration_ms(current.started_ns, current.started, time_ns),
                        time_to_first_token_ms=time_to_first_token_ms,
                        finish_reason=finish_reason,
                        response_id=response_id,
                        response_model=response_model,
                        cache_read_input_tokens=u.cache_read_input_tokens,
                        cache_write_input_tokens=u.cache_write_input_tokens,
                        reasoning_output_tokens=u.reasoning_output_tokens,
                        cost_usd=cost,
                        usage_reported=usage is not None,
                        stream=stream,
                    )
                )
            if em.listens("on_response"):
                em.on_response(
                    ResponseContext(
                        run_id=self.run_id,
                        time_ns=at,
                        turn=turn.number,
                        text=text,
                        usage=usage,
                        tool_calls=len(tool_calls),
                    )
                )
            listens = em.listens("on_tool_call_received")
            for call in tool_calls:
                # A new response's call is a new call, even if a model reuses an id.
                self._attempts.pop(call.id, None)
            for call in tool_calls:
                self._received.add(call.id)
                if listens:
                    em.on_tool_call_received(
                        ToolCallReceivedContext(
                            run_id=self.run_id,
                            time_ns=at,
                            turn=turn.number,
                            tool=call.name,
                            tool_call_id=call.id,
                            input=call.arguments,
                        )
                    )

    def model_error(
        self,
        key: Hashable,
        error: BaseException | None = None,
        *,
        time_ns: int | None = None,
        stream: bool | None = None,
    ) -> None:
        """The model call ``key`` failed (cancellation included): ``on_stream_failure``."""
        with self._lock:
            if self._stream is None or self._stream_key != key:
                return
            self._fail_stream(model_error(error, self._stream.provider), time_ns, stream)

    def _fail_stream(self, error: LoopError, at: int | None, streamed: bool | None = None) -> None:
        stream, turn = self._stream, self._turn
        self._stream_key, self._stream = None, None
        if stream is None or turn is None:
            return
        turn.error = error
        em = self.tracker.receivers
        if em.listens("on_stream_failure"):
            em.on_stream_failure(
                StreamFailureContext(
                    run_id=self.run_id,
                    time_ns=at if at is not None else _now_ns(),
                    turn=turn.number,
                    model=stream.model,
                    error=error,
                    provider=stream.provider,
                    attempt=stream.attempt,
                    duration_ms=_duration_ms(stream.started_ns, stream.started, at),
                    stream=streamed,
                )
            )

    # -- tools -----------------------------------------------------------------------------
    def tool_start(
        self,
        key: Hashable,
        *,
        tool: str,
        call_id: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        time_ns: int | None = None,
    ) -> None:
        """A tool call attempt begins: ``on_tool_pre``.

        ``call_id`` is the model's id for the call (``str(key)`` when the framework
        has none). A call the model's response did not list gets its
        ``on_tool_call_received`` (with ``arguments``) first. A call id already
        seen in this run is the next attempt of that call.
        """
        with self._lock:
            if self._ended or key in self._tools:
                return
            turn = self._turn
            if turn is None:
                turn = self._open_turn(time_ns)
            turn.tools_ran = True
            cid = call_id if call_id else str(key)
            at = time_ns if time_ns is not None else _now_ns()
            em = self.tracker.receivers
            if cid not in self._received:
                self._received.add(cid)
                if em.listens("on_tool_call_received"):
                    em.on_tool_call_received(
                        ToolCallReceivedContext(
                            run_id=self.run_id,
                            time_ns=at,
                            turn=turn.number,
                            tool=tool,
                            tool_call_id=cid,
                            input=dict(arguments or {}),
                        )
                    )
            attempt = self._attempts.get(cid, 0)
            self._attempts[cid] = attempt + 1
            self._tools[key] = _Tool(tool, cid, attempt, at, _perf())
            if em.listens("on_tool_pre"):
                em.on_tool_pre(
                    ToolPreContext(
                        run_id=self.run_id,
                        time_ns=at,
                        turn=turn.number,
                        tool=tool,
                        tool_call_id=cid,
                        attempt=attempt,
                    )
                )

    def tool_end(
        self,
        key: Hashable,
        *,
        result: str | None = None,
        error: BaseException | None = None,
        time_ns: int | None = None,
    ) -> None:
        """The tool call attempt ``key`` ended: ``on_tool_post`` with its result or error.

        Detectors judge the call here; a stop they decide is raised by the adapter
        (:meth:`raise_if_stopped`), not by this method.
        """
        with self._lock:
            item = self._tools.get(key)
            if item is None:
                return
            err = tool_error(error, item.tool) if error is not None else None
            self._end_tool(key, result, err, time_ns)

    def _end_tool(
        self, key: Hashable, result: str | None, error: ToolError | Cancelled | None, at: int | None
    ) -> None:
        item = self._tools.pop(key, None)
        turn = self._turn
        if item is None or turn is None:
            return
        em = self.tracker.receivers
        if not em.listens("on_tool_post"):
            return
        text = result if error is None else (result or f"Error: {error}")
        em.on_tool_post(
            ToolPostContext(
                run_id=self.run_id,
                time_ns=at if at is not None else _now_ns(),
                tool_call_id=item.call_id,
                turn=turn.number,
                tool=item.tool,
                result_hash=hashing.result_hash(text) if text else None,
                is_error=error is not None,
                duration_ms=_duration_ms(item.started_ns, item.started, at),
                attempt=item.attempt,
                outcome="error" if error is not None else "output",
                error=error,
                result=text,
            )
        )

    # -- the end ---------------------------------------------------------------------------
    def end(
        self,
        *,
        error: BaseException | None = None,
        status: RunStatus | str | None = None,
        time_ns: int | None = None,
    ) -> None:
        """End the run: close what is open, emit ``on_run_end``. Only the first call counts.

        ``status`` defaults to ``completed`` without ``error``, the stop's status
        for a :class:`RunStopped` (or when the policy stopped the run and the
        framework ended with another error), ``cancelled`` for cancellation, and
        ``failed`` otherwise.
        """
        with self._lock:
            if self._ended:
                return
            self._ended = True
            try:
                stop = self.stopped
                err = _run_error(error) if error is not None else None
                if status is None:
                    if isinstance(err, RunStopped):
                        status = err.status
                    elif err is None:
                        status = RunStatus.COMPLETED
                    elif isinstance(err, Cancelled):
                        status = RunStatus.CANCELLED
                    elif stop is not None:
                        status, err = stop.status, stop
                    else:
                        status = RunStatus.FAILED
                final = _status(status)
                self._close_turn(time_ns, err)
                em = self.tracker.receivers
                if em.listens("on_run_end"):
                    em.on_run_end(
                        RunEndContext(
                            run_id=self.run_id,
                            time_ns=time_ns if time_ns is not None else _now_ns(),
                            success=final in _SUCCESS,
                            error=err,
                            total_turns=self.turns,
                            duration_ms=_duration_ms(self._started_ns, self._started, time_ns),
                            status=final,
                            input_tokens=self.usage.input_tokens,
                            output_tokens=self.usage.output_tokens,
                            cost_usd=self.spend.cost_usd,
                        )
                    )
            finally:
                self.tracker._closed(self)


_SUCCESS = frozenset({RunStatus.COMPLETED, RunStatus.SUSPENDED, RunStatus.SLEEPING})


def _status(value: RunStatus | str) -> RunStatus:
    """A run status from its value; a value the contract does not know is ``failed``."""
    try:
        return RunStatus(value)
    except ValueError:
        return RunStatus.FAILED


# -- guarding framework hooks ---------------------------------------------------------------

_last_log: dict[str, float] = {}


def _log_failure(where: str, exc: Exception) -> None:
    now = time.monotonic()
    last = _last_log.get(where)
    if last is not None and now - last < _LOG_INTERVAL_S:
        return
    _last_log[where] = now
    logger.error(
        "loopobs adapter hook %s raised; the framework's run continues",
        where,
        exc_info=(type(exc), exc, exc.__traceback__),
    )


def shielded(fn: _F) -> _F:
    """Wrap a framework hook so that nothing but :class:`RunStopped` escapes it.

    Any other ``Exception`` (a bug of the adapter, data the framework shaped
    unexpectedly) is logged (at most once a minute per hook) and swallowed, so the
    framework's run goes on. ``BaseException`` (cancellation) passes through.
    Works on plain and ``async`` functions.
    """
    where = getattr(fn, "__qualname__", repr(fn))
    if asyncio.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                return await fn(*args, **kwargs)
            except RunStopped:
                raise
            except Exception as exc:
                _log_failure(where, exc)
                return None

        return guarded_async  # type: ignore[return-value]

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except RunStopped:
            raise
        except Exception as exc:
            _log_failure(where, exc)
            return None

    return guarded  # type: ignore[return-value]
