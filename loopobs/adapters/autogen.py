"""AutoGen AgentChat: the span bridge reports its runs, and a model client ends a stopped one.

AutoGen AgentChat (0.7, ``autogen-agentchat``) writes GenAI spans of its own through
``autogen-core``: ``invoke_agent NAME`` around each ``run``/``run_stream`` of an agent (and
each turn of an agent in a team), ``execute_tool NAME`` around each tool call (with the
model's call id, no arguments, no result), ``create_agent NAME`` when an agent is built. It
writes no model spans: an OpenAI instrumentor does (AutoGen's tracing guide instruments the
OpenAI SDK), nested under the agent's span, with the usage and the tool calls the model
asked for. The span bridge (:class:`~loopobs.adapters.otel.GenAISpanProcessor`) reads them,
one run per ``invoke_agent`` span.

A span processor only watches: to stop a runaway, :class:`LoopobsModelClient` wraps the
agent's model client (AutoGen's public ``ChatCompletionClient`` interface). Before each
model call it looks up the loopobs run of the current span and, once the loop policy
stopped it (a detector's or a ``BudgetGuard``'s ``stop``), raises
:class:`~loopobs.adapters.RunStopped` instead of calling the model::

    processor = GenAISpanProcessor(observers)
    provider.add_span_processor(processor)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = LoopobsModelClient(OpenAIChatCompletionClient(model="gpt-4o-mini"), processor)
    agent = AssistantAgent("calc", model_client=client, tools=[...], max_tool_iterations=10)
    await agent.run(task="...")  # raises RunStopped for a stopped run

Where the run stops: before the next model call, after the tool calls of the turn that
completed the pattern. A ``TerminationCondition`` cannot do this: a team asks it only
between agents' turns, after an agent's whole tool loop, outside the agent's span.

A team runs its agents on AutoGen's runtime, which hands an agent's exception back as a
``RuntimeError`` carrying only its text; :func:`run_observed` raises the ``RunStopped`` itself::

    await run_observed(team, client, task="...")  # raises RunStopped for a stopped run
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any

from loopobs.adapters._extras import missing_extra

try:
    from autogen_core.models import ChatCompletionClient
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("autogen", "autogen-agentchat", "autogen", _exc) from _exc

from loopobs.adapters._run import RunStopped, shielded
from loopobs.adapters.otel import GenAISpanProcessor

__all__ = ["LoopobsModelClient", "run_observed"]


class LoopobsModelClient(ChatCompletionClient):
    """An AutoGen model client that refuses the model calls of a run the loop policy stopped.

    Every call is the wrapped client's; ``create`` and ``create_stream`` first raise the
    :class:`~loopobs.adapters.RunStopped` of the current span's run, if it was stopped.

    Args:
        client: the agent's model client (``OpenAIChatCompletionClient``, …).
        processor: the span processor that reads the agent's spans (its runs are the ones
            this client can stop).
    """

    def __init__(self, client: ChatCompletionClient, processor: GenAISpanProcessor) -> None:
        self.client = client
        self.processor = processor
        self.last_stop: RunStopped | None = None
        """The last ``RunStopped`` this client raised (for :func:`run_observed`)."""

    @shielded
    def stop(self) -> RunStopped | None:
        """The stop of the current span's run, if the loop policy decided one."""
        run = self.processor.run_of()
        return run.stopped if run is not None and not run.ended else None

    def _raise_if_stopped(self) -> None:
        stop = self.stop()
        if stop is not None:
            self.last_stop = stop
            raise stop

    async def create(self, messages: Sequence[Any], **kwargs: Any) -> Any:
        """The wrapped client's ``create``, unless the run was stopped."""
        self._raise_if_stopped()
        return await self.client.create(messages, **kwargs)

    async def create_stream(
        self, messages: Sequence[Any], **kwargs: Any
    ) -> AsyncGenerator[Any, None]:
        """The wrapped client's ``create_stream``, unless the run was stopped."""
        self._raise_if_stopped()
        async for item in self.client.create_stream(messages, **kwargs):
            yield item

    async def close(self) -> None:
        """Close the wrapped client."""
        await self.client.close()

    def actual_usage(self) -> Any:
        """The wrapped client's."""
        return self.client.actual_usage()

    def total_usage(self) -> Any:
        """The wrapped client's."""
        return self.client.total_usage()

    def count_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        """The wrapped client's."""
        return int(self.client.count_tokens(messages, **kwargs))

    def remaining_tokens(self, messages: Sequence[Any], **kwargs: Any) -> int:
        """The wrapped client's."""
        return int(self.client.remaining_tokens(messages, **kwargs))

    @property
    def capabilities(self) -> Any:
        """The wrapped client's (deprecated in AutoGen)."""
        return self.client.capabilities

    @property
    def model_info(self) -> Any:
        """The wrapped client's."""
        return self.client.model_info

    def dump_component(self) -> Any:
        """The wrapped client's config: a processor is no config, so an agent's dumped config
        (``agent.dump_component()``) loads back without loopobs."""
        return self.client.dump_component()

    def __getattr__(self, name: str) -> Any:
        # anything else of the wrapped client (its config, …)
        if name in ("client", "processor", "last_stop"):
            raise AttributeError(name)
        return getattr(self.client, name)


async def run_observed(
    runner: Any, clients: LoopobsModelClient | Sequence[LoopobsModelClient], **kwargs: Any
) -> Any:
    """``await runner.run(**kwargs)`` (an agent or a team); a run stopped by one of ``clients``
    raises its :class:`~loopobs.adapters.RunStopped`.

    An agent alone raises it already; a team's runtime raises a ``RuntimeError`` whose text
    starts with the stop's, which is replaced by the ``RunStopped`` itself.
    """
    watched = [clients] if isinstance(clients, LoopobsModelClient) else list(clients)
    for client in watched:
        client.last_stop = None
    try:
        return await runner.run(**kwargs)
    except RuntimeError as exc:
        text = str(exc)
        for client in watched:
            stop = client.last_stop
            if stop is not None and text.startswith(f"{type(stop).__name__}: {stop}"):
                raise stop from exc
        raise
