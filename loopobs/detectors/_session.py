"""Shared plumbing of the detectors: attached sets, run → session map, bounded state, one lock."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Final, Generic, TypeVar
from uuid import UUID

from loopobs.contract.events import RunEndContext, RunStartContext
from loopobs.contract.observer import LoopObserver, ObserverSet

__all__ = ["DEFAULT_MAX_SESSIONS", "SessionDetector"]

DEFAULT_MAX_SESSIONS: Final = 4096
"""Sessions (and runs never started) a detector remembers; the least recently active go first."""

_State = TypeVar("_State")


class SessionDetector(LoopObserver, Generic[_State]):
    """Shared plumbing: attached sets, run → session map, bounded per-session state, one lock."""

    def __init__(self, *, max_sessions: int) -> None:
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self._max_sessions = max_sessions
        self._lock = threading.Lock()
        self._targets: tuple[ObserverSet, ...] = ()
        # Keyed on UUID.int: UUID.__hash__ is Python code, an int hashes in C.
        self._run_sessions: dict[int, int] = {}
        self._sessions: OrderedDict[int, _State] = OrderedDict()
        self._latest_key = -1

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
            self._run_sessions[ctx.run_id.int] = ctx.session_id.int
            if len(self._run_sessions) > self._max_sessions:
                del self._run_sessions[next(iter(self._run_sessions))]

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Forget the run (its session's state stays, for the session's next run)."""
        with self._lock:
            self._run_sessions.pop(ctx.run_id.int, None)
            self._run_ended(ctx.run_id.int)

    def _run_ended(self, run_id: int) -> None:
        """Drop per-run state; called with the lock held."""

    def _new_state(self) -> _State:
        raise NotImplementedError

    def _state(self, run_id: UUID) -> tuple[int, _State]:
        """The session key and state of ``run_id``, created on first use; lock held."""
        rid = run_id.int
        key = self._run_sessions.get(rid, rid)
        sessions = self._sessions
        if key == self._latest_key:
            # The session used last is already the most recent: no reordering to do.
            state = sessions.get(key)
            if state is not None:
                return key, state
        state = sessions.get(key)
        if state is None:
            state = sessions[key] = self._new_state()
            if len(sessions) > self._max_sessions:
                sessions.popitem(last=False)
        else:
            sessions.move_to_end(key)
        self._latest_key = key
        return key, state

    def _clear_session(self, key: int) -> None:
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
