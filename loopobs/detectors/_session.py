"""Shared plumbing of the detectors: attached sets, run → session map, bounded state, one lock."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, Final, Generic, TypeVar
from uuid import UUID

from mypy_extensions import mypyc_attr

from loopobs.contract.events import RunEndContext, RunStartContext
from loopobs.contract.observer import LoopObserver, ObserverSet

__all__ = ["DEFAULT_MAX_SESSIONS", "SNAPSHOT_VERSION", "SessionDetector", "SnapshotRejected"]

SNAPSHOT_VERSION: Final = 3
"""The version of a detector's session snapshot; a version not in :data:`READABLE_VERSIONS`
is ignored on restore. (2: a command call with other arguments is keyed on its line's key
mixed with theirs. 3: the repetition detector's clock runs without the model's time, and
its snapshot counts that time.)"""
READABLE_VERSIONS: Final = frozenset({2, SNAPSHOT_VERSION})
"""The versions :meth:`SessionDetector.restore` reads: a version 2 snapshot is this one
without the model's time, so its times are read as if the model had taken none."""

logger = logging.getLogger("loopobs.detectors")


class SnapshotRejected(ValueError):
    """A session snapshot that cannot be restored (corrupt, another version or detector)."""


DEFAULT_MAX_SESSIONS: Final = 4096
"""Sessions (and runs never started) a detector remembers; the least recently active go first."""

_State = TypeVar("_State")


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py), yet subclassable
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
        return self._state_of(run_id.int)

    def _state_of(self, rid: int) -> tuple[int, _State]:
        """:meth:`_state` by the run id's ``int`` (a hook that has it already); lock held."""
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

    # -- state that moves between workers ----------------------------------------------------
    snapshot_kind: str = ""
    """The kind a snapshot names (a detector with none keeps its state in the process)."""

    def snapshot(self, session_id: UUID) -> dict[str, Any] | None:
        """The session's state as plain JSON data (bounded, versioned; hashes and counts,
        never message content), or None when the detector has none for it.

        An :class:`~loopobs.sessions.session.AgentSession` saves it in its store after each
        run and restores it when the session is reopened, maybe on another worker.
        """
        if not self.snapshot_kind:
            return None
        with self._lock:
            state = self._sessions.get(session_id.int)
            if state is None:
                return None
            body = self._dump(state)
        return {
            "v": SNAPSHOT_VERSION,
            "kind": self.snapshot_kind,
            "config": self._config(),
            "state": body,
        }

    def restore(self, session_id: UUID, snapshot: Any) -> bool:
        """Take the session's state from ``snapshot`` (of :meth:`snapshot`); True if it was.

        A snapshot that is corrupt, of another version, of another detector or of another
        configuration is ignored with a warning: the session starts with fresh state, and
        nothing raises.
        """
        try:
            if not isinstance(snapshot, dict):
                raise SnapshotRejected("not a mapping")
            if snapshot.get("v") not in READABLE_VERSIONS:
                raise SnapshotRejected(f"version {snapshot.get('v')!r}, not {SNAPSHOT_VERSION}")
            if not self.snapshot_kind or snapshot.get("kind") != self.snapshot_kind:
                raise SnapshotRejected(f"a snapshot of {snapshot.get('kind')!r}")
            if snapshot.get("config") != self._config():
                raise SnapshotRejected("made with another configuration")
            state = self._load(snapshot.get("state"))
        except (SnapshotRejected, TypeError, ValueError, KeyError, IndexError) as exc:
            logger.warning(
                "%s: ignored the stored state of session %s (%s); it starts fresh",
                type(self).__name__,
                session_id,
                exc,
            )
            return False
        with self._lock:
            key = session_id.int
            self._sessions[key] = state
            self._sessions.move_to_end(key)
            if len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)
            self._latest_key = -1
        return True

    def _config(self) -> list[Any]:
        """The settings a snapshot's state depends on (a mismatch rejects it)."""
        return []

    def _dump(self, state: _State) -> Any:
        raise NotImplementedError

    def _load(self, data: Any) -> _State:
        raise NotImplementedError

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
