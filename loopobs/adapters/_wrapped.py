"""Finding loopobs's stop inside the exception a framework wrapped it in."""

from __future__ import annotations

from loopobs.adapters._run import RunStopped

__all__ = ["stop_of"]

_DEPTH = 8


def stop_of(error: BaseException | None) -> RunStopped | None:
    """The :class:`RunStopped` behind ``error``, if any.

    Some frameworks re-raise an exception from a hook wrapped in one of their own (ADK's
    plugin manager in a ``RuntimeError``, Strands' event loop in an ``EventLoopException``),
    chaining the original as ``__cause__``: this follows the chain (a few links deep).
    """
    for _ in range(_DEPTH):
        if error is None or isinstance(error, RunStopped):
            return error
        error = error.__cause__
    return None
