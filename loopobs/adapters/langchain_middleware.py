"""LangChain 1.x agents: a ``create_agent`` middleware that reports and stops each run.

:class:`LoopobsMiddleware` is an ``AgentMiddleware`` (``langchain.agents.middleware``), the
hook API of LangChain 1.x's ``create_agent`` (which supersedes LangGraph's deprecated
``create_react_agent``). Put it first in ``middleware=`` (outermost) and every invocation of
the agent is one loopobs run::

    agent = create_agent(model, tools=[...], middleware=[LoopobsMiddleware(observers)])
    agent.invoke({"messages": [{"role": "user", "content": "Weather in Paris?"}]})

What maps to what:

- ``before_agent`` / ``after_agent`` → one loopobs run (the agent's ``name``); the run's
  key rides in the agent state under ``loopobs_run`` (untracked: never checkpointed);
- ``wrap_model_call`` → a turn and its model call, with the ``usage_metadata`` the model
  reported (none reported is unknown, never 0), the text and the tool calls of the
  ``AIMessage``; a call that raises fails its stream and ends the run with the error;
- ``wrap_tool_call`` → one tool call attempt, paired by the tool call id, with its result
  (a ``ToolMessage`` with ``status="error"`` is a tool error; an exception the tool node
  lets through fails the call and ends the run with it).

Stopping: when a detector's verdict (or a :class:`~loopobs.cost.budget.BudgetGuard`) says
``stop``, ``wrap_model_call`` raises :class:`~loopobs.adapters.RunStopped` before the next
model call; LangGraph propagates it unchanged, so ``invoke`` / ``ainvoke`` raises it.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Annotated, Any, NotRequired

from loopobs.adapters import missing_extra

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.channels.untracked_value import UntrackedValue
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("langchain_middleware", "langchain", "langchain-agents", _exc) from _exc

from loopobs.adapters import AdapterRun, FrameworkToolCall, RunTracker, shielded
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["LoopobsMiddleware", "LoopobsState"]

_KEY = "loopobs_run"


class LoopobsState(AgentState[Any]):
    """The agent state with the loopobs run's key (per run, never checkpointed)."""

    loopobs_run: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


def _model_name(model: Any) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(model).__name__


def _provider(model: Any) -> str:
    module = type(model).__module__
    for prefix, name in (
        ("langchain_openai", "openai"),
        ("langchain_anthropic", "anthropic"),
        ("langchain_google_genai", "gcp.gemini"),
        ("langchain_google_vertexai", "gcp.vertex_ai"),
        ("langchain_aws", "aws.bedrock"),
        ("langchain_mistralai", "mistral_ai"),
    ):
        if module.startswith(prefix):
            return name
    return ""


def _usage(message: AIMessage) -> Usage | None:
    meta = message.usage_metadata
    if not meta:
        return None
    inp: Mapping[str, Any] = meta.get("input_token_details") or {}
    out: Mapping[str, Any] = meta.get("output_token_details") or {}
    return Usage(
        input_tokens=int(meta.get("input_tokens") or 0),
        output_tokens=int(meta.get("output_tokens") or 0),
        cache_read_input_tokens=int(inp.get("cache_read") or 0),
        cache_write_input_tokens=int(inp.get("cache_creation") or 0),
        reasoning_output_tokens=int(out.get("reasoning") or 0),
    )


def _ai_message(response: ModelResponse[Any] | Any) -> AIMessage | None:
    result = getattr(response, "result", None)
    if result is None:
        model_response = getattr(response, "model_response", None)  # ExtendedModelResponse
        result = getattr(model_response, "result", None)
    for message in reversed(result or ()):
        if isinstance(message, AIMessage):
            return message
    return None


class LoopobsMiddleware(AgentMiddleware[LoopobsState, Any, Any]):
    """A ``create_agent`` middleware reporting every run of the agent to loopobs observers.

    One instance may serve several agents and concurrent runs (each run's key is in its own
    state). Put it first in ``middleware=``, so it sees every model and tool call as the
    other middleware leave them, and its stop reaches the caller.

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL …).
        detectors: observers whose verdicts may stop a run; ``None`` means the
            default repetition and convergence detectors, ``[]`` none.
        agent: the agent name reported when the agent has none.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: report into this :class:`~loopobs.adapters.RunTracker` instead
            (``observers``, ``detectors``, ``agent`` and ``prices`` are then ignored).
    """

    state_schema = LoopobsState

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
    ) -> None:
        super().__init__()
        self.tracker = (
            tracker
            if tracker is not None
            else RunTracker(observers, detectors=detectors, agent=agent, prices=prices)
        )
        self._lock = threading.Lock()
        self._runs: dict[str, AdapterRun] = {}
        self._calls: dict[str, int] = {}

    @property
    def observers(self) -> ObserverSet:
        """The observers; attach and detach at any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs

    # -- the run -------------------------------------------------------------------------
    @shielded
    def _start(self, state: Mapping[str, Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        query = ""
        for message in reversed(state.get("messages") or ()):
            if getattr(message, "type", None) == "human":
                content = message.content
                query = content if isinstance(content, str) else ""
                break
        run = self.tracker.start_run(query=query)
        key = str(run.run_id)
        with self._lock:
            self._runs[key] = run
            self._calls[key] = 0
        return {_KEY: key}

    def _run(self, state: Any) -> tuple[str, AdapterRun] | None:
        key = state.get(_KEY) if isinstance(state, Mapping) else None
        run = self._runs.get(key) if isinstance(key, str) else None
        return (key, run) if key is not None and run is not None else None

    def _end(self, key: str, error: BaseException | None = None) -> None:
        with self._lock:
            run = self._runs.pop(key, None)
            self._calls.pop(key, None)
        if run is not None:
            run.end(error=error)

    @shielded
    def _finish(self, state: Mapping[str, Any]) -> None:
        found = self._run(state)
        if found is not None:
            self._end(found[0])

    def before_agent(self, state: LoopobsState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The agent run begins: ``on_run_start``; its key goes into the state."""
        return self._start(state, runtime)

    async def abefore_agent(
        self, state: LoopobsState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """``before_agent``, for ``ainvoke`` / ``astream``."""
        return self._start(state, runtime)

    def after_agent(self, state: LoopobsState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """The agent run completed: ``on_run_end``."""
        self._finish(state)
        return None

    async def aafter_agent(
        self, state: LoopobsState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """``after_agent``, for ``ainvoke`` / ``astream``."""
        self._finish(state)
        return None

    # -- model calls ---------------------------------------------------------------------
    @shielded
    def _model_start(self, request: ModelRequest[Any]) -> tuple[str, AdapterRun, int] | None:
        found = self._run(request.state)
        if found is None:
            return None
        key, run = found
        model, provider = _model_name(request.model), _provider(request.model)
        try:  # budgets, then a decided stop: RunStopped leaves here, before the model call
            run.before_model_call(model=model, provider=provider)
        except BaseException as exc:
            self._end(key, exc)
            raise
        with self._lock:
            self._calls[key] = call = self._calls.get(key, 0) + 1
        return (key, run, call) if run.model_start(call, model=model, provider=provider) else None

    @shielded
    def _model_end(self, opened: tuple[str, AdapterRun, int], response: Any) -> None:
        _, run, call = opened
        message = _ai_message(response)
        if message is None:
            run.model_end(call)
            return
        text = message.content if isinstance(message.content, str) else message.text
        calls = [
            FrameworkToolCall(str(c.get("id") or c["name"]), c["name"], dict(c.get("args") or {}))
            for c in message.tool_calls
        ]
        meta = message.response_metadata or {}
        finish = meta.get("finish_reason")
        run.model_end(
            call,
            usage=_usage(message),
            text=text,
            tool_calls=calls,
            finish_reason=finish if isinstance(finish, str) else None,
            response_id=message.id,
            response_model=meta.get("model_name")
            if isinstance(meta.get("model_name"), str)
            else None,
        )

    @shielded
    def _model_failed(self, opened: tuple[str, AdapterRun, int], error: BaseException) -> None:
        key, run, call = opened
        run.model_error(call, error)
        self._end(key, error)

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        """A model call: a turn, its usage and tool calls; raises a decided stop first."""
        opened = self._model_start(request)
        if opened is None:
            return handler(request)
        try:
            response = handler(request)
        except BaseException as exc:
            self._model_failed(opened, exc)
            raise
        self._model_end(opened, response)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """``wrap_model_call``, for ``ainvoke`` / ``astream``."""
        opened = self._model_start(request)
        if opened is None:
            return await handler(request)
        try:
            response = await handler(request)
        except BaseException as exc:
            self._model_failed(opened, exc)
            raise
        self._model_end(opened, response)
        return response

    # -- tools ---------------------------------------------------------------------------
    @shielded
    def _tool_start(self, request: ToolCallRequest) -> tuple[str, AdapterRun, str] | None:
        found = self._run(request.state)
        if found is None:
            return None
        key, run = found
        call = request.tool_call
        call_id = str(call.get("id") or call["name"])
        run.tool_start(
            call_id, tool=call["name"], call_id=call_id, arguments=dict(call.get("args") or {})
        )
        return key, run, call_id

    @shielded
    def _tool_end(
        self, opened: tuple[str, AdapterRun, str], result: Any, error: BaseException | None = None
    ) -> None:
        key, run, call_id = opened
        if error is not None:
            # Escaping the outermost middleware, the error ends the graph run: end ours too.
            run.tool_end(call_id, error=error)
            self._end(key, error)
            return
        if isinstance(result, ToolMessage):
            text = result.content if isinstance(result.content, str) else result.text
            failed = RuntimeError(text or "the tool failed") if result.status == "error" else None
            run.tool_end(call_id, result=text, error=failed)
        elif isinstance(result, Command):
            run.tool_end(call_id, result="command")
        else:
            run.tool_end(call_id, result=str(result))

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> Any:
        """A tool call attempt: ``on_tool_pre`` and ``on_tool_post``."""
        opened = self._tool_start(request)
        if opened is None:
            return handler(request)
        try:
            result = handler(request)
        except BaseException as exc:
            self._tool_end(opened, None, exc)
            raise
        self._tool_end(opened, result)
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> Any:
        """``wrap_tool_call``, for ``ainvoke`` / ``astream``."""
        opened = self._tool_start(request)
        if opened is None:
            return await handler(request)
        try:
            result = await handler(request)
        except BaseException as exc:
            self._tool_end(opened, None, exc)
            raise
        self._tool_end(opened, result)
        return result
