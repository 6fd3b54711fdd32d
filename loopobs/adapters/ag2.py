"""AG2: the span bridge reports an agent's runs, and an AG2 middleware ends a stopped one.

AG2 (1.x, ``ag2.Agent``) writes its own GenAI spans through its ``TelemetryMiddleware``;
the span bridge (:class:`~loopobs.adapters.otel.GenAISpanProcessor`) reads them, one run
per ``invoke_agent`` span. A span processor only watches: to stop a runaway,
:class:`LoopobsAG2Middleware` is an AG2 middleware (AG2's public middleware API,
``ag2.middleware``) whose ``on_llm_call`` looks up the loopobs run of the current span and,
once the loop policy stopped it (a detector's or a ``BudgetGuard``'s ``stop``), raises
:class:`~loopobs.adapters.RunStopped` instead of calling the model::

    processor = GenAISpanProcessor(observers)
    provider.add_span_processor(processor)
    agent = Agent(
        "calc",
        config=OpenAIConfig(...),
        middleware=[TelemetryMiddleware(tracer_provider=provider), LoopobsAG2Middleware(processor)],
    )
    await agent.ask("...")  # raises RunStopped for a stopped run

Put it after ``TelemetryMiddleware`` (inside its spans, where the run is found). Where the
run stops: before the next model call, after the tool calls of the turn that completed the
pattern. AG2's classic ``ConversableAgent`` (``max_turns``, ``is_termination_msg``) has no
hook that sees loopobs's verdicts before a model call; its spans are reported only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loopobs.adapters._extras import missing_extra

try:
    from ag2.middleware import BaseMiddleware
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("ag2", "ag2", "ag2", _exc) from _exc

from loopobs.adapters._run import RunStopped, shielded
from loopobs.adapters.otel import GenAISpanProcessor

__all__ = ["LoopobsAG2Middleware"]


class LoopobsAG2Middleware:
    """An AG2 middleware factory whose model-call hook ends a run the loop policy stopped.

    Args:
        processor: the span processor that reads the agent's spans (its runs are the ones
            this middleware can stop).
    """

    def __init__(self, processor: GenAISpanProcessor) -> None:
        self.processor = processor

    def __call__(self, event: Any, context: Any) -> Any:
        """AG2 builds one middleware per turn through its factory."""
        return _Stopping(event, context, self)

    @shielded
    def stop(self) -> RunStopped | None:
        """The stop of the current span's run, if the loop policy decided one."""
        run = self.processor.run_of()
        return run.stopped if run is not None and not run.ended else None


class _Stopping(BaseMiddleware):
    def __init__(self, event: Any, context: Any, owner: LoopobsAG2Middleware) -> None:
        super().__init__(event, context)
        self._owner = owner

    async def on_llm_call(self, call_next: Any, events: Sequence[Any], context: Any) -> Any:
        stop = self._owner.stop()
        if stop is not None:
            raise stop
        return await call_next(events, context)
