"""What every Redis-backed part shares: the store's name and deadlines on each call."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from loopobs.contract.errors import StoreUnavailable

__all__ = ["bounded", "store_name"]

_T = TypeVar("_T")


def store_name(client: Any) -> str:
    """``redis://host:port/db`` of a ``redis.asyncio.Redis`` client (no password)."""
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return "redis"
    if "path" in kwargs:
        return f"redis+unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


async def bounded(call: Awaitable[_T], *, timeout_s: float, store: str, what: str) -> _T:
    """Await ``call`` for at most ``timeout_s``; any failure becomes :class:`StoreUnavailable`.

    Cancellation of the caller passes through unchanged.
    """
    try:
        return await asyncio.wait_for(call, timeout_s)
    except asyncio.TimeoutError:
        raise StoreUnavailable(
            store=store, reason=f"{what} took longer than {timeout_s:g}s"
        ) from None
    except Exception as exc:
        # redis-py's own errors (ConnectionError, TimeoutError, ResponseError…) share no
        # base class with the standard library's; name them without importing redis here.
        if isinstance(exc, OSError) or type(exc).__module__.startswith("redis"):
            raise StoreUnavailable(
                store=store, reason=f"{what} failed: {type(exc).__name__}: {exc}"
            ) from exc
        raise
