"""What the OTel observers do with the SDK providers they were given (never global ones)."""

from __future__ import annotations

from typing import Any

__all__ = ["flush_provider"]

DEFAULT_FLUSH_TIMEOUT_S = 30.0


def flush_provider(provider: Any, timeout_s: float | None) -> bool:
    """Flush ``provider`` within ``timeout_s`` (default 30 s) if it can flush.

    Returns False only when the provider reports it could not flush in time; an
    API-only provider (nothing to flush) counts as flushed.
    """
    flush = getattr(provider, "force_flush", None)
    if flush is None:
        return True
    timeout_ms = int((DEFAULT_FLUSH_TIMEOUT_S if timeout_s is None else timeout_s) * 1000)
    return flush(timeout_ms) is not False
