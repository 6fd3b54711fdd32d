"""The Strands Agents adapter: a hook provider that reports each agent call as a loopobs run.

:class:`LoopobsHooks` is a Strands ``HookProvider``: pass it in the agent's ``hooks`` and
every invocation of that agent (``agent(...)``, ``invoke_async``, ``stream_async``) is one
loopobs run::

    hooks = LoopobsHooks(observers=[TracingObserver(...), PrometheusObserver(...)])
    agent = Agent(model=..., tools=[...], hooks=[hooks])
    result = await invoke_observed(agent, "What is the weather in Paris?")

What maps to what:

- ``BeforeInvocationEvent`` / ``AfterInvocationEvent`` → one loopobs run, named after the
  agent (``Agent(name=...)``); the calls of one ``Agent`` object share a loopobs session
  (turn numbers keep counting, as its conversation does);
- ``BeforeModelCallEvent`` / ``AfterModelCallEvent`` → a turn and its model call, with the
  usage the model reported in the response's metadata (``inputTokens``, ``outputTokens``,
  cache reads and writes; none reported is unknown, never 0), the text and the tool uses of
  the response; a call that raised fails its stream;
- ``BeforeToolCallEvent`` / ``AfterToolCallEvent`` → one tool call attempt, paired by the
  tool use id, with its result (an error when the tool failed or raised).

Stopping: when a detector's verdict (or a :class:`~loopobs.cost.budget.BudgetGuard`) says
``stop``, the hooks raise :class:`~loopobs.adapters.RunStopped` from the next
``BeforeModelCallEvent``, before the model is called. Strands ends the invocation and
re-raises it wrapped in its ``EventLoopException`` (the ``RunStopped`` is its
``__cause__``); :func:`invoke_observed` raises the ``RunStopped`` itself, and
:func:`stop_of` finds it in what the agent raised.

Content: the prompt, the response text, tool inputs and results are read as every adapter
does (exporters keep them out of telemetry unless opted in). Strands' own OpenTelemetry
spans are untouched.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loopobs.adapters import missing_extra

try:
    from strands import Agent
    from strands.agent import AgentResult
    from strands.hooks import (
        AfterInvocationEvent,
        AfterModelCallEvent,
        AfterToolCallEvent,
        BeforeInvocationEvent,
        BeforeModelCallEvent,
        BeforeToolCallEvent,
        HookProvider,
        HookRegistry,
    )
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("strands", "strands-agents", "strands", _exc) from _exc

from loopobs.adapters import AdapterRun, FrameworkToolCall, RunTracker, shielded
from loopobs.adapters._wrapped import stop_of
from loopobs.contract.errors import LoopError
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["LoopobsHooks", "invoke_observed", "stop_of"]

_MAX_AGENTS = 4096
"""Agents whose loopobs session the hooks remember; the least recently used go first."""

_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "mistral": "mistral_ai",
    "ollama": "ollama",
    "llamaapi": "meta",
    "writer": "writer",
}


def _model_id(agent: Agent) -> str:
    try:
        config = agent.model.get_config()
    except Exception:  # a custom model's config may be anything
        return ""
    model_id = config.get("model_id") if isinstance(config, Mapping) else None
    return model_id if isinstance(model_id, str) else ""


def _provider(agent: Agent) -> str:
    """The GenAI provider of the agent's model, from its Strands model class."""
    module = type(agent.model).__module__
    if module.startswith("strands.models.litellm"):
        name = _model_id(agent)
        return name.split("/", 1)[0] if "/" in name else ""
    if module.startswith("strands.models."):
        return _PROVIDERS.get(module.rsplit(".", 1)[-1], "")
    return ""


def _text(blocks: Iterable[Any]) -> str:
    return "".join(
        b["text"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("text"), str)
    )


def _query(messages: Sequence[Any] | None) -> str:
    """The latest user text of the invocation's input (content)."""
    for message in reversed(messages or ()):
        if isinstance(message, Mapping) and message.get("role") == "user":
            return _text(message.get("content") or ())
    return ""


def _usage(message: Mapping[str, Any]) -> Usage | None:
    """The usage a response's metadata reports, in the contract's counting; None if absent."""
    metadata = message.get("metadata")
    usage = metadata.get("usage") if isinstance(metadata, Mapping) else None
    if not isinstance(usage, Mapping) or "inputTokens" not in usage:
        return None
    return Usage(
        input_tokens=int(usage.get("inputTokens") or 0),
        output_tokens=int(usage.get("outputTokens") or 0),
        cache_read_input_tokens=int(usage.get("cacheReadInputTokens") or 0),
        cache_write_input_tokens=int(usage.get("cacheWriteInputTokens") or 0),
    )


def _calls(message: Mapping[str, Any]) -> list[FrameworkToolCall]:
    calls = []
    for block in message.get("content") or ():
        use = block.get("toolUse") if isinstance(block, Mapping) else None
        if isinstance(use, Mapping) and use.get("name"):
            arguments = use.get("input")
            calls.append(
                FrameworkToolCall(
                    str(use.get("toolUseId") or use["name"]),
                    str(use["name"]),
                    dict(arguments) if isinstance(arguments, Mapping) else {},
                )
            )
    return calls


def _result(result: Mapping[str, Any]) -> str:
    """A tool result's content as text: its text blocks, else the blocks as JSON."""
    content = result.get("content") or ()
    text = _text(content)
    if text or not content:
        return text
    return json.dumps(list(content), sort_keys=True, default=str)


class _Invocation:
    __slots__ = ("calls", "key", "run")

    def __init__(self, run: AdapterRun) -> None:
        self.run = run
        self.calls = 0
        self.key: int | None = None


class LoopobsHooks(HookProvider):
    """Strands hooks reporting every invocation of the agents they are given to.

    One instance may serve several agents (each has its own state); an agent runs one
    invocation at a time, as Strands requires.

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL …).
        detectors: observers whose verdicts may stop a run; ``None`` means the
            default repetition and convergence detectors, ``[]`` none.
        agent: the agent name reported when an agent has none.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: report into this :class:`~loopobs.adapters.RunTracker` instead
            (``observers``, ``detectors``, ``agent`` and ``prices`` are then ignored).
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
    ) -> None:
        self.tracker = (
            tracker
            if tracker is not None
            else RunTracker(observers, detectors=detectors, agent=agent, prices=prices)
        )
        self._lock = threading.Lock()
        self._invocations: dict[int, _Invocation] = {}
        self._sessions: OrderedDict[int, uuid.UUID] = OrderedDict()

    @property
    def observers(self) -> ObserverSet:
        """The observers; attach and detach at any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Strands' entry point: subscribe to the invocation, model and tool events."""
        registry.add_callback(BeforeInvocationEvent, self._before_invocation)
        registry.add_callback(AfterInvocationEvent, self._after_invocation)
        registry.add_callback(BeforeModelCallEvent, self._before_model)
        registry.add_callback(AfterModelCallEvent, self._after_model)
        registry.add_callback(BeforeToolCallEvent, self._before_tool)
        registry.add_callback(AfterToolCallEvent, self._after_tool)

    def _session(self, agent: Agent) -> uuid.UUID:
        with self._lock:
            session = self._sessions.pop(id(agent), None) or uuid.uuid4()
            self._sessions[id(agent)] = session
            if len(self._sessions) > _MAX_AGENTS:
                self._sessions.popitem(last=False)
            return session

    def _state(self, agent: Agent) -> _Invocation | None:
        return self._invocations.get(id(agent))

    # -- the invocation ------------------------------------------------------------------
    @shielded
    def _before_invocation(self, event: BeforeInvocationEvent) -> None:
        agent = event.agent
        stale = self._invocations.pop(id(agent), None)
        if stale is not None:  # an invocation Strands never reported the end of
            stale.run.end(error=LoopError("the invocation ended unreported"))
        prompt = agent.system_prompt
        run = self.tracker.start_run(
            agent=agent.name or None,
            model=_model_id(agent),
            session_id=self._session(agent),
            query=_query(event.messages),
            instructions=prompt if isinstance(prompt, str) else "",
        )
        self._invocations[id(agent)] = _Invocation(run)

    @shielded
    def _after_invocation(self, event: AfterInvocationEvent) -> None:
        state = self._invocations.pop(id(event.agent), None)
        if state is None:
            return
        run = state.run
        result: AgentResult | None = event.result
        # Strands reports an invocation that raised with no result (and not the error).
        error = run.stopped or (
            None if result is not None else LoopError("the agent invocation raised")
        )
        if state.key is not None:
            run.model_error(state.key, error)
        run.end(error=error)

    # -- model calls ---------------------------------------------------------------------
    @shielded
    def _before_model(self, event: BeforeModelCallEvent) -> None:
        state = self._state(event.agent)
        if state is None:
            return
        model, provider = _model_id(event.agent), _provider(event.agent)
        # Budgets, then a decided stop: RunStopped leaves here, before the model call.
        state.run.before_model_call(model=model, provider=provider)
        state.calls += 1
        if state.run.model_start(state.calls, model=model, provider=provider):
            state.key = state.calls

    @shielded
    def _after_model(self, event: AfterModelCallEvent) -> None:
        state = self._state(event.agent)
        if state is None or state.key is None:
            return
        key, state.key = state.key, None
        response = event.stop_response
        if response is None:
            state.run.model_error(key, event.exception)
            return
        message = response.message
        state.run.model_end(
            key,
            usage=_usage(message),
            text=_text(message.get("content") or ()),
            tool_calls=_calls(message),
            finish_reason=str(response.stop_reason),
        )

    # -- tools ---------------------------------------------------------------------------
    @shielded
    def _before_tool(self, event: BeforeToolCallEvent) -> None:
        state = self._state(event.agent)
        if state is None:
            return
        use = event.tool_use
        name = str(use.get("name") or "tool")
        call_id = str(use.get("toolUseId") or name)
        arguments = use.get("input")
        state.run.tool_start(
            call_id,
            tool=name,
            call_id=call_id,
            arguments=dict(arguments) if isinstance(arguments, Mapping) else {},
        )

    @shielded
    def _after_tool(self, event: AfterToolCallEvent) -> None:
        state = self._state(event.agent)
        if state is None:
            return
        use = event.tool_use
        call_id = str(use.get("toolUseId") or use.get("name") or "tool")
        text = _result(event.result)
        error: BaseException | None = event.exception
        if error is None and event.result.get("status") == "error":
            error = RuntimeError(text or "the tool failed")
        state.run.tool_end(call_id, result=text, error=error)


async def invoke_observed(agent: Agent, prompt: Any = None, **kwargs: Any) -> AgentResult:
    """``await agent.invoke_async(prompt, **kwargs)``, raising a loopobs stop as itself.

    Raises:
        RunStopped: the loop policy stopped the invocation (a runaway loop or a budget),
            rather than Strands' ``EventLoopException`` around it.
    """
    try:
        return await agent.invoke_async(prompt, **kwargs)
    except Exception as exc:
        stop = stop_of(exc)
        if stop is not None:
            raise stop from exc
        raise
