"""The run → trace table now lives in :mod:`loopobs.core.trace_links`; this name re-exports it."""

from loopobs.core.trace_links import (
    ENDED_CAPACITY,
    LINKS,
    TraceLinks,
    carrier,
    lookup,
    publish,
    reset,
    resolve,
    restore,
    withdraw,
)

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
