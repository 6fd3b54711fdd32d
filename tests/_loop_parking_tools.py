"""Parking tools for the ``test_loop_parking`` tests, importable by a subprocess that resumes."""

from __future__ import annotations

import datetime as dt

from loopobs import Sleep, Suspend, tool

WAKE = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
SCHEMA = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}

naps: list[int] = []


@tool
def approve(amount: int) -> Suspend:
    """Ask a person to approve a payment."""
    return Suspend(f"approve a payment of {amount}", SCHEMA)


@tool
def webhook() -> Suspend:
    """Wait for an external system."""
    return Suspend("waiting for the payment provider").on_signal()


@tool
def nap(minutes: int) -> Sleep | str:
    """Sleeps on its first call, answers on the next ones."""
    naps.append(minutes)
    if len(naps) == 1:
        return Sleep.until(WAKE)
    return f"rested {minutes} minutes"
