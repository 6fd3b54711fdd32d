"""ObserverSet: fan-out, isolation, rate-limited logs, strict mode, threads, nesting, lifecycle."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from loopobs import HOOKS, EventContext, HookName, LoopObserver, ObserverSet, listened_hooks
from loopobs.contract import observer as observer_mod
from loopobs.testing import RecordingObserver
from tests.conftest import MakeContext, sample_context

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # pragma: no cover - version switch
    from exceptiongroup import BaseExceptionGroup


class Boom(LoopObserver):
    """Raises in every hook and in every lifecycle method."""

    def __init__(self, exc: type[BaseException] = RuntimeError) -> None:
        self.exc = exc

    def _raise(self, ctx: Any = None) -> None:
        raise self.exc(f"{self.name} failed")

    def force_flush(self, timeout_s: float | None = None) -> None:
        self._raise()

    def shutdown(self, timeout_s: float | None = None) -> None:
        self._raise()

    on_run_start = on_run_end = on_turn_start = on_turn_end = _raise
    on_stream_start = on_stream_success = on_stream_failure = on_response = _raise
    on_text_delta = on_thinking_delta = _raise
    on_tool_call_received = on_tool_pre = on_tool_post = _raise
    on_compaction = on_fallback = on_model_switched = _raise
    on_loop_detected = on_convergence_detected = on_suspended = on_sleep = _raise
    on_context_provider = on_backpressure = on_session_reset = _raise
    on_budget_exceeded = on_budget_unpriced = on_shared_budget = _raise


class OnlyRunStart(LoopObserver):
    """Listens to one hook."""

    def __init__(self) -> None:
        self.seen: list[EventContext] = []

    def on_run_start(self, ctx: Any) -> None:
        self.seen.append(ctx)


class OnlyToolPost(LoopObserver):
    """Listens to another hook."""

    def __init__(self) -> None:
        self.seen: list[EventContext] = []

    def on_tool_post(self, ctx: Any) -> None:
        self.seen.append(ctx)


class Lifecycle(LoopObserver):
    """Records lifecycle calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def on_attach(self, observers: ObserverSet) -> None:
        self.calls.append(("attach", observers))

    def on_detach(self, observers: ObserverSet) -> None:
        self.calls.append(("detach", observers))

    def reset(self) -> None:
        self.calls.append(("reset", None))

    def force_flush(self, timeout_s: float | None = None) -> None:
        self.calls.append(("force_flush", timeout_s))

    def shutdown(self, timeout_s: float | None = None) -> None:
        self.calls.append(("shutdown", timeout_s))


def emit_all(observers: ObserverSet, make: Callable[..., EventContext] = sample_context) -> None:
    """One event of every hook, in contract order."""
    for hook in HOOKS:
        getattr(observers, hook)(make(hook))


# -- dispatch -----------------------------------------------------------------------------


@pytest.mark.parametrize("hook", HOOKS)
def test_each_hook_reaches_every_listening_member(
    hook: HookName, make_context: MakeContext
) -> None:
    """A hook's event reaches every member that listens, as the same object, in order."""
    first, second = RecordingObserver(), RecordingObserver()
    observers = ObserverSet([first, OnlyRunStart(), second])
    ctx = make_context(hook)
    assert observers.listens(hook)
    getattr(observers, hook)(ctx)
    assert first.events == [(hook, ctx)]
    assert second.events == [(hook, ctx)]
    assert first.events[0][1] is ctx


@pytest.mark.parametrize("hook", HOOKS)
def test_emit_routes_a_context_to_its_hook(hook: HookName, make_context: MakeContext) -> None:
    """emit(ctx) delivers to the hook named by the context's class."""
    rec = RecordingObserver()
    ctx = make_context(hook)
    ObserverSet([rec]).emit(ctx)
    assert rec.events == [(hook, ctx)]


@pytest.mark.parametrize("hook", [h for h in HOOKS if h not in ("on_run_start", "on_run_end")])
def test_unheard_hooks_are_not_listened_to(hook: HookName, make_context: MakeContext) -> None:
    """listens() is false for a hook no member overrides, and calling it delivers nothing.

    A set that hears run starts also hears run ends (it tracks open runs).
    """
    only = OnlyRunStart()
    observers = ObserverSet([only])
    assert not observers.listens(hook)
    assert observers.listening == {"on_run_start", "on_run_end"}
    getattr(observers, hook)(make_context(hook))
    observers.on_run_end(make_context("on_run_end"))
    assert only.seen == []


def test_empty_set_listens_to_nothing() -> None:
    """An empty set listens to no hook and dispatches to no one."""
    observers = ObserverSet()
    assert observers.listening == frozenset()
    assert not any(observers.listens(h) for h in HOOKS)
    emit_all(observers)
    assert len(observers) == 0


def test_listened_hooks_reports_overrides_only() -> None:
    """listened_hooks sees class overrides; a base LoopObserver listens to nothing."""
    assert listened_hooks(OnlyRunStart()) == {"on_run_start"}
    assert listened_hooks(LoopObserver()) == frozenset()
    assert listened_hooks(RecordingObserver()) == frozenset(HOOKS)
    assert listened_hooks(ObserverSet([OnlyToolPost()])) == {"on_tool_post"}


def test_unheard_hooks_are_neither_listened_to_nor_delivered() -> None:
    """An instance's unheard hooks drop out of its set's listening, and are not called."""
    calls: list[str] = []

    class Both(LoopObserver):
        def __init__(self, unheard: frozenset[HookName] = frozenset()) -> None:
            self.unheard_hooks = unheard

        def on_run_start(self, ctx: Any) -> None:
            calls.append("run_start")

        def on_tool_post(self, ctx: Any) -> None:
            calls.append("tool_post")

    narrowed = Both(frozenset({"on_tool_post"}))
    assert listened_hooks(narrowed) == {"on_run_start"}
    assert listened_hooks(Both()) == {"on_run_start", "on_tool_post"}
    observers = ObserverSet([narrowed])
    assert not observers.listens("on_tool_post")
    observers.on_tool_post(sample_context("on_tool_post"))
    observers.on_run_start(sample_context("on_run_start"))
    assert calls == ["run_start"]
    observers.add(Both())
    assert observers.listens("on_tool_post")


def test_registration_order() -> None:
    """Members are called in the order they were added."""
    order: list[str] = []

    class Named(LoopObserver):
        def __init__(self, tag: str) -> None:
            self.tag = tag

        def on_turn_start(self, ctx: Any) -> None:
            order.append(self.tag)

    observers = ObserverSet([Named("a"), Named("b")])
    observers.add(Named("c"))
    observers.on_turn_start(sample_context("on_turn_start"))
    assert order == ["a", "b", "c"]


def test_membership_add_remove_and_lifecycle_notifications() -> None:
    """add/remove keep order, notify the observer, and reject non-members and non-observers."""
    a, b = Lifecycle(), Lifecycle()
    observers = ObserverSet([a])
    observers.add(b)
    assert observers.members == (a, b)
    assert list(observers) == [a, b]
    assert len(observers) == 2
    assert a in observers
    assert b in observers
    observers.remove(a)
    assert len(observers) == 1
    assert list(observers.members) == [b]
    assert a not in observers
    assert a.calls == [("attach", observers), ("detach", observers)]
    with pytest.raises(ValueError, match="Lifecycle is not in this ObserverSet"):
        observers.remove(a)
    with pytest.raises(TypeError, match="LoopObserver"):
        observers.add(object())  # type: ignore[arg-type]


def test_same_observer_twice_receives_twice_and_is_removed_once() -> None:
    """An observer added twice gets each event twice; remove() drops one occurrence."""
    rec = RecordingObserver()
    observers = ObserverSet([rec, rec])
    observers.on_tool_pre(sample_context("on_tool_pre"))
    assert len(rec.events) == 2
    observers.remove(rec)
    observers.on_tool_pre(sample_context("on_tool_pre"))
    assert len(rec.events) == 3


# -- names --------------------------------------------------------------------------------


def test_name_defaults_to_the_class_name() -> None:
    """name is the class name unless a class or instance sets one."""

    class Custom(LoopObserver):
        name = "custom-exporter"

    class Derived(Custom):
        pass

    assert OnlyRunStart().name == "OnlyRunStart"
    assert LoopObserver().name == "LoopObserver"
    assert ObserverSet().name == "ObserverSet"
    assert Custom().name == "custom-exporter"
    assert Derived().name == "Derived"
    renamed = OnlyRunStart()
    renamed.name = "mine"
    assert renamed.name == "mine"


# -- isolation ----------------------------------------------------------------------------


def _ours(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of loopobs's observer logger (exporter threads other tests left may log)."""
    return [r for r in caplog.records if r.name == "loopobs.observer"]


def test_a_failing_observer_never_stops_the_others(caplog: pytest.LogCaptureFixture) -> None:
    """One observer raising in every hook: the two others still get every event, in order."""
    before, after = RecordingObserver(), RecordingObserver()
    observers = ObserverSet([before, Boom(), after])
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        emit_all(observers)
    assert before.hooks() == list(HOOKS)
    assert after.hooks() == list(HOOKS)
    assert observers.failures == {("Boom", h): 1 for h in HOOKS}
    assert observers.failure_count == len(HOOKS)
    # One record per (observer, hook) pair, naming both, with the traceback attached.
    records = _ours(caplog)
    assert len(records) == len(HOOKS)
    for hook, record in zip(HOOKS, records, strict=True):
        assert record.name == "loopobs.observer"
        assert "Boom" in record.getMessage()
        assert hook in record.getMessage()
        assert record.exc_info is not None
        assert record.exc_info[0] is RuntimeError


def test_failures_are_counted_per_observer_and_hook() -> None:
    """Counts are kept per (observer name, hook) and cleared by reset()."""

    class Other(Boom):
        pass

    observers = ObserverSet([Boom(), Other()])
    for _ in range(3):
        observers.on_run_start(sample_context("on_run_start"))
    observers.on_tool_pre(sample_context("on_tool_pre"))
    assert observers.failures == {
        ("Boom", "on_run_start"): 3,
        ("Other", "on_run_start"): 3,
        ("Boom", "on_tool_pre"): 1,
        ("Other", "on_tool_pre"): 1,
    }
    assert observers.failure_count == 8
    observers.failures[("Boom", "on_run_start")] = 0  # type: ignore[index]
    assert observers.failure_count == 8  # a copy: callers cannot corrupt the counts
    observers.reset()
    assert observers.failures == {}
    assert observers.failure_count == 0


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_failure_log_is_rate_limited(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many failures: one record per LOG_INTERVAL_S; the next one says how many were skipped."""
    clock = FakeClock()
    monkeypatch.setattr(time, "monotonic", clock)
    observers = ObserverSet([Boom()])
    ctx = sample_context("on_tool_pre")

    def fail(times: int) -> None:
        for _ in range(times):
            observers.on_tool_pre(ctx)
            clock.now += 0.1

    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        fail(500)  # 50 s: one record
        assert len(_ours(caplog)) == 1
        assert "similar failures" not in _ours(caplog)[0].getMessage()
        clock.now += observer_mod.LOG_INTERVAL_S  # past the interval
        fail(1)
        assert len(_ours(caplog)) == 2
        assert "(499 similar failures not logged)" in _ours(caplog)[1].getMessage()
        fail(10)
        assert len(_ours(caplog)) == 2
        # Another hook of the same observer has its own budget.
        observers.on_run_end(sample_context("on_run_end"))
        assert len(_ours(caplog)) == 3
        clock.now += observer_mod.LOG_INTERVAL_S
        fail(1)
        assert len(_ours(caplog)) == 4
        assert "(10 similar failures not logged)" in _ours(caplog)[3].getMessage()
    assert observers.failures == {("Boom", "on_tool_pre"): 512, ("Boom", "on_run_end"): 1}


def test_interval_is_configurable(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LOG_INTERVAL_S is read at failure time, so a deployment (or test) can change it."""
    clock = FakeClock()
    monkeypatch.setattr(time, "monotonic", clock)
    monkeypatch.setattr(observer_mod, "LOG_INTERVAL_S", 0.0)
    observers = ObserverSet([Boom()])
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        for _ in range(3):
            observers.on_tool_pre(sample_context("on_tool_pre"))
    assert len(_ours(caplog)) == 3


def test_strict_mode_reraises() -> None:
    """strict=True lets the observer's exception reach the emitter (for tests)."""
    observers = ObserverSet([Boom()], strict=True)
    with pytest.raises(RuntimeError, match="Boom failed"):
        observers.on_turn_start(sample_context("on_turn_start"))


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_base_exceptions_are_never_swallowed(
    exc: type[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    """Interrupts and exits pass through the set untouched and uncounted."""
    after = RecordingObserver()
    observers = ObserverSet([Boom(exc), after])
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"), pytest.raises(exc):
        observers.on_run_end(sample_context("on_run_end"))
    assert observers.failure_count == 0
    assert _ours(caplog) == []


def test_base_exception_passes_through_a_nested_set() -> None:
    """A BaseException from inside a nested set still reaches the emitter."""
    outer = ObserverSet([ObserverSet([Boom(KeyboardInterrupt)])])
    with pytest.raises(KeyboardInterrupt):
        outer.on_tool_pre(sample_context("on_tool_pre"))


def test_a_hook_raising_cancelled_error_is_that_observers_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A sync hook cannot be cancelled, so its CancelledError is its bug: counted, logged,
    and the members after it still get the event."""
    after = RecordingObserver()
    bad = Boom(asyncio.CancelledError)
    observers = ObserverSet([bad, after])
    with caplog.at_level(logging.ERROR, logger="loopobs.observer"):
        observers.on_run_end(sample_context("on_run_end"))
    assert observers.failures == {(bad.name, "on_run_end"): 1}
    assert after.hooks() == ["on_run_end"]
    assert len(_ours(caplog)) == 1


def test_failures_counted_exactly_under_threads() -> None:
    """Concurrent failures are counted without loss."""
    observers = ObserverSet([Boom()])
    ctx = sample_context("on_text_delta")

    def work() -> None:
        for _ in range(500):
            observers.on_text_delta(ctx)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert observers.failures == {("Boom", "on_text_delta"): 2000}


# -- lifecycle ----------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["shutdown", "force_flush"])
def test_shutdown_and_flush_reach_everyone_and_report_together(method: str) -> None:
    """Every member is reached even when some fail; all failures come back in one group."""
    first, last = Lifecycle(), Lifecycle()
    observers = ObserverSet([first, Boom(), Boom(ValueError), last])
    with pytest.raises(BaseExceptionGroup) as info:
        getattr(observers, method)(2.0)
    assert [type(e) for e in info.value.exceptions] == [RuntimeError, ValueError]
    assert method in str(info.value)
    for member in (first, last):
        name, timeout = member.calls[-1]
        assert name == method
        assert timeout is not None
        assert 0.0 <= timeout <= 2.0


@pytest.mark.parametrize("method", ["shutdown", "force_flush", "reset"])
def test_lifecycle_without_failures_raises_nothing(method: str) -> None:
    """A clean shutdown, flush or reset reaches every member and returns normally."""
    members = [Lifecycle(), Lifecycle()]
    inner = ObserverSet([members[1]])
    getattr(ObserverSet([members[0], inner]), method)()
    for m in members:
        assert m.calls[-1][0] == method


def test_shutdown_group_nests_for_nested_sets() -> None:
    """A nested set's group is one of the outer group's exceptions; later members still run."""
    last = Lifecycle()
    outer = ObserverSet([ObserverSet([Boom()]), last])
    with pytest.raises(BaseExceptionGroup) as info:
        outer.shutdown()
    (inner_group,) = info.value.exceptions
    assert isinstance(inner_group, BaseExceptionGroup)
    assert last.calls == [("attach", outer), ("shutdown", None)]


# -- threads ------------------------------------------------------------------------------


@pytest.mark.usefixtures("fast_switching")
def test_add_and_remove_while_other_threads_emit() -> None:
    """Membership churn from several threads loses no event for members present throughout."""
    steady = RecordingObserver()
    observers = ObserverSet([steady])
    per_thread = 2000
    emitters = 3
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # collected and asserted on below
                errors.append(exc)

        return run

    def emit(i: int) -> Callable[[], None]:
        run_id = uuid.UUID(int=i)

        def go() -> None:
            for n in range(per_thread):
                observers.on_text_delta(sample_context("on_text_delta", run_id=run_id, time_ns=n))

        return go

    def churn() -> None:
        while not stop.is_set():
            temp = [RecordingObserver(), OnlyToolPost(), ObserverSet([OnlyRunStart()])]
            for t in temp:
                observers.add(t)
            for t in reversed(temp):
                observers.remove(t)

    workers = [threading.Thread(target=guarded(emit(i))) for i in range(emitters)]
    churners = [threading.Thread(target=guarded(churn)) for _ in range(2)]
    for t in churners + workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    for t in churners:
        t.join()
    assert errors == []
    assert observers.members == (steady,)
    assert observers.failure_count == 0
    assert len(steady.events) == emitters * per_thread
    for i in range(emitters):
        times = [c.time_ns for c in steady.of("on_text_delta", uuid.UUID(int=i))]
        assert times == list(range(per_thread))  # every event, in each thread's order


# -- nesting ------------------------------------------------------------------------------


def test_nested_set_forwards_exactly_its_members_hooks(make_context: MakeContext) -> None:
    """The outer set listens to what the inner set's members listen to (and the run end)."""
    run_start = OnlyRunStart()
    inner = ObserverSet([run_start])
    outer = ObserverSet([inner])
    assert outer.listening == {"on_run_start", "on_run_end"}
    outer.on_run_start(make_context("on_run_start"))
    assert len(run_start.seen) == 1
    assert not outer.listens("on_tool_post")


def test_changes_to_an_inner_set_propagate_outwards(make_context: MakeContext) -> None:
    """Adding to or removing from an inner set updates every set above it, at any depth."""
    inner = ObserverSet()
    middle = ObserverSet([inner])
    outer = ObserverSet([middle])
    other_parent = ObserverSet([inner])
    assert not outer.listens("on_tool_post")
    tool_post = OnlyToolPost()
    inner.add(tool_post)
    assert outer.listens("on_tool_post")
    assert middle.listens("on_tool_post")
    assert other_parent.listens("on_tool_post")
    outer.on_tool_post(make_context("on_tool_post"))
    assert len(tool_post.seen) == 1
    inner.remove(tool_post)
    assert not outer.listens("on_tool_post")
    assert outer.listening == frozenset()
    outer.on_tool_post(make_context("on_tool_post"))
    assert len(tool_post.seen) == 1
    # A removed inner set no longer drives its former parent.
    middle.remove(inner)
    inner.add(OnlyRunStart())
    assert not outer.listens("on_run_start")
    assert other_parent.listens("on_run_start")


def test_failures_inside_a_nested_set_are_isolated_there() -> None:
    """The inner set counts its member's failure; the outer set sees a healthy member."""
    rec = RecordingObserver()
    inner = ObserverSet([Boom()])
    outer = ObserverSet([inner, rec])
    outer.on_run_start(sample_context("on_run_start"))
    assert inner.failures == {("Boom", "on_run_start"): 1}
    assert outer.failure_count == 0
    assert rec.hooks() == ["on_run_start"]


def test_strict_inner_set_is_isolated_by_a_lenient_outer_set() -> None:
    """A strict inner set raises; the lenient outer set counts it under the inner set's name."""
    outer = ObserverSet([ObserverSet([Boom()], strict=True)])
    outer.on_run_start(sample_context("on_run_start"))
    assert outer.failures == {("ObserverSet", "on_run_start"): 1}


def test_cycles_are_refused() -> None:
    """A set cannot contain itself, directly or through other sets."""
    a, b, c = ObserverSet(), ObserverSet(), ObserverSet()
    with pytest.raises(ValueError, match="cannot contain itself"):
        a.add(a)
    a.add(b)
    b.add(c)
    with pytest.raises(ValueError, match="cannot contain itself"):
        c.add(a)
    with pytest.raises(ValueError, match="cannot contain itself"):
        b.add(a)
    assert c.members == ()
    assert b.members == (c,)
    a.add(c)  # a diamond is not a cycle
    assert a.members == (b, c)


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads as often as CPython allows, to shake out races."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(old)


def test_concurrent_nesting_never_builds_a_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads adding two sets into each other at once: exactly one of them succeeds."""
    real_check = ObserverSet._contains_set

    def slow_check(self: ObserverSet, target: ObserverSet) -> bool:
        found = real_check(self, target)
        time.sleep(0.02)  # widen the window between the cycle check and the insertion
        return found

    monkeypatch.setattr(ObserverSet, "_contains_set", slow_check)
    a, b = ObserverSet(), ObserverSet()
    outcome: list[str] = []

    def nest(parent: ObserverSet, child: ObserverSet) -> None:
        try:
            parent.add(child)
            outcome.append("ok")
        except ValueError:
            outcome.append("refused")

    threads = [
        threading.Thread(target=nest, args=(a, b)),
        threading.Thread(target=nest, args=(b, a)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcome) == ["ok", "refused"]


@pytest.mark.usefixtures("fast_switching")
def test_nested_membership_churn_from_threads() -> None:
    """Moving a set between parents while its members change never corrupts either side."""
    inner = ObserverSet()
    parents = [ObserverSet() for _ in range(4)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def move() -> None:
        try:
            while not stop.is_set():
                for p in parents:
                    p.add(inner)
                for p in parents:
                    p.remove(inner)
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)

    def churn() -> None:
        try:
            for _ in range(300):
                obs = OnlyToolPost()
                inner.add(obs)
                inner.remove(obs)
        except BaseException as exc:  # collected and asserted on below
            errors.append(exc)

    movers = [threading.Thread(target=move) for _ in range(2)]
    churner = threading.Thread(target=churn)
    for t in [*movers, churner]:
        t.start()
    churner.join()
    stop.set()
    for t in movers:
        t.join()
    assert errors == []
    assert all(p.members == () for p in parents)
    final = OnlyToolPost()
    inner.add(final)
    for p in parents:
        p.add(inner)
        assert p.listens("on_tool_post")


def test_event_sink_takes_every_hook_in_one_method() -> None:
    """An EventSink's on_event serves every hook it does not define itself."""
    from loopobs import EventSink, ToolPreContext

    class Sink(EventSink):
        def __init__(self) -> None:
            self.seen: list[str] = []
            self.pre = 0

        def on_event(self, ctx: EventContext) -> None:
            self.seen.append(ctx.hook)

        def on_tool_pre(self, ctx: ToolPreContext) -> None:
            self.pre += 1

    sink = Sink()
    observers = ObserverSet([sink])
    assert listened_hooks(sink) == frozenset(HOOKS)
    for hook in HOOKS:
        observers.emit(sample_context(hook))
    assert sink.seen == [h for h in HOOKS if h != "on_tool_pre"]
    assert sink.pre == 1
    assert Sink.on_run_start is Sink.on_event  # bound at class creation: no extra call


class _Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _SlowFlush(LoopObserver):
    """Takes ``cost`` seconds of the fake clock to flush; answers ``result``."""

    def __init__(self, clock: _Clock, cost: float, result: bool | None = None) -> None:
        self.clock = clock
        self.cost = cost
        self.result = result
        self.given: list[float | None] = []

    def force_flush(self, timeout_s: float | None = None) -> bool | None:
        self.given.append(timeout_s)
        self.clock.now += self.cost
        return self.result


def test_force_flush_shares_one_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each member gets what is left of one deadline, not the whole timeout again."""
    clock = _Clock()
    monkeypatch.setattr("loopobs.contract.observer.time.monotonic", clock)
    first, second, third = _SlowFlush(clock, 1.5), _SlowFlush(clock, 1.0), _SlowFlush(clock, 0)
    assert ObserverSet([first, second, third]).force_flush(2.0) is False
    assert first.given == [2.0]
    assert second.given == [0.5]
    assert third.given == [0.0]


def test_force_flush_says_whether_everything_flushed(monkeypatch: pytest.MonkeyPatch) -> None:
    """True when all members flushed in time; False when one reports it could not."""
    clock = _Clock()
    monkeypatch.setattr("loopobs.contract.observer.time.monotonic", clock)
    assert ObserverSet([_SlowFlush(clock, 0.5), _SlowFlush(clock, 0.5, True)]).force_flush(2.0)
    assert ObserverSet([_SlowFlush(clock, 0)]).force_flush() is True
    refused = ObserverSet([_SlowFlush(clock, 0, False), _SlowFlush(clock, 0)])
    assert refused.force_flush(2.0) is False
    nested = ObserverSet([ObserverSet([_SlowFlush(clock, 0, False)])])
    assert nested.force_flush() is False
