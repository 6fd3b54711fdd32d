"""Observers: :class:`LoopObserver` (every hook a no-op) and :class:`ObserverSet` (fan-out).

Hooks are synchronous and called on the task that emits the event, so they
must be cheap and must not block: exporters buffer and batch. A hook that
raises never reaches the loop: :class:`ObserverSet` logs it (rate-limited),
counts it, and carries on with the next observer. ``BaseException``
(cancellation, ``KeyboardInterrupt``) is never caught. Hooks must be plain
``def``s: an ``async def`` hook is refused when the observer is added, since
its coroutine would never run.

An emitter asks :meth:`ObserverSet.listens` before building a context, so a
hook nobody overrides costs one set lookup::

    if observers.listens("on_tool_pre"):
        observers.on_tool_pre(ToolPreContext(run_id=..., time_ns=time.time_ns(), ...))
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

from loopobs.contract import events as ev
from loopobs.contract.events import HOOKS, EventContext, HookName

if sys.version_info >= (3, 11):  # pragma: no cover - version switch
    from builtins import ExceptionGroup as _ExceptionGroup
else:  # pragma: no cover - version switch
    from exceptiongroup import ExceptionGroup as _ExceptionGroup

__all__ = ["EventSink", "LoopObserver", "ObserverSet", "listened_hooks"]

logger = logging.getLogger("loopobs.observer")

#: Seconds between two log records for the same failing (observer, hook) pair.
LOG_INTERVAL_S = 60.0

# Serialises adding a set into a set, so that the cycle check still holds when the
# insertion happens (two threads nesting A into B and B into A must not both succeed).
# Lock order: _NESTING, then a set's _lock, then its ancestors' _lock (child before parent).
_NESTING = threading.Lock()


class LoopObserver:
    """Base class for observers: every hook does nothing until a subclass overrides it.

    Override only the hooks you need; :class:`ObserverSet` never calls the
    others. All hooks run synchronously on the emitting task, in registration
    order, and must not block. Exceptions a hook raises are isolated by the
    set (logged, counted) and never reach the loop.

    ``name`` identifies the observer in logs and failure counts; it defaults
    to the class name. ``unheard_hooks`` narrows what an instance listens to.
    """

    name: str = "LoopObserver"
    unheard_hooks: frozenset[HookName] = frozenset()
    """Hooks this observer overrides but does not need, as configured (set it in
    ``__init__``, before the observer joins a set): a set never delivers them, and the
    loop builds no context for a hook no member listens to. ``TracingObserver``
    without content capture leaves out the streamed chunks this way."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            cls.name = cls.__name__

    # -- lifecycle -------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Called when this observer is added to ``observers``.

        Observers that emit events themselves (detectors) remember the set here.
        """

    def on_detach(self, observers: ObserverSet) -> None:
        """Called when this observer is removed from ``observers``."""

    def reset(self) -> None:
        """Forget all per-run and per-session state."""

    def force_flush(self, timeout_s: float | None = None) -> bool | None:
        """Export anything buffered; return within ``timeout_s`` when given.

        Return False when something could not be flushed (in time); True or None
        means everything was.
        """
        return None

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush and release resources; the observer receives no events afterwards."""

    # -- runs and turns -------------------------------------------------------------------
    def on_run_start(self, ctx: ev.RunStartContext) -> None:
        """A run begins: first event of every run, exactly one per run."""

    def on_run_end(self, ctx: ev.RunEndContext) -> None:
        """A run ends: last event of every run, exactly once per ``on_run_start``.

        Fires whatever happened (error, cancellation, parking); ``ctx.status`` says which.
        """

    def on_turn_start(self, ctx: ev.TurnStartContext) -> None:
        """A turn begins, before its first model call attempt."""

    def on_turn_end(self, ctx: ev.TurnEndContext) -> None:
        """A turn ends: exactly once per ``on_turn_start``, after its tool phase."""

    # -- model calls ----------------------------------------------------------------------
    def on_stream_start(self, ctx: ev.StreamStartContext) -> None:
        """A model call attempt begins; exactly one success or failure follows."""

    def on_stream_success(self, ctx: ev.StreamSuccessContext) -> None:
        """A model call attempt completed, with its token usage."""

    def on_stream_failure(self, ctx: ev.StreamFailureContext) -> None:
        """A model call attempt failed (``ctx.error``), including cancellation."""

    def on_response(self, ctx: ev.ResponseContext) -> None:
        """The turn's model response is complete: after ``on_stream_success``, before tools."""

    def on_text_delta(self, ctx: ev.TextDeltaContext) -> None:
        """A chunk of visible text arrived; only between stream start and its end."""

    def on_thinking_delta(self, ctx: ev.ThinkingDeltaContext) -> None:
        """A chunk of reasoning arrived (``""`` = redacted); only inside a stream."""

    # -- tools ----------------------------------------------------------------------------
    def on_tool_call_received(self, ctx: ev.ToolCallReceivedContext) -> None:
        """The model asked for a tool call: once per call, in the model's order.

        Fires for unknown tools too, which then get no ``on_tool_pre`` / ``on_tool_post``.
        """

    def on_tool_pre(self, ctx: ev.ToolPreContext) -> None:
        """A tool call attempt begins; calls of one turn may run in parallel."""

    def on_tool_post(self, ctx: ev.ToolPostContext) -> None:
        """A tool call attempt ended: exactly once per ``on_tool_pre``, same id and attempt."""

    # -- loop control ---------------------------------------------------------------------
    def on_compaction(self, ctx: ev.CompactionContext) -> None:
        """The conversation was compacted, before a model call."""

    def on_fallback(self, ctx: ev.FallbackContext) -> None:
        """A retryable failure moves the turn to the next model of the chain."""

    def on_model_switched(self, ctx: ev.ModelSwitchedContext) -> None:
        """The next model call uses a different model than the previous one."""

    def on_loop_detected(self, ctx: ev.LoopDetectedContext) -> None:
        """A repetition detector escalated (once per escalation)."""

    def on_convergence_detected(self, ctx: ev.ConvergenceDetectedContext) -> None:
        """Final answers converged (once per escalation)."""

    def on_suspended(self, ctx: ev.SuspendedContext) -> None:
        """A tool parked the run on a human or signal gate; the run ends ``suspended``."""

    def on_sleep(self, ctx: ev.SleepContext) -> None:
        """A tool parked the run until an instant; the run ends ``sleeping``."""

    def on_context_provider(self, ctx: ev.ContextProviderContext) -> None:
        """A context provider finished (or was skipped) before the turn's model call."""

    def on_backpressure(self, ctx: ev.BackpressureContext) -> None:
        """A session's bounded queue saturated, dropped or rejected an item."""

    def on_session_reset(self, ctx: ev.SessionResetContext) -> None:
        """A session was reset to a new epoch."""

    def on_budget_exceeded(self, ctx: ev.BudgetExceededContext) -> None:
        """A budget limit was crossed (``action="stop"``) or its warning share reached (``"warn"``).

        A run's stop fires once, before the model call it refuses or after the response or
        tool call that crossed; ``AgentLoop`` then ends the run ``budget_exceeded``. Each
        warning fires once per limit; each later run of a stopped session gets the stop too.
        """

    def on_budget_unpriced(self, ctx: ev.BudgetUnpricedContext) -> None:
        """A USD limit met a call to a model with no known price (once per run and scope):
        the limit cannot apply to that call."""

    def on_shared_budget(self, ctx: ev.SharedBudgetContext) -> None:
        """A shared budget's ledger step (reserve, commit, release) ended: its outcome and
        store latency (only for runs with ``shared_budget=``)."""


class EventSink(LoopObserver):
    """An observer that takes every event in one method: override :meth:`on_event`.

    Each hook a subclass does not define itself is bound to its ``on_event`` when
    the class is created, so delivery costs no extra call. Recorders and loggers
    that treat all events alike (the JSONL log, ``RecordingObserver``) are sinks.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for hook in HOOKS:
            if hook not in cls.__dict__:
                setattr(cls, hook, cls.on_event)

    def on_event(self, ctx: EventContext) -> None:
        """Receives every event, whatever its hook (``ctx.hook`` names it)."""


def listened_hooks(observer: LoopObserver) -> frozenset[HookName]:
    """The hooks ``observer`` overrides, less its ``unheard_hooks`` (for a set: the hooks
    any member listens to)."""
    if isinstance(observer, ObserverSet):
        return observer.listening
    cls = type(observer)
    unheard = observer.unheard_hooks
    return frozenset(
        h for h in HOOKS if getattr(cls, h) is not getattr(LoopObserver, h) and h not in unheard
    )


_Dispatch = Callable[[Any], None]
_Hook = TypeVar("_Hook", bound=Callable[..., None])


def _fan_out(declared: _Hook) -> _Hook:
    """The hook ``declared`` on ``ObserverSet`` (by name and context type), as its fan-out.

    The fan-out delivers the context to every member that listens, in registration order,
    on the emitting task and without taking a lock; a member's failure is isolated (see
    :class:`ObserverSet`). The run's start and end also keep the bookkeeping that lets an
    observer removed mid-run still get the rest of the runs it saw start.
    """
    hook: HookName = declared.__name__  # type: ignore[assignment]
    if hook not in HOOKS:
        raise TypeError(f"{hook} is not a hook of the contract")

    def deliver(self: ObserverSet, routes: _Routes, ctx: Any) -> None:
        members, draining = routes
        for fn in members:
            try:
                fn(ctx)
            except (Exception, asyncio.CancelledError) as exc:
                # Hooks are synchronous, so a CancelledError out of one is the observer's
                # own doing (no cancellation reaches sync code): a failure like any other.
                self._failed(fn, hook, exc)
        if draining:
            self._deliver_to_draining(hook, draining, ctx)

    def dispatch(self: ObserverSet, ctx: Any) -> None:
        # deliver(), inlined: this is the hot path. One read of the routes, so a member
        # removed during this dispatch gets the event once.
        members, draining = self._routes[hook]
        for fn in members:
            try:
                fn(ctx)
            except (Exception, asyncio.CancelledError) as exc:
                self._failed(fn, hook, exc)
        if draining:
            self._deliver_to_draining(hook, draining, ctx)

    def dispatch_start(self: ObserverSet, ctx: Any) -> None:
        # Who saw this run start is owed its end, even if removed meanwhile. Recorded with
        # the routes under the lock (once per run), so a concurrent remove() sees either both
        # or neither.
        with self._lock:
            self._runs[ctx.run_id] = self._members
            routes = self._routes[hook]
        deliver(self, routes, ctx)

    def dispatch_end(self: ObserverSet, ctx: Any) -> None:
        with self._lock:
            self._runs.pop(ctx.run_id, None)
            routes = self._routes[hook]
        try:
            deliver(self, routes, ctx)
        finally:
            if self._draining:
                self._run_drained(ctx.run_id)

    chosen = {"on_run_start": dispatch_start, "on_run_end": dispatch_end}.get(hook, dispatch)
    chosen.__name__ = hook
    chosen.__qualname__ = f"ObserverSet.{hook}"
    chosen.__doc__ = f"Deliver ``{hook}`` to every member that listens to it, in order."
    chosen.__annotations__ = declared.__annotations__
    return chosen  # type: ignore[return-value]


_RUN_BOUNDS: frozenset[HookName] = frozenset(("on_run_start", "on_run_end"))
_DrainRoutes = tuple[tuple[_Dispatch, "_Draining"], ...]
_Routes = tuple[tuple[_Dispatch, ...], _DrainRoutes]


@dataclass(eq=False)
class _Draining:
    """A removed observer that still gets the events of the runs it saw start, until they end."""

    observer: LoopObserver
    hooks: frozenset[HookName]
    runs: set[UUID] = field(default_factory=set)


class _FailureLedger:
    """Failure counts and log rate limiting, shared by the sets that count into one place."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}
        self.last_log: dict[tuple[str, str], float] = {}
        self.suppressed: dict[tuple[str, str], int] = {}

    def clear(self) -> None:
        with self.lock:
            self.counts.clear()
            self.last_log.clear()
            self.suppressed.clear()


def _check_hooks_are_sync(observer: LoopObserver) -> None:
    listened = listened_hooks(observer)
    for hook in (h for h in HOOKS if h in listened):
        fn = getattr(observer, hook)
        if inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn):
            raise TypeError(
                f"{observer.name}.{hook} is an async def: hooks are called synchronously on "
                "the emitting task, so its coroutine would never run. Make it a plain def "
                "(hand slow work to a queue or a thread)."
            )


class ObserverSet(LoopObserver):
    """An ordered, thread-safe collection of observers that is itself an observer.

    - Fan-out in registration order; each hook calls only the members that
      override it (subscriber tuples are rebuilt on :meth:`add` / :meth:`remove`,
      copy-on-write, so emitting never takes a lock).
    - Isolation: a member that raises an ``Exception`` (or ``CancelledError``,
      which a synchronous hook can only raise itself) is logged with its name
      and the hook (at most once per :data:`LOG_INTERVAL_S` per pair), counted
      in :attr:`failures`, and the remaining members still get the event.
      ``strict=True`` re-raises instead, for tests.
    - Sets nest: a set added to another set forwards exactly the hooks its
      members listen to, and changes to it propagate to its parents.
    - Detaching is safe mid-run: a removed observer still receives the events
      of every run it saw start, up to and including that run's
      ``on_run_end``, so it never holds an open span or a half-counted run.
      (A set that listens to ``on_run_start`` also listens to ``on_run_end``
      for this bookkeeping.)
    - ``count_failures_in=other`` counts this set's failures in ``other``'s
      :attr:`failures` (both report the same counts): a loop that keeps
      its own observers (detectors) in a set around the user's gives one
      failure count for all of them.
    """

    name = "ObserverSet"

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        strict: bool = False,
        count_failures_in: ObserverSet | None = None,
    ) -> None:
        self.strict = strict
        self._lock = threading.RLock()
        self._members: tuple[LoopObserver, ...] = ()
        # Per hook: the members' bound hooks, and the draining (removed) observers' ones.
        self._routes: dict[str, tuple[tuple[_Dispatch, ...], _DrainRoutes]] = dict.fromkeys(
            HOOKS, ((), ())
        )
        self._listening: frozenset[HookName] = frozenset()
        self._parents: weakref.WeakSet[ObserverSet] = weakref.WeakSet()
        self._parents_lock = threading.Lock()  # a leaf lock: nothing is acquired under it
        self._ledger: _FailureLedger = (
            count_failures_in._ledger if count_failures_in is not None else _FailureLedger()
        )
        # Open runs, each with the members it started with (tuples are shared, not copied).
        self._runs: dict[UUID, tuple[LoopObserver, ...]] = {}
        self._draining: tuple[_Draining, ...] = ()
        for obs in observers:
            self.add(obs)

    # -- membership ------------------------------------------------------------------------
    @property
    def members(self) -> tuple[LoopObserver, ...]:
        """The observers, in registration order."""
        return self._members

    @property
    def listening(self) -> frozenset[HookName]:
        """The hooks at least one member listens to."""
        return self._listening

    def listens(self, hook: HookName) -> bool:
        """Whether any member listens to ``hook``: ask before building a context."""
        return hook in self._listening

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[LoopObserver]:
        return iter(self._members)

    def __contains__(self, observer: object) -> bool:
        return any(m is observer for m in self._members)

    def add(self, observer: LoopObserver) -> None:
        """Append ``observer``; safe while other threads and tasks emit.

        Raises:
            TypeError: ``observer`` is not a :class:`LoopObserver`, or one of its hooks
                is an ``async def``.
            ValueError: adding it would make a set contain itself.
        """
        if not isinstance(observer, LoopObserver):
            raise TypeError(f"observers must be LoopObserver instances, got {type(observer)!r}")
        if not isinstance(observer, ObserverSet):
            _check_hooks_are_sync(observer)
        if isinstance(observer, ObserverSet):
            with _NESTING:
                if observer._contains_set(self):
                    raise ValueError("an ObserverSet cannot contain itself")
                with self._lock:
                    self._members = (*self._members, observer)
                    with observer._parents_lock:
                        observer._parents.add(self)
                    self._stop_draining(observer)
                    self._rebuild()
        else:
            with self._lock:
                self._members = (*self._members, observer)
                self._stop_draining(observer)
                self._rebuild()
        observer.on_attach(self)

    def remove(self, observer: LoopObserver) -> None:
        """Remove ``observer`` (its first occurrence); safe while others emit.

        ``on_detach`` is called at once. Runs the observer saw start keep
        reaching it until each has ended (their events only); new runs do not.
        Adding it again before then makes it a full member again.

        Raises:
            ValueError: ``observer`` is not a member.
        """
        with self._lock:
            members = list(self._members)
            for i, m in enumerate(members):
                if m is observer:
                    del members[i]
                    break
            else:
                raise ValueError(f"{observer.name} is not in this ObserverSet")
            self._members = tuple(members)
            if isinstance(observer, ObserverSet) and observer not in self._members:
                with observer._parents_lock:
                    observer._parents.discard(self)
            if observer not in self._members:
                owed = {
                    run_id
                    for run_id, started_with in self._runs.items()
                    if any(m is observer for m in started_with)
                }
                hooks = listened_hooks(observer)
                if owed and hooks:
                    self._draining = (*self._draining, _Draining(observer, hooks, owed))
            self._rebuild()
        observer.on_detach(self)

    def _stop_draining(self, observer: LoopObserver) -> None:
        """A removed observer added again is a member: it gets every event from now on."""
        if any(d.observer is observer for d in self._draining):
            self._draining = tuple(d for d in self._draining if d.observer is not observer)

    def _deliver_to_draining(self, hook: str, draining: _DrainRoutes, ctx: Any) -> None:
        run_id = ctx.run_id
        for fn, drain in draining:
            if run_id in drain.runs:
                try:
                    fn(ctx)
                except (Exception, asyncio.CancelledError) as exc:
                    self._failed(fn, hook, exc)

    def _run_drained(self, run_id: UUID) -> None:
        with self._lock:
            for drain in self._draining:
                drain.runs.discard(run_id)
            if any(not d.runs for d in self._draining):
                self._draining = tuple(d for d in self._draining if d.runs)
                self._rebuild()

    def _contains_set(self, target: ObserverSet) -> bool:
        if self is target:
            return True
        return any(isinstance(m, ObserverSet) and m._contains_set(target) for m in self._members)

    def _rebuild(self) -> None:
        heard = [(m, listened_hooks(m)) for m in self._members]
        routes: dict[str, tuple[tuple[_Dispatch, ...], _DrainRoutes]] = {
            hook: (
                tuple(getattr(m, hook) for m, hooks in heard if hook in hooks),
                tuple((getattr(d.observer, hook), d) for d in self._draining if hook in d.hooks),
            )
            for hook in HOOKS
        }
        self._routes = routes
        listening = frozenset(h for h in HOOKS if routes[h][0] or routes[h][1])
        # A run whose start was delivered is tracked until its end, so that a member
        # removed meanwhile can still be given the rest of it.
        tracking = "on_run_start" in listening or self._draining
        self._listening = listening | _RUN_BOUNDS if tracking else listening
        with self._parents_lock:
            parents = list(self._parents)
        for parent in parents:
            with parent._lock:
                parent._rebuild()

    # -- failure isolation ------------------------------------------------------------------
    @property
    def failures(self) -> Mapping[tuple[str, str], int]:
        """How many times each (observer name, hook) raised, since creation or :meth:`reset`.

        Includes the failures of sets created with ``count_failures_in=self``.
        """
        with self._ledger.lock:
            return dict(self._ledger.counts)

    @property
    def failure_count(self) -> int:
        """Total observer failures counted by this set."""
        return sum(self.failures.values())

    def _failed(self, fn: _Dispatch, hook: str, exc: BaseException) -> None:
        if self.strict:
            raise exc
        owner = getattr(fn, "__self__", None)
        name = owner.name if isinstance(owner, LoopObserver) else repr(fn)
        key = (name, hook)
        ledger = self._ledger
        with ledger.lock:
            ledger.counts[key] = ledger.counts.get(key, 0) + 1
            now = time.monotonic()
            last = ledger.last_log.get(key)
            if last is not None and now - last < LOG_INTERVAL_S:
                ledger.suppressed[key] = ledger.suppressed.get(key, 0) + 1
                return
            ledger.last_log[key] = now
            suppressed = ledger.suppressed.pop(key, 0)
        more = f" ({suppressed} similar failures not logged)" if suppressed else ""
        logger.error(
            "observer %s raised in %s; the run continues%s",
            name,
            hook,
            more,
            exc_info=(type(exc), exc, exc.__traceback__),
        )

    # -- lifecycle --------------------------------------------------------------------------
    def _call_all(self, method: str, *args: Any, extra: Iterable[LoopObserver] = ()) -> None:
        errors: list[Exception] = []
        for m in (*self._members, *extra):
            try:
                getattr(m, method)(*args)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise _ExceptionGroup(f"{len(errors)} observer(s) failed in {method}", errors)

    def reset(self) -> None:
        """Reset every member (and removed ones still draining) and the failure counts.

        Open runs are forgotten: removed observers stop receiving their events.
        Failures are reported together.
        """
        self._ledger.clear()
        with self._lock:
            draining = [d.observer for d in self._draining]
            self._draining = ()
            self._runs.clear()
            self._rebuild()
        self._call_all("reset", extra=draining)

    def force_flush(self, timeout_s: float | None = None) -> bool:
        """Flush every member within one shared ``timeout_s``; True if everything flushed.

        Each member gets what is left of the deadline (0 once it has passed, so a
        late member makes a quick attempt rather than none). The result is False
        when a member reports it could not flush or the deadline passed. Members
        that raise do not stop the others; their errors are raised together as
        one ``ExceptionGroup`` at the end.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        flushed = True
        errors: list[Exception] = []
        for member in self._members:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                if member.force_flush(left) is False:
                    flushed = False
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise _ExceptionGroup(f"{len(errors)} observer(s) failed in force_flush", errors)
        return flushed and (deadline is None or time.monotonic() <= deadline)

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Shut down every member, even if some fail; raise one ``ExceptionGroup`` at the end."""
        self._call_all("shutdown", timeout_s)

    def emit(self, ctx: EventContext) -> None:
        """Deliver ``ctx`` to the hook its type belongs to (used by replay)."""
        getattr(self, ctx.hook)(ctx)

    # -- the hooks: each declaration is replaced by its fan-out (the contract's order) ------
    @_fan_out
    def on_run_start(self, ctx: ev.RunStartContext) -> None: ...
    @_fan_out
    def on_run_end(self, ctx: ev.RunEndContext) -> None: ...
    @_fan_out
    def on_turn_start(self, ctx: ev.TurnStartContext) -> None: ...
    @_fan_out
    def on_turn_end(self, ctx: ev.TurnEndContext) -> None: ...
    @_fan_out
    def on_stream_start(self, ctx: ev.StreamStartContext) -> None: ...
    @_fan_out
    def on_stream_success(self, ctx: ev.StreamSuccessContext) -> None: ...
    @_fan_out
    def on_stream_failure(self, ctx: ev.StreamFailureContext) -> None: ...
    @_fan_out
    def on_response(self, ctx: ev.ResponseContext) -> None: ...
    @_fan_out
    def on_text_delta(self, ctx: ev.TextDeltaContext) -> None: ...
    @_fan_out
    def on_thinking_delta(self, ctx: ev.ThinkingDeltaContext) -> None: ...
    @_fan_out
    def on_tool_call_received(self, ctx: ev.ToolCallReceivedContext) -> None: ...
    @_fan_out
    def on_tool_pre(self, ctx: ev.ToolPreContext) -> None: ...
    @_fan_out
    def on_tool_post(self, ctx: ev.ToolPostContext) -> None: ...
    @_fan_out
    def on_compaction(self, ctx: ev.CompactionContext) -> None: ...
    @_fan_out
    def on_fallback(self, ctx: ev.FallbackContext) -> None: ...
    @_fan_out
    def on_model_switched(self, ctx: ev.ModelSwitchedContext) -> None: ...
    @_fan_out
    def on_loop_detected(self, ctx: ev.LoopDetectedContext) -> None: ...
    @_fan_out
    def on_convergence_detected(self, ctx: ev.ConvergenceDetectedContext) -> None: ...
    @_fan_out
    def on_suspended(self, ctx: ev.SuspendedContext) -> None: ...
    @_fan_out
    def on_sleep(self, ctx: ev.SleepContext) -> None: ...
    @_fan_out
    def on_context_provider(self, ctx: ev.ContextProviderContext) -> None: ...
    @_fan_out
    def on_backpressure(self, ctx: ev.BackpressureContext) -> None: ...
    @_fan_out
    def on_session_reset(self, ctx: ev.SessionResetContext) -> None: ...
    @_fan_out
    def on_budget_exceeded(self, ctx: ev.BudgetExceededContext) -> None: ...
    @_fan_out
    def on_budget_unpriced(self, ctx: ev.BudgetUnpricedContext) -> None: ...
    @_fan_out
    def on_shared_budget(self, ctx: ev.SharedBudgetContext) -> None: ...


def _check_fan_outs() -> None:
    """Fail at import if a hook of the contract has no fan-out, or one under another name.

    A hook missing here would be LoopObserver's no-op on a set: its events would vanish.
    """
    for hook in HOOKS:
        dispatch = vars(ObserverSet).get(hook)
        if getattr(dispatch, "__name__", None) != hook:
            raise TypeError(f"ObserverSet declares no fan-out for {hook}")


_check_fan_outs()
