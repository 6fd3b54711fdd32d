"""The Google ADK adapter: a ``Runner`` plugin that reports each invocation as a loopobs run.

:class:`LoopobsPlugin` is an ADK plugin (``google.adk.plugins.BasePlugin``): give it to the
``Runner`` (or the ``App``) and every invocation it runs is one loopobs run::

    plugin = LoopobsPlugin(observers=[TracingObserver(...), PrometheusObserver(...)])
    runner = InMemoryRunner(agent=root_agent, app_name="app", plugins=[plugin])
    async for event in observed_run(runner, user_id="u", session_id=sid, new_message=msg):
        ...

What maps to what:

- one invocation (``Runner.run_async``) → one loopobs run, named after the root agent;
  invocations of one ADK session share a loopobs session (turn numbers keep counting);
- ``before_model_callback`` / ``after_model_callback`` → a turn and its model call, with
  the usage the model reported (``usage_metadata``: prompt, candidates and thoughts tokens,
  cached prompt tokens; none reported is unknown, never 0), the text and the function calls
  of the response; a streamed response's partial chunks are text deltas;
  ``on_model_error_callback`` fails the call;
- ``before_tool_callback`` / ``after_tool_callback`` / ``on_tool_error_callback`` → one
  tool call attempt, paired by ADK's function call id;
- ``after_run_callback`` ends the run ``completed``, ``on_run_error_callback`` with the
  error.

Stopping: when a detector's verdict (or a :class:`~loopobs.cost.budget.BudgetGuard`) says
``stop``, the plugin raises :class:`~loopobs.adapters.RunStopped` from the next
``before_model_callback``, before the model is called. ADK ends the invocation and
re-raises a plugin's exception as a ``RuntimeError`` whose ``__cause__`` is the
``RunStopped``; :func:`observed_run` (the runner's ``run_async``, observed) raises the
``RunStopped`` itself, and also ends the loopobs run when the caller cancels the
invocation (ADK calls no plugin callback then). Without it, :func:`stop_of` finds the
``RunStopped`` in what ``run_async`` raised.

Content: the user's message, the response text, tool arguments and results are read as
every adapter does (exporters keep them out of telemetry unless opted in). ADK's own
OpenTelemetry spans are untouched; their content switches are ADK's
(``ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS``, ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

from loopobs.adapters import missing_extra

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.google_llm import Gemini
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.runners import Runner
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("adk", "google-adk", "adk", _exc) from _exc

from loopobs.adapters import AdapterRun, FrameworkToolCall, RunTracker, shielded
from loopobs.adapters._wrapped import stop_of
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["LoopobsPlugin", "observed_run", "stop_of"]

_SESSION_NAMESPACE = uuid.UUID("0b7d6a1e-3f5c-4d2e-9a8b-7c6d5e4f3a21")

_mine: contextvars.ContextVar[list[AdapterRun] | None] = contextvars.ContextVar(
    "loopobs_adk_runs", default=None
)
"""The runs started inside one :func:`observed_run`, so it can end them on cancellation."""


def _model_name(model: str | BaseLlm | None, request: LlmRequest | None = None) -> str:
    requested = request.model if request is not None else None
    if isinstance(requested, str) and requested:
        return requested
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else ""


def _provider(model: str | BaseLlm | None) -> str:
    """The GenAI provider name of an ADK model: Gemini API or Vertex AI, else a model prefix."""
    if isinstance(model, Gemini):
        return "gcp.vertex_ai" if getattr(model, "vertexai", False) else "gcp.gemini"
    name = _model_name(model)
    return name.split("/", 1)[0] if "/" in name else ""


def _usage(response: LlmResponse) -> Usage | None:
    """The response's usage in the contract's counting (thoughts inside output); None if absent."""
    meta = response.usage_metadata
    if meta is None or (meta.prompt_token_count is None and meta.candidates_token_count is None):
        return None
    return Usage(
        input_tokens=meta.prompt_token_count or 0,
        output_tokens=(meta.candidates_token_count or 0) + (meta.thoughts_token_count or 0),
        cache_read_input_tokens=meta.cached_content_token_count or 0,
        reasoning_output_tokens=meta.thoughts_token_count or 0,
    )


def _read(content: types.Content | None) -> tuple[str, list[FrameworkToolCall]]:
    """The visible text and the function calls of a response's content, in order."""
    texts: list[str] = []
    calls: list[FrameworkToolCall] = []
    for n, part in enumerate(content.parts or () if content is not None else ()):
        if part.text and not part.thought:
            texts.append(part.text)
        call = part.function_call
        if call is not None and call.name:
            calls.append(
                FrameworkToolCall(call.id or f"{call.name}#{n}", call.name, dict(call.args or {}))
            )
    return "".join(texts), calls


def _text(content: types.Content | None) -> str:
    return _read(content)[0]


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    try:
        return json.dumps(result, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(result)


class _Invocation:
    """What the plugin keeps for one invocation in flight."""

    __slots__ = ("calls", "key", "model", "run")

    def __init__(self, run: AdapterRun) -> None:
        self.run = run
        self.calls = 0
        self.key: int | None = None
        self.model = run.model


class LoopobsPlugin(BasePlugin):
    """An ADK plugin reporting every invocation of its ``Runner`` to loopobs observers.

    One instance serves any number of concurrent invocations (each has its own state,
    by invocation id). Register it once per ``Runner`` (ADK refuses two plugins of one name).

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL …).
        detectors: observers whose verdicts may stop a run; ``None`` means the
            default repetition and convergence detectors, ``[]`` none.
        agent: the agent name reported when the root agent has none.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: report into this :class:`~loopobs.adapters.RunTracker` instead
            (``observers``, ``detectors``, ``agent`` and ``prices`` are then ignored).
        name: the plugin's name in ADK's plugin manager.
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
        name: str = "loopobs",
    ) -> None:
        super().__init__(name)
        self.tracker = (
            tracker
            if tracker is not None
            else RunTracker(observers, detectors=detectors, agent=agent, prices=prices)
        )
        self._invocations: dict[str, _Invocation] = {}

    @property
    def observers(self) -> ObserverSet:
        """The observers; attach and detach at any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs

    # -- the invocation ------------------------------------------------------------------
    @shielded
    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> types.Content | None:
        """An invocation begins: ``on_run_start``."""
        root = invocation_context.agent
        model = getattr(root, "model", None)
        session = invocation_context.session
        name = getattr(root, "name", None)
        run = self.tracker.start_run(
            agent=name if isinstance(name, str) and name else None,
            model=_model_name(model),
            session_id=uuid.uuid5(_SESSION_NAMESPACE, f"{session.app_name}/{session.id}"),
            query=_text(invocation_context.user_content),
            instructions=getattr(root, "instruction", "")
            if isinstance(getattr(root, "instruction", None), str)
            else "",
        )
        self._invocations[invocation_context.invocation_id] = _Invocation(run)
        mine = _mine.get()
        if mine is not None:
            mine.append(run)
        return None

    def _finish(self, invocation_id: str, error: BaseException | None) -> None:
        state = self._invocations.pop(invocation_id, None)
        if state is None:
            return
        stop = stop_of(error)
        if state.key is not None and error is not None:
            state.run.model_error(state.key, stop or error)
        state.run.end(error=stop or error)

    @shielded
    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """The invocation completed: ``on_run_end``."""
        self._finish(invocation_context.invocation_id, None)

    @shielded
    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        """The invocation failed (a stop included): ``on_run_end`` with the error."""
        self._finish(invocation_context.invocation_id, error)

    # -- model calls ---------------------------------------------------------------------
    def _state(self, context: CallbackContext | ToolContext) -> _Invocation | None:
        return self._invocations.get(context.invocation_id)

    @shielded
    async def _model_start(
        self, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> None:
        state = self._state(callback_context)
        if state is None:
            return
        agent = callback_context.get_invocation_context().agent
        model_obj = getattr(agent, "model", None)
        model = _model_name(model_obj, llm_request) or state.run.model
        provider = _provider(model_obj)
        # Budgets, then a decided stop: RunStopped leaves here, before the model call.
        state.run.before_model_call(model=model, provider=provider)
        state.calls += 1
        if state.run.model_start(state.calls, model=model, provider=provider):
            state.key = state.calls

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """A model call begins (a new turn); raises a decided stop before the call."""
        await self._model_start(callback_context, llm_request)
        return None

    @shielded
    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        """A response (or, streamed, a partial chunk of one) arrived."""
        state = self._state(callback_context)
        if state is None or state.key is None:
            return None
        if llm_response.partial:
            text = _text(llm_response.content)
            if text:
                state.run.text_delta(state.key, text)
            return None
        key, state.key = state.key, None
        if llm_response.error_code and llm_response.content is None:
            state.run.model_error(
                key,
                RuntimeError(
                    f"{llm_response.error_code}: {llm_response.error_message or ''}".rstrip(": ")
                ),
            )
            return None
        text, calls = _read(llm_response.content)
        finish = llm_response.finish_reason
        state.run.model_end(
            key,
            usage=_usage(llm_response),
            text=text,
            tool_calls=calls,
            finish_reason=finish.value.lower() if finish is not None else None,
            response_model=llm_response.model_version,
        )
        return None

    @shielded
    async def on_model_error_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest, error: Exception
    ) -> LlmResponse | None:
        """The model call raised: its stream fails (ADK then raises, unless another plugin
        recovers)."""
        state = self._state(callback_context)
        if state is not None and state.key is not None:
            key, state.key = state.key, None
            state.run.model_error(key, error)
        return None

    # -- tools ---------------------------------------------------------------------------
    @shielded
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        """A tool call attempt begins: ``on_tool_pre``."""
        state = self._state(tool_context)
        if state is not None:
            call_id = tool_context.function_call_id or f"{tool.name}#{id(tool_context)}"
            state.run.tool_start(
                call_id,
                tool=tool.name,
                call_id=call_id,
                arguments=dict(tool_args) if isinstance(tool_args, Mapping) else {},
            )
        return None

    @shielded
    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        """A tool call attempt returned: ``on_tool_post`` with its result."""
        state = self._state(tool_context)
        if state is not None:
            call_id = tool_context.function_call_id or f"{tool.name}#{id(tool_context)}"
            state.run.tool_end(call_id, result=_result_text(result))
        return None

    @shielded
    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        """A tool call attempt raised (or was cancelled): ``on_tool_post`` with the error."""
        state = self._state(tool_context)
        if state is not None:
            call_id = tool_context.function_call_id or f"{tool.name}#{id(tool_context)}"
            state.run.tool_end(call_id, error=error)
        return None

    # -- ending what ADK does not report ---------------------------------------------------
    def abandon(self, runs: Iterable[AdapterRun], error: BaseException | None) -> None:
        """End ``runs`` (started by this plugin, still open) with ``error``: the runs of an
        invocation the caller cancelled or stopped reading, which ADK reports to no plugin."""
        targets = {id(r) for r in runs}
        for invocation_id, state in list(self._invocations.items()):
            if id(state.run) in targets:
                self._finish(invocation_id, error)


async def observed_run(runner: Runner, **kwargs: Any) -> AsyncIterator[Event]:
    """``runner.run_async(**kwargs)``, observed by the runner's :class:`LoopobsPlugin`.

    Yields ADK's events unchanged. A loopobs stop raises :class:`RunStopped` (not ADK's
    ``RuntimeError`` around it); other exceptions pass unchanged. When the caller cancels
    or stops iterating, the invocation's loopobs run ends ``cancelled`` / ``completed``.

    Raises:
        RunStopped: the loop policy stopped the invocation (a runaway loop or a budget).
    """
    plugins = [p for p in runner.plugin_manager.plugins if isinstance(p, LoopobsPlugin)]
    mine: list[AdapterRun] = []
    token = _mine.set(mine)
    try:
        async with contextlib.aclosing(runner.run_async(**kwargs)) as events:
            async for event in events:
                yield event
    except GeneratorExit:  # the caller stopped reading: ADK treats it as a clean completion
        for plugin in plugins:
            plugin.abandon(mine, None)
        raise
    except BaseException as exc:
        stop = stop_of(exc)
        for plugin in plugins:
            plugin.abandon(mine, stop or exc)
        if stop is not None:
            raise stop from exc
        raise
    finally:
        _mine.reset(token)
