"""Where a run's trace lives, for exporters (and a resumed run) to point at it.

A :class:`TraceLinks` table maps a run id to the hex trace and span id of the
run's root span. ``TracingObserver`` publishes each run's pair while the run
is open; the Prometheus observer reads it to attach exemplars (so a dashboard
can jump from a latency spike to the trace). :meth:`TraceLinks.lookup` sees
only open runs; :meth:`TraceLinks.withdraw` at ``on_run_end`` moves a run to a
bounded table of ended runs (:data:`ENDED_CAPACITY`, oldest dropped first).

A parked run must stay linked to the run that resumes it, maybe days later and
in another process. The checkpoint carries a W3C ``traceparent`` carrier:

- when the run parks (before its ``on_run_end``), the loop stores
  :meth:`TraceLinks.carrier` of the run in the checkpoint;
- before emitting the resumed run's ``on_run_start(resumed_from=parked_id)``,
  the loop calls :meth:`TraceLinks.restore` with the checkpoint's carrier.

``TracingObserver`` then finds the parked run's span with
:meth:`TraceLinks.resolve` and links the new run span to it.

The process shares one table, :data:`LINKS`; the module-level functions act on
it, and :func:`reset` empties it (for tests).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from uuid import UUID

__all__ = [
    "ENDED_CAPACITY",
    "LINKS",
    "TraceLinks",
    "carrier",
    "lookup",
    "publish",
    "reset",
    "resolve",
    "restore",
    "withdraw",
]

ENDED_CAPACITY = 4096
"""How many ended (or restored) runs :meth:`TraceLinks.resolve` remembers by default."""

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")


class TraceLinks:
    """Run id → ``(trace_id, span_id)`` of the run's root span; thread-safe and bounded.

    Open runs stay until withdrawn; ended and restored runs are kept up to
    ``ended_capacity`` entries, the least recently added dropped first.
    """

    def __init__(self, ended_capacity: int = ENDED_CAPACITY) -> None:
        if ended_capacity < 1:
            raise ValueError("ended_capacity must be at least 1")
        self.ended_capacity = ended_capacity
        self._lock = threading.Lock()
        self._open: dict[UUID, tuple[str, str]] = {}
        self._ended: OrderedDict[UUID, tuple[str, str]] = OrderedDict()

    @property
    def open_runs(self) -> int:
        """How many runs are published and not yet withdrawn."""
        return len(self._open)

    def publish(self, run_id: UUID, trace_id: str, span_id: str) -> None:
        """Record the hex trace id and span id of ``run_id``'s root span."""
        with self._lock:
            self._open[run_id] = (trace_id, span_id)

    def withdraw(self, run_id: UUID) -> None:
        """Forget ``run_id`` as an open run (its run ended); :meth:`resolve` still finds it."""
        with self._lock:
            pair = self._open.pop(run_id, None)
            if pair is not None:
                self._remember(run_id, pair)

    def lookup(self, run_id: UUID) -> tuple[str, str] | None:
        """The ``(trace_id, span_id)`` hex pair of ``run_id``'s root span, if open and traced."""
        return self._open.get(run_id)

    def resolve(self, run_id: UUID) -> tuple[str, str] | None:
        """Like :meth:`lookup`, but also finds ended and :meth:`restore`-d runs."""
        with self._lock:
            return self._open.get(run_id) or self._ended.get(run_id)

    def carrier(self, run_id: UUID) -> dict[str, str] | None:
        """A W3C trace-context carrier (``{"traceparent": ...}``) for ``run_id``'s root span."""
        pair = self.resolve(run_id)
        if pair is None:
            return None
        return {"traceparent": f"00-{pair[0]}-{pair[1]}-01"}

    def restore(self, run_id: UUID, trace_context: Mapping[str, str] | None) -> bool:
        """Make ``run_id``'s span known again from a checkpoint's carrier.

        Returns whether the carrier held a valid ``traceparent``; an empty or
        malformed one is ignored (the resumed run is then simply not linked).
        """
        if not trace_context:
            return False
        match = _TRACEPARENT.match(str(trace_context.get("traceparent", "")).strip().lower())
        if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
            return False
        with self._lock:
            self._remember(run_id, (match.group(1), match.group(2)))
        return True

    def reset(self) -> None:
        """Forget every run, open and ended."""
        with self._lock:
            self._open.clear()
            self._ended.clear()

    def _remember(self, run_id: UUID, pair: tuple[str, str]) -> None:
        ended = self._ended
        ended[run_id] = pair
        ended.move_to_end(run_id)
        while len(ended) > self.ended_capacity:
            ended.popitem(last=False)


LINKS = TraceLinks()
"""The process's table: the loop and the exporters meet here unless given another."""

publish = LINKS.publish
withdraw = LINKS.withdraw
lookup = LINKS.lookup
resolve = LINKS.resolve
carrier = LINKS.carrier
restore = LINKS.restore
reset = LINKS.reset
