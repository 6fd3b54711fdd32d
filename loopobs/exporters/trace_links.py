"""Where a run's trace lives, for other exporters to point at it.

``TracingObserver`` publishes the trace and span id of each run's root span
while the run is open; the Prometheus observer reads them to attach exemplars
(so a dashboard can jump from a latency spike to the trace). The table holds
only open runs and is cleared at ``on_run_end``.
"""

from __future__ import annotations

import threading
from uuid import UUID

__all__ = ["lookup", "publish", "withdraw"]

_lock = threading.Lock()
_runs: dict[UUID, tuple[str, str]] = {}


def publish(run_id: UUID, trace_id: str, span_id: str) -> None:
    """Record the hex trace id and span id of ``run_id``'s root span."""
    with _lock:
        _runs[run_id] = (trace_id, span_id)


def withdraw(run_id: UUID) -> None:
    """Forget ``run_id`` (its run ended)."""
    with _lock:
        _runs.pop(run_id, None)


def lookup(run_id: UUID) -> tuple[str, str] | None:
    """The ``(trace_id, span_id)`` hex pair of ``run_id``'s root span, if traced."""
    return _runs.get(run_id)
