"""Plausibility checks for the token counts a model backend reports.

A provider (or a proxy, or a bug) can report any number. One absurd count
(``2**64``) accepted into a run's usage would reach every metric that sums
tokens and make each later metric export fail to encode, for every run after.
So counts are checked where they enter: a count that is not an ``int``, is
negative, or exceeds :data:`MAX_TOKEN_COUNT` is treated as unknown (as if the
provider had not reported it) and counted by whoever checks it.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from loopobs.contract.events import Usage

__all__ = ["MAX_TOKEN_COUNT", "plausible_token_count", "plausible_usage"]

logger = logging.getLogger("loopobs.usage")

MAX_TOKEN_COUNT = 1_000_000_000
"""The largest token count one model call may report: far above any context window,
far below what a 64-bit metric sum overflows at."""

_FIELDS = tuple(f.name for f in dataclasses.fields(Usage) if f.name != "details")


def plausible_token_count(value: Any) -> int | None:
    """``value`` if it is an ``int`` in ``[0, MAX_TOKEN_COUNT]``, else None (unknown)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    if 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


def plausible_usage(usage: Usage) -> tuple[Usage, int]:
    """``usage`` with every implausible count set to 0 (unknown), and how many there were.

    Logs a warning naming the dropped fields.
    """
    dropped = [name for name in _FIELDS if plausible_token_count(getattr(usage, name)) is None]
    if not dropped:
        return usage, 0
    logger.warning(
        "a model backend reported implausible token counts (%s); they are treated as unknown",
        ", ".join(dropped),
    )
    zeroed: dict[str, Any] = dict.fromkeys(dropped, 0)
    return dataclasses.replace(usage, **zeroed), len(dropped)
