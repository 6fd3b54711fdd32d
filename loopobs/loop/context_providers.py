"""Context providers: async functions whose text joins each model call as a system message.

A provider receives the run's query (the latest user message) and returns
text, or ``""``/None for nothing. Before every model call of a run the loop
runs all providers concurrently, each under its own timeout; the texts of
those that answered go into that call's request as system messages (after the
conversation, in the order the providers were given), and are not kept in the
session's history. A provider that raises (``CancelledError`` too, when nothing
cancelled it) or runs past its timeout is skipped (cancelled if still running);
the call goes on without it. Every provider's
outcome is an ``on_context_provider`` event, emitted in provider order after
``on_turn_start`` and before the turn's ``on_stream_start``.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from loopobs.contract.errors import ProviderFailed
from loopobs.contract.events import ContextProviderContext, ContextProviderOutcome
from loopobs.contract.observer import ObserverSet

__all__ = ["ContextProvider", "ProviderSpec", "gather_context", "provider_spec"]

ContextProvider = Callable[[str], Awaitable[str | None]]
"""``async def provider(query: str) -> str | None``."""


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """A provider with the name its events carry and its timeout (None: the loop's).

    ``quiet_when_empty``: an empty answer emits no event (for providers that
    usually have nothing, such as a session's injected hints).
    """

    fn: ContextProvider
    name: str
    timeout: float | None = None
    quiet_when_empty: bool = False


def provider_spec(given: ContextProvider | ProviderSpec) -> ProviderSpec:
    """``given`` as a :class:`ProviderSpec` (a function's name is its ``__name__``)."""
    if isinstance(given, ProviderSpec):
        return given
    if not callable(given):
        raise TypeError(f"a context provider must be an async callable, not {given!r}")
    name = getattr(given, "name", None) or getattr(given, "__name__", None) or type(given).__name__
    return ProviderSpec(given, str(name))


@dataclass(slots=True)
class _Result:
    outcome: ContextProviderOutcome
    text: str | None
    duration_ms: float
    error: ProviderFailed | None = None


async def _run_one(spec: ProviderSpec, query: str, timeout: float | None) -> _Result:
    started = time.perf_counter()
    try:
        answer = spec.fn(query)
        if not inspect.isawaitable(answer):
            raise TypeError(f"context provider {spec.name!r} is not async")
        text: object = await (answer if timeout is None else asyncio.wait_for(answer, timeout))
    except asyncio.TimeoutError:
        return _Result(
            "timeout",
            None,
            (time.perf_counter() - started) * 1000.0,
            ProviderFailed(
                f"context provider {spec.name!r} ran past its timeout of {timeout:g}s",
                context_provider=spec.name,
                error_type="timeout",
            ),
        )
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise  # the run is cancelled: every provider is
        # Nothing cancelled this provider: it raised CancelledError itself, and that is
        # its own failure, not the run's cancellation.
        return _Result(
            "error",
            None,
            (time.perf_counter() - started) * 1000.0,
            ProviderFailed(
                f"context provider {spec.name!r} failed: it raised CancelledError itself",
                context_provider=spec.name,
                error_type="CancelledError",
            ),
        )
    except Exception as exc:
        return _Result(
            "error",
            None,
            (time.perf_counter() - started) * 1000.0,
            ProviderFailed(
                f"context provider {spec.name!r} failed: {type(exc).__name__}",
                context_provider=spec.name,
                error_type=type(exc).__name__,
            ),
        )
    duration = (time.perf_counter() - started) * 1000.0
    if text is None or text == "":
        return _Result("empty", None, duration)
    if not isinstance(text, str):
        return _Result(
            "error",
            None,
            duration,
            ProviderFailed(
                f"context provider {spec.name!r} returned {type(text).__name__}, not text",
                context_provider=spec.name,
                error_type="TypeError",
            ),
        )
    return _Result("ok", text, duration)


async def gather_context(
    providers: Sequence[ProviderSpec],
    observers: ObserverSet,
    run_id: uuid.UUID,
    turn: int,
    query: str,
    timeout: float | None,
) -> list[str]:
    """Run ``providers`` concurrently; emit each outcome; return the texts to inject.

    A cancellation of the caller cancels every provider still running (and no
    event is emitted for them).
    """
    if not providers:
        return []
    results = await asyncio.gather(
        *(_run_one(p, query, p.timeout if p.timeout is not None else timeout) for p in providers)
    )
    texts: list[str] = []
    listening = observers.listens("on_context_provider")
    for spec, result in zip(providers, results, strict=True):
        if result.text is not None:
            texts.append(result.text)
        if listening and not (result.outcome == "empty" and spec.quiet_when_empty):
            observers.on_context_provider(
                ContextProviderContext(
                    run_id=run_id,
                    time_ns=time.time_ns(),
                    turn=turn,
                    provider=spec.name,
                    outcome=result.outcome,
                    duration_ms=result.duration_ms,
                    chars=len(result.text or ""),
                    error=result.error,
                    text=result.text,
                )
            )
    return texts
