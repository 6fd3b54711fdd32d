"""CrewAI: the span bridge reports a crew's runs, and a CrewAI hook ends a stopped one.

CrewAI writes no GenAI spans of its own; OpenInference's CrewAI instrumentor does (crews,
tasks, agents, tools), and an OpenAI instrumentor adds the model calls. The span bridge
(:class:`~loopobs.adapters.otel.GenAISpanProcessor`) reads them: each agent's execution
of a task is a loopobs run. A span processor only watches, so to stop a runaway crew
:class:`LoopobsCrewHook` is a CrewAI ``before_llm_call`` hook (CrewAI's public hook API,
``crewai.hooks``): before each model call it looks up the loopobs run of the current span
and, once the loop policy stopped it (a detector's or a ``BudgetGuard``'s ``stop``),
aborts the call with CrewAI's ``HookAborted``, whose ``__cause__`` is the
:class:`~loopobs.adapters.RunStopped`::

    processor = GenAISpanProcessor(observers)
    provider.add_span_processor(processor)
    CrewAIInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    with LoopobsCrewHook(processor):
        result = kickoff_observed(crew)  # raises RunStopped for a stopped run

CrewAI ends the crew and ``crew.kickoff()`` raises the ``HookAborted``;
:func:`kickoff_observed` raises the ``RunStopped`` itself (:func:`stop_of` finds it in
what CrewAI raised). The hook is registered globally (CrewAI snapshots its hooks when an
agent's executor is built, so register it before ``kickoff``); it acts only on runs of
its own processor, so other crews are left alone. Where the run stops: before the next
model call, after the tool calls of the turn that completed the pattern.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from loopobs.adapters._extras import missing_extra

try:
    from crewai.hooks import (
        HookAborted,
        register_before_llm_call_hook,
        unregister_before_llm_call_hook,
    )
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("crewai", "crewai", "crewai", _exc) from _exc

from loopobs.adapters._run import RunStopped, shielded
from loopobs.adapters._wrapped import stop_of
from loopobs.adapters.otel import GenAISpanProcessor

__all__ = ["LoopobsCrewHook", "kickoff_observed", "stop_of"]


class LoopobsCrewHook:
    """A CrewAI ``before_llm_call`` hook that ends a run the loop policy stopped.

    Args:
        processor: the span processor that reads the crew's spans (its runs are the ones
            this hook can stop).

    Use it as a context manager (registers on enter, unregisters on exit), or call
    :meth:`register` / :meth:`unregister`; the instance itself is the hook.
    """

    def __init__(self, processor: GenAISpanProcessor) -> None:
        self.processor = processor
        self._registered = False

    def __call__(self, context: Any) -> None:
        """Before a model call: abort it when the current span's run is stopped."""
        stop = self._stop()
        if stop is not None:
            raise HookAborted(str(stop), source="loopobs") from stop

    @shielded
    def _stop(self) -> RunStopped | None:
        run = self.processor.run_of()
        return run.stopped if run is not None and not run.ended else None

    def register(self) -> None:
        """Register the hook with CrewAI (every agent executor built from now on runs it)."""
        if not self._registered:
            register_before_llm_call_hook(self)
            self._registered = True

    def unregister(self) -> None:
        """Remove the hook."""
        if self._registered:
            unregister_before_llm_call_hook(self)
            self._registered = False

    def __enter__(self) -> LoopobsCrewHook:
        self.register()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unregister()


def kickoff_observed(crew: Any, **kwargs: Any) -> Any:
    """``crew.kickoff(**kwargs)``; a run stopped by loopobs raises its :class:`RunStopped`
    (CrewAI raises it wrapped in ``HookAborted``)."""
    try:
        return crew.kickoff(**kwargs)
    except Exception as exc:
        stop = stop_of(exc)
        if stop is not None:
            raise stop from exc
        raise
