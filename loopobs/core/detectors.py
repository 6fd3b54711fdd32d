"""Hash-based detectors: runaway tool loops and converged answers.

Both detectors are observers. Add them to an :class:`~loopobs.core.observer.ObserverSet`
(``AgentLoop`` does it for you); when they detect something they emit
``on_loop_detected`` / ``on_convergence_detected`` into every set they are
attached to, so tracing and metrics observers in that set see the detection,
and the loop applies its ``action``. They work the same on a loop that is not
ours, fed by hand-emitted events. A detection is emitted while the set is
still delivering the event that caused it, so observers registered *after* the
detector receive the detection before that event: register detectors last.

- :class:`RepetitionDetector` turns every tool call into an operation
  ``(tool, arguments hash, result hash)`` and watches a sliding window of them
  for the same operation repeated, and for short cycles (``A → B → A → B``).
- :class:`ConvergenceDetector` fingerprints final answers (bottom-k MinHash of
  their case- and punctuation-folded words) and detects a run of answers that
  are each nearly identical to the previous one.

State is kept per session (runs are mapped to their session at
``on_run_start``; an event for a run never started is keyed on its run id),
is bounded, is guarded by one lock per detector, and is cleared by
:meth:`reset`. All hashes are stable BLAKE2b digests
(:mod:`loopobs.core.hashing`), never Python's salted ``hash()``.
"""

from __future__ import annotations

import heapq
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar, get_args
from uuid import UUID

from loopobs.core.events import (
    ConvergenceAction,
    ConvergenceDetectedContext,
    LoopAction,
    LoopDetectedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    ToolCallReceivedContext,
    ToolPostContext,
)
from loopobs.core.hashing import arguments_hash, canonical_json, result_hash, stable_hash64
from loopobs.core.observer import LoopObserver, ObserverSet

__all__ = ["ConvergenceAction", "ConvergenceDetector", "RepetitionDetector"]

_CONVERGENCE_ACTIONS: Final = frozenset(get_args(ConvergenceAction))

DEFAULT_MAX_SESSIONS: Final = 4096
"""Sessions (and runs never started) a detector remembers; the least recently active go first."""

_MAX_PENDING_CALLS: Final = 1024
"""Tool calls per run awaiting their ``on_tool_post``; older ones are forgotten."""

_LABEL_CHARS: Final = 60

_State = TypeVar("_State")

# (tool, arguments hash, result hash): an operation repeats only when all three are equal.
_Op = tuple[str, int | None, int | None]
_Call = tuple[str, int | None]
# tool, arguments hash, arguments (the pattern text is built only for a detection)
_Pending = tuple[str, int | None, Mapping[str, Any]]

_NO_ARGUMENTS: Final[Mapping[str, Any]] = {}
_NONE: Final = 0
_WARN: Final = 1
_STOP: Final = 2
_ACTIONS: Final[dict[int, LoopAction]] = {_WARN: "warn", _STOP: "stop"}


class _SessionDetector(LoopObserver, Generic[_State]):
    """Shared plumbing: attached sets, run → session map, bounded per-session state, one lock."""

    def __init__(self, *, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._max_sessions = max_sessions
        self._lock = threading.Lock()
        self._targets: tuple[ObserverSet, ...] = ()
        self._run_sessions: dict[UUID, UUID] = {}
        self._sessions: OrderedDict[UUID, _State] = OrderedDict()

    # -- attachment ------------------------------------------------------------------------
    def on_attach(self, observers: ObserverSet) -> None:
        """Remember ``observers``: detections are emitted into it."""
        with self._lock:
            self._targets = (*self._targets, observers)

    def on_detach(self, observers: ObserverSet) -> None:
        """Stop emitting into ``observers``."""
        with self._lock:
            targets = list(self._targets)
            for i, t in enumerate(targets):
                if t is observers:
                    del targets[i]
                    break
            self._targets = tuple(targets)

    # -- runs and sessions -----------------------------------------------------------------
    def on_run_start(self, ctx: RunStartContext) -> None:
        """Map the run to its session: the session's state carries over from earlier runs."""
        with self._lock:
            self._run_sessions[ctx.run_id] = ctx.session_id
            if len(self._run_sessions) > self._max_sessions:
                del self._run_sessions[next(iter(self._run_sessions))]

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Forget the run (its session's state stays, for the session's next run)."""
        with self._lock:
            self._run_sessions.pop(ctx.run_id, None)
            self._run_ended(ctx.run_id)

    def _run_ended(self, run_id: UUID) -> None:
        """Drop per-run state; called with the lock held."""

    def _new_state(self) -> _State:
        raise NotImplementedError

    def _state(self, run_id: UUID) -> tuple[UUID, _State]:
        """The session key and state of ``run_id``, created on first use; lock held."""
        key = self._run_sessions.get(run_id, run_id)
        sessions = self._sessions
        state = sessions.get(key)
        if state is None:
            state = sessions[key] = self._new_state()
            if len(sessions) > self._max_sessions:
                sessions.popitem(last=False)
        else:
            sessions.move_to_end(key)
        return key, state

    def _clear_session(self, key: UUID) -> None:
        self._sessions.pop(key, None)

    def reset(self) -> None:
        """Forget every session and run (the sets it is attached to are kept)."""
        with self._lock:
            self._run_sessions.clear()
            self._sessions.clear()

    @property
    def sessions(self) -> int:
        """How many sessions currently have state (bounded by ``max_sessions``)."""
        return len(self._sessions)


# -- repetition ----------------------------------------------------------------------------


class _Repetitions:
    """One session's window of operations and its escalation bookkeeping."""

    __slots__ = (
        "calls",
        "counts",
        "cycle_block",
        "cycle_level",
        "cycle_period",
        "latest",
        "runs",
        "tail",
        "warned",
        "window",
    )

    def __init__(self, window: int, max_period: int) -> None:
        self.window: deque[_Op] = deque()
        self.calls = 0
        self.counts: dict[_Op, int] = {}
        # (escalation level, call number) already reported per operation; entries
        # leave with the operation's last occurrence in the window, so this is bounded by it.
        self.warned: dict[_Op, tuple[int, int]] = {}
        # (tool, arguments) → its latest operation in the window, to notice progress.
        self.latest: dict[_Call, _Op] = {}
        self.tail: deque[tuple[_Op, Mapping[str, Any]]] = deque(maxlen=max_period + 1)
        # runs[p]: how many of the latest operations equal the one p positions earlier.
        self.runs: list[int] = [0] * (max_period + 1)
        self.cycle_period = 0
        self.cycle_level = _NONE
        self.cycle_block: tuple[tuple[_Op, Mapping[str, Any]], ...] = ()


def _truncate(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


class RepetitionDetector(_SessionDetector[_Repetitions]):
    """Detects runaway tool loops: the same operation or a short cycle of operations repeating.

    An *operation* is one completed tool call attempt: ``(tool, hash of the
    canonical arguments, result hash)``. Arguments are canonicalised
    (:func:`~loopobs.core.hashing.canonical_json`: key order, whitespace and
    ``1`` vs ``1.0`` do not matter); the result hash is ``ToolPostContext.result_hash``
    (computed from ``ToolPostContext.result`` when an emitter left it out).
    Hooks read: ``on_tool_call_received`` (arguments) and ``on_tool_post``
    (result); a post whose call was never received counts with unknown arguments.

    After each ``on_tool_post``, over the session's last ``window`` operations:

    - an operation seen ``warn_after`` times (not necessarily in a row) emits
      ``on_loop_detected`` with ``action="warn"``; ``stop_after`` times, with
      ``action="stop"``. ``pattern`` reads ``tool(primary)``, e.g.
      ``read_file(/etc/hosts)``; ``repetitions`` is the count in the window.
    - a cycle of 2 to ``max_period`` distinct steps repeated ``warn_after`` times
      in a row (``stop_after`` for a stop) emits the same, with ``pattern`` like
      ``read_file(a) → grep(b)`` and ``repetitions`` the number of cycles; while a
      cycle is running, its operations are reported as the cycle, not one by one.
    - progress resets: the same tool and arguments with a result different
      from the last one drops that call's earlier entries from the window and
      clears their warnings (the agent is polling something that changes), whether
      or not they were warned about yet: ``queued, queued, running, queued`` is a
      job changing state, not a loop.

    Each escalation is reported once, not again on every following call. A
    stop clears the session's window, so the session's next run starts afresh.
    The primary value of the pattern comes from ``primary_params`` (tool name →
    argument name) or else the first string argument, truncated to 60
    characters; a call without string arguments shows its canonical JSON.

    Args:
        window: operations remembered per session.
        warn_after: repetitions (or cycles) that trigger a warning; at least 2.
        stop_after: repetitions (or cycles) that trigger a stop; 0 never stops.
        max_period: longest cycle detected; 1 detects plain repetition only.
        primary_params: tool name → the argument shown in the pattern.
        max_sessions: sessions remembered; the least recently active are dropped.
    """

    name = "RepetitionDetector"

    def __init__(
        self,
        window: int = 50,
        warn_after: int = 3,
        stop_after: int = 10,
        max_period: int = 4,
        primary_params: Mapping[str, str] | None = None,
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        if warn_after < 2:
            raise ValueError("warn_after must be at least 2")
        if stop_after and stop_after < warn_after:
            raise ValueError("stop_after must be 0 (never stop) or at least warn_after")
        if max_period < 1:
            raise ValueError("max_period must be at least 1")
        super().__init__(max_sessions=max_sessions)
        self.window = window
        self.warn_after = warn_after
        self.stop_after = stop_after
        self.max_period = max_period
        self.primary_params: Mapping[str, str] = dict(primary_params or {})
        self._pending: OrderedDict[UUID, dict[str, _Pending]] = OrderedDict()

    def __repr__(self) -> str:
        return (
            f"RepetitionDetector(window={self.window}, warn_after={self.warn_after}, "
            f"stop_after={self.stop_after}, max_period={self.max_period})"
        )

    def _new_state(self) -> _Repetitions:
        return _Repetitions(self.window, self.max_period)

    def reset(self) -> None:
        """Forget every session's window and every call awaiting its result."""
        with self._lock:
            self._pending.clear()
        super().reset()

    def _run_ended(self, run_id: UUID) -> None:
        self._pending.pop(run_id, None)

    def label(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The pattern text of one call: ``tool(primary)``."""
        primary: Any = None
        name = self.primary_params.get(tool)
        if name is not None:
            primary = arguments.get(name)
        else:
            for value in arguments.values():
                if type(value) is str:
                    primary = value
                    break
        if primary is None:
            primary = canonical_json(arguments) if arguments else ""
        elif type(primary) is not str:
            primary = canonical_json(primary)
        return f"{tool}({_truncate(primary)})"

    # -- hooks -----------------------------------------------------------------------------
    def on_tool_call_received(self, ctx: ToolCallReceivedContext) -> None:
        """Hash the call's canonical arguments, to pair with its result at ``on_tool_post``."""
        args = ctx.input
        entry = (ctx.tool, arguments_hash(args), args)
        with self._lock:
            calls = self._pending.get(ctx.run_id)
            if calls is None:
                calls = self._pending[ctx.run_id] = {}
                if len(self._pending) > self._max_sessions:
                    self._pending.popitem(last=False)
            calls[ctx.tool_call_id] = entry
            if len(calls) > _MAX_PENDING_CALLS:
                del calls[next(iter(calls))]

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Record the operation and emit ``on_loop_detected`` if it escalates a pattern.

        Fires after the attempt's result is known; every attempt counts as one operation.
        """
        rhash = ctx.result_hash
        if rhash is None and ctx.result:
            rhash = result_hash(ctx.result)
        with self._lock:
            calls = self._pending.get(ctx.run_id)
            pending = calls.get(ctx.tool_call_id) if calls is not None else None
            if pending is None:
                pending = (ctx.tool, None, _NO_ARGUMENTS)
            key, state = self._state(ctx.run_id)
            detection = self._record(state, (pending[0], pending[1], rhash), pending[2])
            if detection is not None and detection[3] == _STOP:
                self._clear_session(key)
            targets = self._targets
        if detection is not None:
            pattern, repetitions, tool, level = detection
            event = LoopDetectedContext(
                run_id=ctx.run_id,
                time_ns=ctx.time_ns,
                pattern=pattern,
                repetitions=repetitions,
                tool=tool,
                action=_ACTIONS[level],
            )
            for target in targets:
                target.on_loop_detected(event)

    # -- the window ------------------------------------------------------------------------
    def _record(
        self, s: _Repetitions, op: _Op, args: Mapping[str, Any]
    ) -> tuple[str, int, str | None, int] | None:
        """Add ``op`` to the window; the detection it completes, if any. Lock held."""
        call = (op[0], op[1])
        previous = s.latest.get(call)
        if previous is not None and previous != op:
            self._progress(s, call)
        s.latest[call] = op

        window, counts = s.window, s.counts
        if len(window) >= self.window:
            old = window.popleft()
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
                s.warned.pop(old, None)
                old_call = (old[0], old[1])
                if s.latest.get(old_call) == old:
                    del s.latest[old_call]
        window.append(op)
        count = counts[op] = counts.get(op, 0) + 1
        s.calls += 1

        # Cycle tracking over the tail: runs[p] grows while each new operation
        # equals the one p steps back; the smallest p with runs[p] >= p is the
        # tail's period (a period-1 tail is plain repetition, left to the counts).
        tail, runs = s.tail, s.runs
        size = len(tail)
        period = 0
        for p in range(1, self.max_period + 1):
            r = runs[p] + 1 if size >= p and tail[-p][0] == op else 0
            runs[p] = r
            if not period and r >= p:
                period = p
        tail.append((op, args))

        if period >= 2:
            if s.cycle_period != period:
                s.cycle_period = period
                s.cycle_level = _NONE
                s.cycle_block = tuple(tail)[-period:]
            cycles = (runs[period] + period) // period
            level = self._level(cycles)
            if level <= s.cycle_level:
                return None
            s.cycle_level = level
            # A step of the cycle may already have been reported as a plain repeat
            # while the cycle was forming (warn_after=2): that was this escalation.
            began = s.calls - runs[period] - period
            reported = False
            for member, _ in s.cycle_block:
                seen = s.warned.get(member)
                if seen is not None and seen[0] >= level:
                    reported = reported or seen[1] > began
                else:
                    s.warned[member] = (level, s.calls)
            if reported:
                return None
            tools = {member[0] for member, _ in s.cycle_block}
            pattern = " → ".join(self.label(member[0], a) for member, a in s.cycle_block)
            return pattern, cycles, tools.pop() if len(tools) == 1 else None, level

        s.cycle_period = 0
        s.cycle_level = _NONE
        level = self._level(count)
        if level == _NONE:
            return None
        seen = s.warned.get(op)
        if seen is not None and level <= seen[0]:
            return None
        s.warned[op] = (level, s.calls)
        return self.label(op[0], args), count, op[0], level

    def _level(self, repetitions: int) -> int:
        if self.stop_after and repetitions >= self.stop_after:
            return _STOP
        if repetitions >= self.warn_after:
            return _WARN
        return _NONE

    def _progress(self, s: _Repetitions, call: _Call) -> None:
        """The call returned something new: drop its earlier entries and their warnings."""
        kept = [o for o in s.window if (o[0], o[1]) != call]
        s.window = deque(kept)
        counts: dict[_Op, int] = {}
        for o in kept:
            counts[o] = counts.get(o, 0) + 1
        s.counts = counts
        s.warned = {o: lvl for o, lvl in s.warned.items() if o in counts}
        s.latest = {c: o for c, o in s.latest.items() if c != call}
        s.tail.clear()
        s.runs = [0] * (self.max_period + 1)
        s.cycle_period = 0
        s.cycle_level = _NONE
        s.cycle_block = ()


# -- convergence ---------------------------------------------------------------------------

_WORD: Final = re.compile(r"\w+")

SKETCH_SIZE: Final = 128
"""Hashes kept per answer: answers with fewer distinct words are compared exactly."""


def answer_sketch(text: str, k: int = SKETCH_SIZE) -> frozenset[int]:
    """The bottom-``k`` MinHash sketch of ``text``'s distinct words, case and punctuation folded.

    Words are ``\\w+`` runs of the case-folded text, each hashed with stable
    64-bit BLAKE2b; the sketch keeps the ``k`` smallest hashes.
    """
    hashes = {stable_hash64(w.encode("utf-8", "surrogatepass"))
              for w in set(_WORD.findall(text.casefold()))}
    if len(hashes) <= k:
        return frozenset(hashes)
    return frozenset(heapq.nsmallest(k, hashes))


def sketch_similarity(a: frozenset[int], b: frozenset[int], k: int = SKETCH_SIZE) -> float:
    """Estimated Jaccard similarity of the word sets behind two sketches (exact below ``k``).

    The bottom-``k`` estimator: of the ``k`` smallest hashes of the union, the
    share present in both sketches. Two empty sketches are not similar.
    """
    if not a or not b:
        return 0.0
    union = a | b
    smallest = union if len(union) <= k else heapq.nsmallest(k, union)
    both = sum(1 for h in smallest if h in a and h in b)
    return both / len(smallest)


class _Answers:
    __slots__ = ("fired", "previous", "streak")

    def __init__(self) -> None:
        self.previous: frozenset[int] = frozenset()
        self.streak = 0
        self.fired = False


class ConvergenceDetector(_SessionDetector[_Answers]):
    """Detects converged final answers: the agent keeps giving the same answer.

    Reads ``on_response`` for responses without tool calls (``tool_calls == 0``,
    a final answer). Each answer is reduced to a bottom-k MinHash sketch of its
    case- and punctuation-folded words (constant memory per session) and
    compared with the previous answer of the session: at least ``similarity``
    (estimated Jaccard) extends the streak, less restarts it at 1, and an empty
    answer clears it. When the streak reaches ``consecutive`` answers, the
    detector emits ``on_convergence_detected`` once, with ``action``,
    ``similarity`` (the latest pair's) and ``consecutive`` (the streak); it
    fires again only after the streak has been broken. For ``stop`` and
    ``ask_user``, which end the run, the session's state is cleared.

    Args:
        similarity: how alike two answers must be, in (0, 1].
        consecutive: answers in a row that make a convergence; at least 2.
        action: what the loop should do: ``stop``, ``warn``, ``compact``,
            ``ask_user`` or ``switch_phase``.
        max_sessions: sessions remembered; the least recently active are dropped.
    """

    name = "ConvergenceDetector"

    def __init__(
        self,
        similarity: float = 0.95,
        consecutive: int = 3,
        action: ConvergenceAction = "warn",
        *,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if not 0.0 < similarity <= 1.0:
            raise ValueError("similarity must be in (0, 1]")
        if consecutive < 2:
            raise ValueError("consecutive must be at least 2")
        if action not in _CONVERGENCE_ACTIONS:
            raise ValueError(
                f"action must be one of {sorted(_CONVERGENCE_ACTIONS)}, got {action!r}"
            )
        super().__init__(max_sessions=max_sessions)
        self.similarity = similarity
        self.consecutive = consecutive
        self.action: ConvergenceAction = action

    def __repr__(self) -> str:
        return (
            f"ConvergenceDetector(similarity={self.similarity}, "
            f"consecutive={self.consecutive}, action={self.action!r})"
        )

    def _new_state(self) -> _Answers:
        return _Answers()

    def on_response(self, ctx: ResponseContext) -> None:
        """Compare a final answer with the session's previous one; emit on convergence.

        Responses that ask for tool calls are ignored.
        """
        if ctx.tool_calls:
            return
        sketch = answer_sketch(ctx.text)
        with self._lock:
            key, s = self._state(ctx.run_id)
            if not sketch:
                s.previous, s.streak, s.fired = sketch, 0, False
                return
            score = sketch_similarity(s.previous, sketch) if s.streak else 0.0
            if s.streak and score >= self.similarity:
                s.streak += 1
            else:
                s.streak, s.fired = 1, False
            s.previous = sketch
            if s.streak < self.consecutive or s.fired:
                return
            s.fired = True
            streak = s.streak
            if self.action in ("stop", "ask_user"):
                self._clear_session(key)
            targets = self._targets
        event = ConvergenceDetectedContext(
            run_id=ctx.run_id,
            time_ns=ctx.time_ns,
            action=self.action,
            similarity=score,
            consecutive=streak,
        )
        for target in targets:
            target.on_convergence_detected(event)
