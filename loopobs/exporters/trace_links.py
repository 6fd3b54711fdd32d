"""Where a run's trace lives, for other exporters (and a resumed run) to point at it.

``TracingObserver`` publishes the trace and span id of each run's root span
while the run is open; the Prometheus observer reads them to attach exemplars
(so a dashboard can jump from a latency spike to the trace). :func:`lookup`
sees only open runs; the table is cleared at ``on_run_end``.

A parked run must stay linked to the run that resumes it, maybe days later and
in another process. The checkpoint carries a W3C ``traceparent`` carrier:

- when the run parks (before its ``on_run_end``), the loop stores
  ``trace_links.carrier(run_id)`` in the checkpoint;
- before emitting the resumed run's ``on_run_start(resumed_from=parked_id)``,
  the loop calls ``trace_links.restore(parked_id, checkpoint_carrier)``.

``TracingObserver`` then finds the parked run's span with :func:`resolve` and
links the new run span to it. Ended runs are remembered in a bounded table
(:data:`ENDED_CAPACITY` entries, oldest dropped first), so an in-process resume
works even without the checkpoint.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from uuid import UUID

__all__ = ["ENDED_CAPACITY", "carrier", "lookup", "publish", "resolve", "restore", "withdraw"]

ENDED_CAPACITY = 4096
"""How many ended (or restored) runs :func:`resolve` remembers."""

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

_lock = threading.Lock()
_runs: dict[UUID, tuple[str, str]] = {}
_ended: OrderedDict[UUID, tuple[str, str]] = OrderedDict()


def publish(run_id: UUID, trace_id: str, span_id: str) -> None:
    """Record the hex trace id and span id of ``run_id``'s root span."""
    with _lock:
        _runs[run_id] = (trace_id, span_id)


def withdraw(run_id: UUID) -> None:
    """Forget ``run_id`` as an open run (its run ended); :func:`resolve` still finds it."""
    with _lock:
        pair = _runs.pop(run_id, None)
        if pair is not None:
            _remember(run_id, pair)


def lookup(run_id: UUID) -> tuple[str, str] | None:
    """The ``(trace_id, span_id)`` hex pair of ``run_id``'s root span, if open and traced."""
    return _runs.get(run_id)


def resolve(run_id: UUID) -> tuple[str, str] | None:
    """Like :func:`lookup`, but also finds ended and :func:`restore`-d runs."""
    with _lock:
        return _runs.get(run_id) or _ended.get(run_id)


def carrier(run_id: UUID) -> dict[str, str] | None:
    """A W3C trace-context carrier (``{"traceparent": ...}``) for ``run_id``'s root span."""
    pair = resolve(run_id)
    if pair is None:
        return None
    return {"traceparent": f"00-{pair[0]}-{pair[1]}-01"}


def restore(run_id: UUID, trace_context: Mapping[str, str] | None) -> bool:
    """Make ``run_id``'s span known again from a checkpoint's carrier.

    Returns whether the carrier held a valid ``traceparent``; an empty or
    malformed one is ignored (the resumed run is then simply not linked).
    """
    if not trace_context:
        return False
    match = _TRACEPARENT.match(str(trace_context.get("traceparent", "")).strip().lower())
    if match is None or set(match.group(1)) == {"0"} or set(match.group(2)) == {"0"}:
        return False
    with _lock:
        _remember(run_id, (match.group(1), match.group(2)))
    return True


def _remember(run_id: UUID, pair: tuple[str, str]) -> None:
    _ended[run_id] = pair
    _ended.move_to_end(run_id)
    while len(_ended) > ENDED_CAPACITY:
        _ended.popitem(last=False)
