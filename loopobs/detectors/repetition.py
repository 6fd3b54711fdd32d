"""RepetitionDetector: runaway tool loops, told apart from polling and re-reads between writes."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from loopobs.contract.events import (
    CompactionContext,
    LoopAction,
    LoopDetectedContext,
    ToolAnnotations,
    ToolCallReceivedContext,
    ToolPostContext,
)
from loopobs.contract.hashing import arguments_hash, canonical_json, result_hash, stable_hash64
from loopobs.detectors._session import DEFAULT_MAX_SESSIONS, SessionDetector
from loopobs.detectors.normalise import Normaliser

__all__ = ["RepetitionDetector"]

_MAX_PENDING_CALLS: Final = 1024
"""Tool calls per run awaiting their ``on_tool_post``; older ones are forgotten."""

_LABEL_CHARS: Final = 60
_MAX_IDS: Final = 8
_ID_SCAN: Final = 64
_MAX_CANDIDATES: Final = 4
_LONG_CYCLE_STEPS: Final = 6
_PATTERN_STEPS: Final = 6

_NONE: Final = 0
_WARN: Final = 1
_STOP: Final = 2
_ACTIONS: Final[dict[int, LoopAction]] = {_WARN: "warn", _STOP: "stop"}

_OpKey = tuple[str, int | None, int | None]  # tool, normalised arguments hash, result hash
_CallKey = tuple[str, int | None]
# (side_effecting, read_only, waits)
_Kind = tuple[bool, bool, bool]


class _Pending(NamedTuple):
    """A received call awaiting its result: what the post needs of it."""

    tool: str
    ahash: int | None
    args: Mapping[str, Any]
    kind: _Kind
    applied: frozenset[str]
    page: str | None
    canonical: str


# tuple.__new__ directly: a NamedTuple's own constructor is Python code, and this runs per call.
_new_pending = tuple.__new__


_UNKNOWN_CALL_ARGS: Final[Mapping[str, Any]] = {}
_MISSING: Final = -1
_RESULT_CACHE: Final = 4096
"""Normalised result hashes remembered per detector (raw hash → normalised)."""


class _OpStat:
    """One operation's current streak: how often, how paced, what was reported."""

    __slots__ = ("count", "epoch", "first_ns", "first_pos", "gen", "last_gap",
                 "last_ns", "last_pos", "level", "level_pos", "novel_mark", "paced", "polls",
                 "wait_mark")

    def __init__(self) -> None:
        self.count = self.polls = self.level = self.level_pos = self.novel_mark = 0
        self.epoch = self.gen = self.first_pos = self.last_pos = 0
        self.first_ns = self.last_ns = self.last_gap = self.wait_mark = 0
        self.paced = False


class _SameStat:
    """One (tool, result) pair: how many different arguments gave it."""

    __slots__ = ("args", "distinct", "epoch", "first_pos", "last_pos", "level")

    def __init__(self) -> None:
        self.args: int | None = None
        self.distinct = self.epoch = self.first_pos = self.last_pos = self.level = 0


class _Repetitions:
    """One session's bounded memory: operation streaks, calls, same results, a ring for cycles."""

    __slots__ = ("calls", "cands", "cycle_level", "cycle_period", "cycle_start", "epoch",
                 "floor", "novel", "ops", "pos", "ring", "ring_calls", "same", "wait_ns",
                 "written")

    def __init__(self, ring: int) -> None:
        self.pos = self.epoch = self.floor = self.wait_ns = self.novel = 0
        self.ops: OrderedDict[_OpKey, _OpStat] = OrderedDict()
        # call → [latest result key, generation]; the generation moves when the result changes.
        self.calls: OrderedDict[_CallKey, list[Any]] = OrderedDict()
        self.same: OrderedDict[tuple[str, int], _SameStat] = OrderedDict()
        self.written: OrderedDict[_CallKey, None] = OrderedDict()
        self.ring: list[_OpKey | None] = [None] * ring
        self.ring_calls: list[tuple[str, Mapping[str, Any], str] | None] = [None] * ring
        self.cands: dict[int, int] = {}  # candidate period → steps equal to the one p back
        self.cycle_period = self.cycle_start = 0
        self.cycle_level = _NONE

    def progress(self) -> None:
        """Start a new epoch: read counts and cycle evidence before this point stop counting."""
        self.epoch += 1
        self.floor = self.pos
        self.cands = {}
        self.cycle_period = 0
        self.cycle_level = _NONE


_SIDE_VERBS: Final = frozenset(
    [
        "write", "edit", "create", "delete", "remove", "rm", "mv", "move", "rename", "commit",
        "push", "apply", "patch", "update", "insert", "upsert", "put", "post", "send", "set",
        "add", "install", "deploy", "save", "append", "replace", "merge", "submit", "upload",
        "drop", "truncate", "mkdir", "touch", "kill", "restart", "publish"
    ]
)
_READ_VERBS: Final = frozenset(
    [
        "read", "get", "list", "ls", "search", "find", "grep", "fetch", "query", "lookup",
        "show", "view", "cat", "status", "describe", "inspect", "head", "tail", "stat", "diff",
        "log", "count", "check", "browse", "open", "test", "tests", "lint", "typecheck",
        "validate", "verify"
    ]
)
_WAIT_VERBS: Final = frozenset({"sleep", "wait"})
# Words of a tool name: snake_case, kebab-case and camelCase alike.
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")


def _truncate(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def _recent_ids(s: _Repetitions, size: int, since: int, tool: str, ahash: int | bool | None,
                rkey: int | None) -> list[str]:
    """Call ids of the latest steps (still in the ring, from ``since``) matching the
    operation; ``ahash=False`` matches any arguments. Only run for a detection."""
    ids: list[str] = []
    lowest = max(since, s.pos - min(size, _ID_SCAN) + 1, 1)
    for position in range(s.pos, lowest - 1, -1):
        op = s.ring[position % size]
        call = s.ring_calls[position % size]
        if op is not None and call is not None and op[0] == tool and op[2] == rkey and (
                ahash is False or op[1] == ahash):
            ids.append(call[2])
            if len(ids) == _MAX_IDS:
                break
    ids.reverse()
    return ids


class RepetitionDetector(SessionDetector[_Repetitions]):
    """Detects runaway tool loops, and leaves polling, retries and re-reads between writes alone.

    An *operation* is one completed tool call attempt: ``(tool, arguments,
    result)``, each hashed after normalisation (:class:`~loopobs.detectors.Normaliser`:
    path spellings, whitespace, nonces, timestamps, rising timeouts, reworded
    queries in arguments; timestamps, durations and ids in results). Hooks read:
    ``on_tool_call_received`` (arguments and :class:`~loopobs.contract.events.ToolAnnotations`),
    ``on_tool_post`` (result, duration, error) and ``on_compaction``; a post whose
    call was never received counts with unknown arguments. A call with neither
    arguments nor a result (content capture off, in a span-bridged app) is not
    counted: its tool's name alone is no evidence of a loop.

    Signals, checked after every ``on_tool_post`` (each emits ``on_loop_detected``
    with ``action="warn"`` at ``warn_after`` and ``action="stop"`` at ``stop_after``,
    each escalation once, and the reason on the event):

    - ``repeat``: the same operation again. Identical errors warn one repeat later
      (``warn_after + 1``: a retry budget of three is not a loop). A repeat after more
      than ``novelty`` operations never seen before starts the count over: a re-read
      amid new work, where a loop's steps are themselves repeats.
    - ``cycle``: a sequence of 2 to ``max_period`` steps repeated in a row. Up to 4
      steps it warns after ``warn_after`` cycles; a longer one as soon as
      ``min(period, 6)`` steps match the previous pass. It stops after
      ``max(warn cycles + 1, ceil(stop_after / period))`` cycles, so a long loop
      stops after about ``stop_after`` looping steps.
    - ``same_result``: a tool that is not side-effecting returns the same result
      (at least ``same_result_min_chars`` long, not an error) for different arguments:
      a reworded search, a page past the last one.
    - ``poll_budget``: a repeat that is *paced* does not count as a repeat: a waiting
      tool ran ``min_wait_s`` or more since the previous one (``waits`` annotation, or
      ``sleep``/``wait`` in the name), the idle gap since the previous one was
      ``poll_gap_s`` or more (the call's own duration is not idle), or it grew
      ×1.8 from the previous gap (back-off; at least ``backoff_min_s``, and steady
      gaps after it). The streak warns when it has lasted ``poll_warn_s`` seconds
      and stops at ``poll_stop_s``.

    Progress, which ends streaks: the same call with a different (normalised)
    result; a successful side-effecting call with arguments not seen before, in more
    than their numbers (clears every count of tools that are not side-effecting,
    and cycle evidence);
    a compaction (the agent may re-read what it lost). Whether a tool is
    side-effecting, read-only or waits comes from the event's annotations, else
    from ``annotations``, else (``infer_annotations``) from verbs in its name
    (``write_file``, ``git_commit`` …).

    Memory per session is bounded, whatever the session's length: at most
    ``memory`` operations, calls, results and writes (the oldest first in are
    forgotten) and a ring of ``2 × max_period + 2`` steps. An operation not seen
    for ``horizon`` calls starts over. Cycle search keeps at most four candidate
    periods (found from the distance to an operation's previous occurrence), so
    each call costs the same whatever ``max_period`` is. A stop clears the
    session, so its next run starts afresh.

    Args:
        warn_after: repetitions (or cycles, or arguments) that warn; at least 2.
        stop_after: repetitions that stop; 0 never stops.
        max_period: longest cycle detected; 1 detects plain repetition only.
        horizon: calls after which an operation not seen again is forgotten.
        memory: distinct operations (and calls, results, writes) kept per session.
        normaliser: normalisation rules; ``Normaliser(enabled=False)`` hashes exactly.
        annotations: tool name → annotations, for tools whose events carry none.
        infer_annotations: guess side effects and waiting from tool names.
        same_result_min_chars: shortest result the ``same_result`` signal considers.
        poll_warn_s: seconds a paced poll may return the same result before a warning.
        poll_stop_s: seconds before a stop (0: never).
        min_wait_s: time in waiting tools that paces a repeat.
        backoff_min_s: shortest grown gap read as back-off.
        poll_gap_s: an idle gap this long (previous end to this start) paces a repeat.
        novelty: never-seen operations between two repeats after which the count
            starts over.
        primary_params: tool name → the argument shown in the pattern.
        max_sessions: sessions remembered; the least recently active are dropped.
        window: deprecated alias of ``horizon``.
    """

    name = "RepetitionDetector"

    def __init__(
        self,
        window: int | None = None,
        warn_after: int = 3,
        stop_after: int = 10,
        max_period: int = 64,
        primary_params: Mapping[str, str] | None = None,
        *,
        horizon: int = 200,
        memory: int = 512,
        normaliser: Normaliser | None = None,
        annotations: Mapping[str, ToolAnnotations] | None = None,
        infer_annotations: bool = True,
        same_result_min_chars: int = 24,
        poll_warn_s: float = 1800.0,
        poll_stop_s: float = 7200.0,
        min_wait_s: float = 1.0,
        backoff_min_s: float = 3.0,
        poll_gap_s: float = 30.0,
        novelty: int = 3,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if window is not None:
            horizon = window
        if horizon < 1:
            raise ValueError("window (horizon) must be at least 1")
        if warn_after < 2:
            raise ValueError("warn_after must be at least 2")
        if stop_after and stop_after < warn_after:
            raise ValueError("stop_after must be 0 (never stop) or at least warn_after")
        if max_period < 1:
            raise ValueError("max_period must be at least 1")
        if memory < 1:
            raise ValueError("memory must be at least 1")
        if poll_stop_s and poll_stop_s < poll_warn_s:
            raise ValueError("poll_stop_s must be 0 (never stop) or at least poll_warn_s")
        super().__init__(max_sessions=max_sessions)
        self.horizon = horizon
        self.warn_after = warn_after
        self.stop_after = stop_after
        self.max_period = max_period
        self.memory = memory
        self.normaliser = normaliser if normaliser is not None else Normaliser()
        self.annotations: Mapping[str, ToolAnnotations] = dict(annotations or {})
        self.infer_annotations = infer_annotations
        self.same_result_min_chars = same_result_min_chars
        self.poll_warn_ns = int(poll_warn_s * 1e9)
        self.poll_stop_ns = int(poll_stop_s * 1e9)
        self.min_wait_ns = int(min_wait_s * 1e9)
        self.backoff_min_ns = int(backoff_min_s * 1e9)
        self.poll_gap_ns = int(poll_gap_s * 1e9)
        self.novelty = novelty
        self.primary_params: Mapping[str, str] = dict(primary_params or {})
        self._ring = 2 * max_period + 2
        self._pending: OrderedDict[int, dict[str, _Pending]] = OrderedDict()
        self._kinds: dict[str, _Kind] = {}
        self._normalised: dict[tuple[str, int | None, str | None], int | None] = {}

    @property
    def window(self) -> int:
        """The horizon (kept under its former name)."""
        return self.horizon

    def __repr__(self) -> str:
        return (
            f"RepetitionDetector(warn_after={self.warn_after}, stop_after={self.stop_after}, "
            f"max_period={self.max_period}, horizon={self.horizon}, memory={self.memory})"
        )

    def _new_state(self) -> _Repetitions:
        return _Repetitions(self._ring)

    def reset(self) -> None:
        """Forget every session's state and every call awaiting its result."""
        with self._lock:
            self._pending.clear()
            self._normalised.clear()
        super().reset()

    def _run_ended(self, run_id: int) -> None:
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

    def _kind(self, tool: str, given: ToolAnnotations | None) -> _Kind:
        """(side_effecting, read_only, waits) of ``tool``: event, then settings, then name."""
        on_event = given is not None
        if given is None:
            cached = self._kinds.get(tool)
            if cached is not None:
                return cached
            given = self.annotations.get(tool)
        side = ro = waits = None
        if given is not None:
            side, ro, waits = given.side_effecting, given.read_only, given.waits
            if side is None and ro is not None:
                side = not ro
        if self.infer_annotations and (side is None or waits is None):
            parts = {w.lower() for w in _NAME_PARTS.findall(tool)}
            if side is None and ro is None:
                side = bool(parts & _SIDE_VERBS) and not parts & _WAIT_VERBS
                ro = not side and bool(parts & _READ_VERBS)
            if waits is None:
                waits = bool(parts & _WAIT_VERBS)
        kind = (bool(side), bool(ro), bool(waits))
        if not on_event and len(self._kinds) < 4096:
            self._kinds[tool] = kind
        return kind

    # -- hooks -----------------------------------------------------------------------------
    def on_tool_call_received(self, ctx: ToolCallReceivedContext) -> None:
        """Normalise and hash the call's arguments, to pair with its result at ``on_tool_post``."""
        args = ctx.input
        tool = ctx.tool
        ahash, applied, page, canonical = self.normaliser.arguments_key(tool, args)
        annotations = ctx.annotations
        kind = self._kinds.get(tool) if annotations is None else None
        if kind is None:
            kind = self._kind(tool, annotations)
        entry = _new_pending(_Pending, (tool, ahash, args, kind, applied, page, canonical))
        rid = ctx.run_id.int
        calls = self._pending.get(rid)
        if calls is None:
            with self._lock:
                calls = self._pending.setdefault(rid, {})
                if len(self._pending) > self._max_sessions:
                    self._pending.popitem(last=False)
        # One assignment (atomic): a run's calls need no lock once its dict exists.
        calls[ctx.tool_call_id] = entry
        if len(calls) > _MAX_PENDING_CALLS:
            calls.pop(next(iter(calls)), None)

    def on_compaction(self, ctx: CompactionContext) -> None:
        """The conversation lost context: re-reading from here on is not a repeat."""
        with self._lock:
            _, state = self._state(ctx.run_id)
            state.progress()

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Record the operation and emit ``on_loop_detected`` if it escalates a signal.

        Fires after the attempt's result is known; every attempt counts as one operation.
        """
        raw = ctx.result_hash
        text = ctx.result
        if raw is None and text:
            raw = result_hash(text)
        # dict.get and dict.pop are atomic: no lock needed to take the pending call.
        calls = self._pending.get(ctx.run_id.int)
        pending = calls.pop(ctx.tool_call_id, None) if calls is not None else None
        if pending is None:
            pending = _Pending(ctx.tool, None, _UNKNOWN_CALL_ARGS,
                               self._kind(ctx.tool, None), frozenset(), None, "")
        if raw is None and not ctx.is_error and not pending.args:
            # No arguments and no result to tell this call from the last (content capture
            # off in a span-bridged app): the tool's name alone is no evidence of a loop.
            return
        rkey = raw
        if text:
            # The same text again (a re-read, a loop) normalises as before: look it up.
            cache_key = (pending.tool, raw, pending.page)
            cached = self._normalised.get(cache_key, _MISSING)
            if cached is _MISSING:
                norm = self.normaliser.result_text(pending.tool, text, pending.page)
                if norm is not text:
                    rkey = hash(norm)  # an in-process key, like the arguments'; see below
                if len(self._normalised) >= _RESULT_CACHE:
                    self._normalised.clear()
                self._normalised[cache_key] = rkey
            else:
                rkey = cached
        duration_ns = int(ctx.duration_ms * 1e6) if ctx.duration_ms > 0 else 0
        # A write is new work only if it differs in more than its numbers (a revision
        # counter or a timestamp in an otherwise identical write is not progress).
        shape = (self.normaliser.shape_key(pending.canonical)
                 if pending.kind[0] and not ctx.is_error else None)
        with self._lock:
            key, state = self._state(ctx.run_id)
            detection = self._record(state, pending, rkey, ctx.tool_call_id, ctx.time_ns,
                                     duration_ns, ctx.is_error, len(text) if text else 0,
                                     shape)
            if detection is not None and detection[4] == _STOP:
                self._clear_session(key)
            targets = self._targets
        if detection is None:
            return
        signal, pattern, repetitions, tool, level, ids, reason = detection
        applied = sorted(pending.applied | (
            self.normaliser.result_kinds(pending.tool, text, pending.page)
            if text and rkey != raw else set()))
        event = LoopDetectedContext(
            run_id=ctx.run_id,
            time_ns=ctx.time_ns,
            pattern=pattern,
            repetitions=repetitions,
            tool=tool,
            action=_ACTIONS[level],
            signal=signal,
            reason=reason + (f" (normalised: {', '.join(applied)})" if applied else ""),
            call_ids=tuple(ids),
            normalised=tuple(applied),
            arguments_hash=(stable_hash64(pending.canonical.encode("utf-8", "surrogatepass"))
                            if pending.args is not _UNKNOWN_CALL_ARGS else None),
            raw_arguments_hash=(arguments_hash(pending.args)
                                if pending.args is not _UNKNOWN_CALL_ARGS else None),
            result_hash=(result_hash(self.normaliser.result_text(pending.tool, text,
                                                                 pending.page))
                         if text else raw),
            raw_result_hash=raw,
        )
        for target in targets:
            target.on_loop_detected(event)

    # -- the session's memory --------------------------------------------------------------
    def _record(
        self, s: _Repetitions, p: _Pending, rkey: int | None, call_id: str, time_ns: int,
        duration_ns: int, is_error: bool, result_len: int, shape: int | None,
    ) -> tuple[str, str, int, str | None, int, list[str], str] | None:
        """Add one operation; the detection it completes, if any. Lock held."""
        s.pos += 1
        pos = s.pos
        tool = p.tool
        side, _, waits = p.kind
        if waits:
            s.wait_ns += duration_ns
        memory = self.memory

        call = (tool, p.ahash)
        c = s.calls.get(call)
        if c is None:
            c = s.calls[call] = [rkey, 0]
            if len(s.calls) > memory:
                s.calls.popitem(last=False)
        elif c[0] != rkey:
            c[0] = rkey
            c[1] += 1
        if side and not is_error:
            written = (tool, shape)
            if written not in s.written:
                s.written[written] = None
                if len(s.written) > memory:
                    s.written.popitem(last=False)
                s.progress()

        op = (tool, p.ahash, rkey)
        st = s.ops.get(op)
        prev_pos = 0
        if st is None:
            st = s.ops[op] = _OpStat()
            if len(s.ops) > memory:
                s.ops.popitem(last=False)
            fresh = True
        else:
            prev_pos = st.last_pos
            # Seen again, but after more than a few operations never seen before: a
            # re-read amid new work, not a loop (a loop's steps are themselves repeats).
            fresh = (st.gen != c[1] or (not side and st.epoch != s.epoch)
                     or pos - st.last_pos > self.horizon
                     or s.novel - st.novel_mark > self.novelty)
        paced = False
        if fresh:
            s.novel += 1
            st.count, st.polls, st.level, st.last_gap, st.paced = 1, 0, _NONE, 0, False
            st.first_ns, st.first_pos = time_ns, pos
        else:
            paced = self._paced(s, st, time_ns, duration_ns)
            if paced:
                st.polls += 1
            else:
                st.count += 1
        st.gen, st.epoch, st.last_pos, st.last_ns, st.wait_mark, st.novel_mark = (
            c[1], s.epoch, pos, time_ns, s.wait_ns, s.novel)

        cycle = self._cycle(s, op, (tool, p.args, call_id), pos, prev_pos)
        if cycle is not None and not paced:
            return self._cycle_detection(s, cycle[0], cycle[1], pos)
        if cycle is None:
            s.cycle_period = 0
            s.cycle_level = _NONE
        # A paced cycle (poll, sleep, poll …) is polling: its steps answer to the budget.

        if st.count >= self.warn_after or st.polls:
            detection = self._repeat_detection(s, st, p, rkey, is_error, time_ns)
            if detection is not None:
                return detection
        if side or is_error or rkey is None or result_len < self.same_result_min_chars:
            return None
        return self._same_result(s, p, rkey, call_id, pos)

    def _paced(self, s: _Repetitions, st: _OpStat, time_ns: int, duration_ns: int) -> bool:
        """Whether this repeat of ``st`` waited: a waiting tool ran since, a long idle gap,
        or back-off (the gap grew ×1.8, or held steady after growing). Records the gap.

        The gap runs from the end of the previous occurrence to the start of this one:
        a call that itself takes long (a rising timeout) is not a wait between polls.
        """
        gap = time_ns - duration_ns - st.last_ns
        last = st.last_gap
        st.last_gap = gap
        paced = s.wait_ns - st.wait_mark >= self.min_wait_ns or gap >= self.poll_gap_ns or (
            last > 0 and gap >= self.backoff_min_ns
            and (gap * 10 >= last * 18 or (st.paced and gap * 10 >= last * 9)))
        st.paced = paced
        return paced

    def _level(self, n: int, warn_at: int) -> int:
        if self.stop_after and n >= self.stop_after:
            return _STOP
        return _WARN if n >= warn_at else _NONE

    def _repeat_detection(
        self, s: _Repetitions, st: _OpStat, p: _Pending, rkey: int | None, is_error: bool,
        time_ns: int,
    ) -> tuple[str, str, int, str | None, int, list[str], str] | None:
        warn_at = self.warn_after + 1 if is_error else self.warn_after
        level = self._level(st.count, warn_at)
        signal = "repeat"
        if st.polls:
            elapsed = time_ns - st.first_ns
            budget = (_STOP if self.poll_stop_ns and elapsed >= self.poll_stop_ns
                      else _WARN if elapsed >= self.poll_warn_ns else _NONE)
            if budget > level:
                level, signal = budget, "poll_budget"
        if level <= st.level:
            return None
        st.level, st.level_pos = level, st.last_pos
        label = self.label(p.tool, p.args)
        n = st.count + st.polls
        if signal == "poll_budget":
            reason = (f"{label} was polled {n} times over {(time_ns - st.first_ns) / 1e9:.0f} s "
                      f"with the same result, past the "
                      f"{(self.poll_stop_ns if level == _STOP else self.poll_warn_ns) / 1e9:.0f} s "
                      f"polling budget")
        else:
            what = "failed with the same error" if is_error else "returned the same result"
            reason = f"{label} {what} {n} times"
            if st.polls:
                reason += f" ({st.count} of them without waiting)"
        return signal, label, st.count if signal == "repeat" else n, p.tool, level, \
            _recent_ids(s, self._ring, st.first_pos, p.tool, p.ahash, rkey), reason

    def _same_result(
        self, s: _Repetitions, p: _Pending, rkey: int, call_id: str, pos: int
    ) -> tuple[str, str, int, str | None, int, list[str], str] | None:
        key = (p.tool, rkey)
        sr = s.same.get(key)
        if sr is None:
            sr = s.same[key] = _SameStat()
            if len(s.same) > self.memory:
                s.same.popitem(last=False)
            fresh = True
        else:
            fresh = sr.epoch != s.epoch or pos - sr.last_pos > self.horizon
        if fresh:
            sr.args, sr.distinct, sr.level, sr.epoch = p.ahash, 1, _NONE, s.epoch
            sr.first_pos = pos
        elif sr.args != p.ahash:
            sr.args = p.ahash
            sr.distinct += 1
        sr.last_pos = pos
        level = self._level(sr.distinct, self.warn_after)
        if level <= sr.level:
            return None
        sr.level = level
        label = self.label(p.tool, p.args)
        reason = (f"{p.tool} returned the same result for {sr.distinct} different arguments "
                  f"in a row of calls, latest {label}")
        ids = _recent_ids(s, self._ring, sr.first_pos, p.tool, False, rkey)
        return "same_result", label, sr.distinct, p.tool, level, ids, reason

    # -- cycles ----------------------------------------------------------------------------
    def _cycle(
        self, s: _Repetitions, op: _OpKey, call: tuple[str, Mapping[str, Any], str],
        pos: int, prev_pos: int,
    ) -> tuple[int, int] | None:
        """Update the candidate periods with ``op``; the cycle the tail is in, if any."""
        ring, size, floor = s.ring, self._ring, s.floor
        idx = pos % size
        ring[idx] = op
        s.ring_calls[idx] = call
        if not s.cands and (prev_pos <= floor or pos - prev_pos > self.max_period):
            return None  # no candidate to extend and none to start: the common case
        cands: dict[int, int] = {}
        for period, run in s.cands.items():
            back = pos - period
            if back > floor and ring[back % size] == op:
                cands[period] = run + 1
        if prev_pos > floor:
            d = pos - prev_pos
            if d <= self.max_period and d not in cands:
                # The run may have started before d became a candidate: count it back.
                run, i, lowest = 1, pos - 1, max(floor, pos - size)
                while i - d > lowest and ring[i % size] == ring[(i - d) % size]:
                    run += 1
                    i -= 1
                cands[d] = run
        if len(cands) > _MAX_CANDIDATES:
            cands = dict(sorted(cands.items(), key=lambda kv: -kv[1])[:_MAX_CANDIDATES])
        s.cands = cands
        best = 0
        for period, run in cands.items():
            if run >= min(period, _LONG_CYCLE_STEPS) and (not best or period < best):
                best = period
        if best < 2:
            return None
        return best, cands[best]

    def _cycle_levels(self, period: int) -> tuple[int, int]:
        """Cycles that warn and cycles that stop (0: never) for ``period``."""
        warn = self.warn_after if period <= 4 else 2
        stop = max(warn + 1, math.ceil(self.stop_after / period)) if self.stop_after else 0
        return warn, stop

    def _cycle_detection(
        self, s: _Repetitions, period: int, run: int, pos: int
    ) -> tuple[str, str, int, str | None, int, list[str], str] | None:
        if s.cycle_period != period:
            s.cycle_period = period
            s.cycle_level = _NONE
            s.cycle_start = pos - period + 1
        cycles = (run + period) // period
        warn, stop = self._cycle_levels(period)
        if stop and cycles >= stop:
            level = _STOP
        elif cycles >= warn or (period > 4 and run >= min(period, _LONG_CYCLE_STEPS)):
            level = _WARN
        else:
            level = _NONE
        if level <= s.cycle_level:
            return None
        s.cycle_level = level
        size = self._ring
        # The block as first seen (A → B, not B → A), its latest full pass.
        first = pos - period + 1
        start = first + (s.cycle_start - first) % period
        if start > first:
            start -= period
        members = [s.ring[(start + i) % size] for i in range(period)]
        calls = [s.ring_calls[(start + i) % size] for i in range(period)]
        # A step of the cycle may already have been reported as a plain repeat while the
        # cycle was forming: that report was this escalation.
        began = pos - run - period
        reported = False
        for member in members:
            stat = s.ops.get(member) if member is not None else None
            if stat is None:
                continue
            if stat.level >= level:
                reported = reported or stat.level_pos > began
            else:
                stat.level, stat.level_pos = level, pos
        if reported:
            return None
        labels = [self.label(c[0], c[1]) for c in calls if c is not None]
        shown = labels if period <= _PATTERN_STEPS else [*labels[:_PATTERN_STEPS - 1], "…"]
        pattern = " → ".join(shown)
        tools = {c[0] for c in calls if c is not None}
        ids = [c[2] for c in calls if c is not None][-_MAX_IDS:]
        reason = (f"a {period}-step sequence of calls repeated with the same results "
                  f"({run} steps in a row equal to the step {period} before)")
        tool = tools.pop() if len(tools) == 1 else None
        return "cycle", pattern, max(cycles, 2), tool, level, ids, reason
