"""smolagents: the span bridge reports an agent's runs, and a step callback ends a stopped one.

smolagents writes no spans of its own; OpenInference's smolagents instrumentor does (the
agent's run, each step, model call and tool call). The span bridge
(:class:`~loopobs.adapters.otel.GenAISpanProcessor`) reads them, one run per ``agent.run``.
A span processor only watches: to stop a runaway, :class:`LoopobsStepCallback` is a
smolagents step callback (``step_callbacks=``, smolagents' public API) that, after each
step, looks up the loopobs run of the current span and, once the loop policy stopped it (a
detector's or a ``BudgetGuard``'s ``stop``), interrupts the agent (``agent.interrupt()``)::

    processor = GenAISpanProcessor(observers)
    provider.add_span_processor(processor)
    SmolagentsInstrumentor().instrument(tracer_provider=provider)
    stopper = LoopobsStepCallback(processor)
    agent = ToolCallingAgent(tools=[...], model=model, step_callbacks=[stopper])
    answer = stopper.run(agent, "...")  # raises RunStopped for a stopped run

smolagents ends the run before its next step, and ``agent.run`` raises its own
``AgentError("Agent interrupted.")``; :meth:`LoopobsStepCallback.run` raises the
``RunStopped`` instead (the agent's memory keeps every step up to the stop). Where the run
stops: after the step whose tool calls completed the pattern, before the next model call.

OpenInference's instrumentor (0.1.43) leaves an agent span open when ``agent.run`` raises:
the span is never exported and the bridge never sees the run end. For the runs it stops,
:meth:`~LoopobsStepCallback.run` ends that span (an error span, as the instrumentor marked
it), so the trace is exported whole and the run ends with the stop's status.
"""

from __future__ import annotations

import weakref
from typing import Any

from opentelemetry import trace

from loopobs.adapters._extras import missing_extra

try:
    from smolagents.utils import AgentError
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("smolagents", "smolagents", "smolagents", _exc) from _exc

from loopobs.adapters._run import RunStopped, shielded
from loopobs.adapters.otel import GenAISpanProcessor

__all__ = ["LoopobsStepCallback"]


class LoopobsStepCallback:
    """A smolagents step callback that interrupts a run the loop policy stopped.

    Args:
        processor: the span processor that reads the agent's spans (its runs are the ones
            this callback can stop).
    """

    def __init__(self, processor: GenAISpanProcessor) -> None:
        self.processor = processor
        # The stop each interrupted agent owes its caller (and the agent's span, current
        # when it was interrupted), until :meth:`run` raises it.
        self._stops: weakref.WeakKeyDictionary[Any, tuple[RunStopped, trace.Span]] = (
            weakref.WeakKeyDictionary()
        )

    def __call__(self, memory_step: Any, agent: Any = None) -> None:
        """After a step (smolagents calls it with the step and ``agent=``): interrupt the
        agent when the current span's run is stopped. Never raises into smolagents."""
        stop = self._stop()
        if stop is None or agent is None:
            return
        self._stops[agent] = (stop, trace.get_current_span())
        agent.interrupt()

    @shielded
    def _stop(self) -> RunStopped | None:
        run = self.processor.run_of()
        return run.stopped if run is not None and not run.ended else None

    def run(self, agent: Any, task: str, **kwargs: Any) -> Any:
        """``agent.run(task, **kwargs)``; a run this callback interrupted raises its
        :class:`~loopobs.adapters.RunStopped` (from smolagents' ``AgentError``)."""
        self._stops.pop(agent, None)
        try:
            return agent.run(task, **kwargs)
        except AgentError as exc:
            stopped = self._stops.pop(agent, None)
            if stopped is None:
                raise
            stop, span = stopped
            if span.is_recording():
                span.end()  # the instrumentor's agent span, left open by the error
            raise stop from exc
