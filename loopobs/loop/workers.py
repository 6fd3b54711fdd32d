"""Worker threads for sync tools: owned by the loop, bounded, never waited for at shutdown.

A sync tool runs on a :class:`ToolWorkers` thread so it never blocks the event
loop. The pool is the loop's own, not asyncio's default executor: a call that
outlives its timeout keeps its thread (Python cannot stop a thread) but the run
goes on at the timeout, ``asyncio.run`` (and so ``run_sync``) does not wait for
it, and its daemon thread does not hold up the process at exit. When every
thread is still busy, a new call fails at once with
:class:`~loopobs.contract.errors.ToolWorkersExhausted` instead of queueing behind
calls that may never end.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from loopobs.contract.errors import ToolWorkersExhausted

__all__ = ["DEFAULT_TOOL_WORKERS", "ToolWorkers"]

DEFAULT_TOOL_WORKERS = 32
"""Sync tool calls one loop runs at once (and threads it starts at most)."""

_T = TypeVar("_T")
_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class ToolWorkers:
    """At most ``max_workers`` daemon threads, started on demand and kept for reuse.

    Thread-safe; one pool may serve several event loops (each call settles its
    future on the loop that awaited it).
    """

    def __init__(self, max_workers: int = DEFAULT_TOOL_WORKERS) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy = 0
        self._threads = 0

    @property
    def busy(self) -> int:
        """Calls started and not yet returned (timed-out ones included)."""
        return self._busy

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return self._threads

    async def run(self, fn: Callable[[], _T], *, tool: str = "") -> _T:
        """Run ``fn`` on a worker thread (in a copy of the current context) and await it.

        Cancelling the caller (a timeout) returns at once; the thread finishes
        the call on its own and is then free again.

        Raises:
            ToolWorkersExhausted: every thread is busy; ``fn`` did not run.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        context = contextvars.copy_context()
        with self._lock:
            if self._busy >= self.max_workers:
                raise ToolWorkersExhausted(tool=tool, workers=self.max_workers)
            self._busy += 1
            # Every queued or running call has a thread of its own: no call waits in the
            # queue behind one that hangs.
            if self._threads < self._busy:
                self._threads += 1
                threading.Thread(
                    target=self._work, name=f"loopobs-tool-{self._threads}", daemon=True
                ).start()
        self._jobs.put((lambda: context.run(fn), loop, future))
        result: _T = await future
        return result

    def _work(self) -> None:
        while True:
            call, loop, future = self._jobs.get()
            outcome: tuple[bool, Any]
            try:
                outcome = (True, call())
            except BaseException as exc:  # the tool's failure goes to its caller
                outcome = (False, exc)
            finally:
                with self._lock:
                    self._busy -= 1
            # A closed event loop refuses the callback: nobody waits for this result.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, outcome)


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return  # the caller gave up (timeout or cancellation)
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
