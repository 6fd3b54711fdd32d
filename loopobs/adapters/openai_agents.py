"""The OpenAI Agents SDK adapter: ``Runner`` runs reported as loopobs runs.

:class:`AgentsAdapter` runs an agent through the SDK's own ``Runner`` with a
``RunHooks`` of its own, and turns the SDK's lifecycle into the event contract::

    adapter = AgentsAdapter(observers=[TracingObserver(...), PrometheusObserver(...)])
    result = await adapter.run(agent, "What is the weather in Paris?")

What maps to what:

- one ``Runner`` run → one loopobs run (``invoke_agent {starting agent}``), ended
  exactly once whatever happens: answer, exception, guardrail tripwire,
  ``max_turns``, cancellation, or a stream the caller stopped reading;
- ``on_llm_start`` / ``on_llm_end`` → a turn and its model call, with the usage
  the model reported (cached input and reasoning output tokens included; a call
  whose response carried none is unknown, never 0 — the SDK's all-zero
  placeholder), whether the SDK streamed it (``run_streamed``), the assistant
  text and the tool calls of the response; a model call that raises fails its
  stream with the error;
- ``on_tool_start`` / ``on_tool_end`` → one tool call attempt, with its result
  (an error when the tool raised);
- a handoff → a tool call of the handoff's name (so a ping-pong between agents is
  a repeated pattern the detectors see) and ``on_model_switched`` when the new
  agent's model differs;
- guardrail tripwires, ``MaxTurnsExceeded`` and model errors end the run
  ``failed`` / ``max_turns`` with the SDK's message in ``RunEndContext.error``;
- a run interrupted for tool approvals (``needs_approval``) ends ``suspended``,
  after ``on_suspended`` (a human gate) for the first call awaiting approval.

Stopping: when a detector's verdict is ``stop`` the adapter raises
:class:`AgentsRunStopped` (a :class:`~loopobs.adapters.RunStopped`, and an SDK
``AgentsException``) from the SDK's next ``on_llm_start`` hook, before the next
model call. The SDK propagates exceptions of run hooks unchanged, so the
``Runner`` run ends and ``adapter.run(...)`` raises it (in a streamed run
``stream_events()`` does), with the partial run in ``run_data`` as the SDK's own
``MaxTurnsExceeded`` has it. Tools already running in the same turn finish
first. ``warn`` verdicts leave the run alone.

Context: the SDK calls run hooks in tasks of their own and runs each tool body in
another, so a span an observer makes current from a hook would not reach the
tool. The adapter makes one span current around the ``Runner`` call
(:class:`_CurrentSpan`) that stands for the ``execute_tool`` span inside each tool
body and for the ``chat`` span inside a model call: spans the user's tool or an
HTTP instrumentation opens nest under them, as in ``AgentLoop``.

The SDK's own tracing (``agents.tracing``) is untouched. The adapter reads the
run hooks, and from tracing only one thing: whether the running tool's function
span failed, to report a tool exception the SDK handed to the model as an error.
With SDK tracing disabled such a call is reported as an output.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loopobs.adapters import missing_extra

try:
    from agents import (
        Agent,
        Model,
        ModelResponse,
        RunConfig,
        RunContextWrapper,
        RunHooks,
        Runner,
        RunResult,
        RunResultStreaming,
        RunState,
        Tool,
        TResponseInputItem,
    )
    from agents import MaxTurnsExceeded as _AgentsMaxTurns
    from agents.exceptions import (
        AgentsException,
        InputGuardrailTripwireTriggered,
        OutputGuardrailTripwireTriggered,
        RunErrorDetails,
    )
    from agents.handoffs import Handoff
    from agents.run_context import AgentHookContext
    from agents.tool_context import ToolContext
    from agents.tracing import get_current_span
    from agents.usage import Usage as AgentsUsage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage
    from openai.types.responses import ResponseOutputText as _OutputText
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("openai_agents", "openai-agents", "openai-agents", _exc) from _exc

from opentelemetry import context as otel_context
from opentelemetry import trace as otel_trace
from opentelemetry.util import types as otel_types

from loopobs.adapters import (
    AdapterRun,
    FrameworkToolCall,
    RunStopped,
    RunTracker,
    shielded,
    token_count,
)
from loopobs.contract.errors import LoopError, MaxTurnsExceeded, ToolExecutionError
from loopobs.contract.events import ModelSwitchedContext, SuspendedContext, Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["AgentsAdapter", "AgentsRunStopped", "ObservedRunHooks"]

_log = logging.getLogger("loopobs.adapters.openai_agents")
_now_ns = time.time_ns

_SESSION_NAMESPACE = uuid.UUID("5d0f3c52-8a0e-4a4b-9c53-3e0b1a9a6f11")


def _model_name(agent: Agent[Any], run_config: RunConfig | None) -> str:
    """The name of the model ``agent`` calls: a string, a ``Model``'s ``model``, or its class."""
    model: str | Model | None = None
    if run_config is not None and run_config.model is not None:
        model = run_config.model
    elif agent.model is not None:
        model = agent.model
    if model is None:
        from agents.models import get_default_model

        return get_default_model()
    if isinstance(model, str):
        return model
    name = getattr(model, "model", None)
    return name if isinstance(name, str) and name else type(model).__name__


def _provider(agent: Agent[Any], run_config: RunConfig | None) -> str:
    """``openai`` for the SDK's OpenAI models, the prefix of ``prefix/model`` names, else ''."""
    model = run_config.model if run_config is not None and run_config.model else agent.model
    if model is None:
        return "openai"
    if isinstance(model, str):
        return model.split("/", 1)[0] if "/" in model else "openai"
    return "openai" if type(model).__module__.startswith("agents.models.openai") else ""


def _usage(usage: AgentsUsage) -> Usage | None:
    """The SDK's usage of one call in the contract's counting (both count cached and reasoning
    tokens inside input and output); None (unknown) when the model reported none.

    The SDK has no "not reported" value: a response without usage (a stream the
    server sent no usage chunk for, a provider that leaves it out) gets a ``Usage``
    of zeros. A model call always reads at least one input token, so all-zero
    counts are that placeholder, never a measurement.
    """
    if not (usage.input_tokens or usage.output_tokens or usage.total_tokens):
        return None
    inp = usage.input_tokens_details
    out = usage.output_tokens_details
    return Usage(
        input_tokens=token_count(usage.input_tokens),
        output_tokens=token_count(usage.output_tokens),
        cache_read_input_tokens=token_count(getattr(inp, "cached_tokens", None)),
        cache_write_input_tokens=token_count(getattr(inp, "cache_write_tokens", None)),
        reasoning_output_tokens=token_count(getattr(out, "reasoning_tokens", None)),
    )


def _arguments(text: str | None) -> Mapping[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {"arguments": text}
    return value if isinstance(value, dict) else {"arguments": value}


def _read_response(response: ModelResponse) -> tuple[str, list[FrameworkToolCall]]:
    """The assistant text and the function calls of one model response, in order."""
    texts: list[str] = []
    calls: list[FrameworkToolCall] = []
    for item in response.output:
        if isinstance(item, ResponseOutputMessage):
            texts.extend(part.text for part in item.content if isinstance(part, _OutputText))
        elif isinstance(item, ResponseFunctionToolCall):
            calls.append(FrameworkToolCall(item.call_id, item.name, _arguments(item.arguments)))
    return "".join(texts), calls


def _query(value: str | list[TResponseInputItem] | Any) -> str:
    """The latest user message of a run's input (content: exporters keep it out unless opted in)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        for item in reversed(value):
            if isinstance(item, Mapping) and item.get("role") == "user":
                content = item.get("content")
                if isinstance(content, str):
                    return content
    return ""


def _tool_failure() -> str | None:
    """The error the SDK attached to the running tool's function span, if any.

    ``on_tool_end`` runs inside the tool's function span; the SDK sets its error
    when the tool raised (even when the model is then told about it instead of the
    run failing). Tracing off: no span, no error to read.
    """
    span = get_current_span()
    if span is None or getattr(getattr(span, "span_data", None), "type", None) != "function":
        return None
    error = span.error
    if not error:
        return None
    message = error.get("message") if isinstance(error, Mapping) else None
    return str(message or "the tool failed")


def _run_error(error: BaseException) -> BaseException:
    """The SDK's run-ending exceptions in the contract's terms (others pass unchanged)."""
    if isinstance(error, _AgentsMaxTurns):
        return MaxTurnsExceeded(str(error))
    if isinstance(error, (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered)):
        guardrail = error.guardrail_result.guardrail
        kind = "input" if isinstance(error, InputGuardrailTripwireTriggered) else "output"
        return LoopError(f"{kind} guardrail {guardrail.get_name()!r} tripped")
    return error


class AgentsRunStopped(RunStopped, AgentsException):
    """The :class:`~loopobs.adapters.RunStopped` this adapter raises into the SDK.

    It is also an ``agents.exceptions.AgentsException``, so the SDK attaches the
    partial run to it as it does to its own ``MaxTurnsExceeded``: :attr:`run_data`
    (``RunErrorDetails``: ``input``, ``new_items``, ``raw_responses``,
    ``last_agent``, ``context_wrapper``, guardrail results) holds what the run
    produced before loopobs stopped it. Catch it as ``RunStopped``, ``LoopDetected``
    or ``AgentsException``. The run's telemetry records the stop itself (a plain
    ``RunStopped``).
    """

    run_data: RunErrorDetails | None

    @classmethod
    def of_stop(cls, stop: RunStopped) -> AgentsRunStopped:
        """The exception to raise into the SDK for the stop the policy decided."""
        raised = cls(stop.message, pattern=stop.pattern, status=stop.status)
        raised.stop = stop
        return raised

    stop: RunStopped | None = None
    """The stop the policy decided (what the run's ``on_run_end`` reports)."""


class _CurrentSpan(otel_trace.Span):
    """The OpenTelemetry span that is current while the SDK runs an observed run.

    The SDK runs each tool body in a task of its own, and calls run hooks in
    tasks of their own: a span an observer makes current from a hook (the
    ``execute_tool`` span, from ``on_tool_start``) never reaches the tool's task.
    So the adapter makes this span current around the ``Runner`` call, and every
    task the SDK starts inherits it. It stands for the span that is current there:
    inside a tool body, the span an observer made current for that tool call (the
    tool is found by the SDK's own current span, the call's function span, which
    the SDK sets with or without its tracing); inside a model call, the one made
    current for that call (``chat``); anywhere else, the span that was current when
    the run began. Spans the user's code opens get the real span as their parent.
    It never ends a span: ``end()`` does nothing.
    """

    def __init__(self, outer: otel_trace.Span) -> None:
        self.outer = outer.target() if isinstance(outer, _CurrentSpan) else outer
        self._tools: dict[int, tuple[object, otel_trace.Span]] = {}
        self.model_call: otel_trace.Span | None = None

    def target(self) -> otel_trace.Span:
        """The span this one stands for where it is asked."""
        sdk_span = get_current_span()
        if sdk_span is not None:
            entry = self._tools.get(id(sdk_span))
            if entry is not None and entry[0] is sdk_span:
                return entry[1]
        model_call = self.model_call
        return model_call if model_call is not None else self.outer

    def bind_tool(self, span: otel_trace.Span) -> object | None:
        """Stand for ``span`` inside the tool call whose function span is current; its key."""
        sdk_span = get_current_span()
        if sdk_span is None:
            return None
        self._tools[id(sdk_span)] = (sdk_span, span)
        return sdk_span

    def unbind_tool(self, key: object | None) -> None:
        entry = self._tools.get(id(key))
        if entry is not None and entry[0] is key:
            del self._tools[id(key)]

    def clear(self) -> None:
        self._tools.clear()
        self.model_call = None

    # -- otel_trace.Span, delegated --------------------------------------------------------
    def get_span_context(self) -> otel_trace.SpanContext:
        return self.target().get_span_context()

    def is_recording(self) -> bool:
        return self.target().is_recording()

    def end(self, end_time: int | None = None) -> None:
        """Does nothing: the spans it stands for end when their events say."""

    def set_attributes(self, attributes: Mapping[str, otel_types.AttributeValue]) -> None:
        self.target().set_attributes(attributes)

    def set_attribute(self, key: str, value: otel_types.AttributeValue) -> None:
        self.target().set_attribute(key, value)

    def add_event(
        self, name: str, attributes: otel_types.Attributes = None, timestamp: int | None = None
    ) -> None:
        self.target().add_event(name, attributes, timestamp)

    def add_link(
        self, context: otel_trace.SpanContext, attributes: otel_types.Attributes = None
    ) -> None:
        self.target().add_link(context, attributes)

    def update_name(self, name: str) -> None:
        self.target().update_name(name)

    def set_status(
        self, status: otel_trace.Status | otel_trace.StatusCode, description: str | None = None
    ) -> None:
        self.target().set_status(status, description)

    def record_exception(
        self,
        exception: BaseException,
        attributes: otel_types.Attributes = None,
        timestamp: int | None = None,
        escaped: bool = False,
    ) -> None:
        self.target().record_exception(exception, attributes, timestamp, escaped)


def _made_current(before: otel_trace.Span) -> otel_trace.Span | None:
    """The span an observer made current since ``before`` was (on this task), if any."""
    span = otel_trace.get_current_span()
    return None if span is before or isinstance(span, _CurrentSpan) else span


class ObservedRunHooks(RunHooks[Any]):
    """The ``RunHooks`` of one observed run: reports into ``run``, then calls ``inner``.

    Every hook is shielded: an adapter or observer failure is logged and never
    reaches the SDK, except :class:`~loopobs.adapters.RunStopped`, raised on
    purpose from :meth:`on_llm_start`. ``inner`` (the caller's own hooks) is
    awaited after the adapter's bookkeeping, and its exceptions propagate as
    they would without the adapter.
    """

    def __init__(
        self,
        run: AdapterRun,
        run_config: RunConfig | None,
        inner: RunHooks[Any] | None = None,
        *,
        streamed: bool = False,
    ) -> None:
        self.run = run
        self.inner = inner
        self.streamed = streamed
        """Whether the SDK streams this run's model calls (``Runner.run_streamed``)."""
        self.current = _CurrentSpan(otel_trace.get_current_span())
        """The span made current around the ``Runner`` call (see :class:`_CurrentSpan`)."""
        self._run_config = run_config
        self._calls = 0
        self.open_call: int | None = None
        """The key of the model call in flight, if any."""
        self._tools = 0
        self._tool_keys: dict[int, object] = {}
        self._tool_spans: dict[object, object] = {}
        self._started_ids: set[str] = set()
        self._last_calls: list[FrameworkToolCall] = []
        self._model = run.model

    @shielded
    async def _llm_start(self, agent: Agent[Any]) -> None:
        model = _model_name(agent, self._run_config)
        provider = _provider(agent, self._run_config)
        # Budgets, then a decided stop: RunStopped leaves here, before the model call,
        # as an AgentsException, so the SDK attaches the partial run (run_data) to it.
        try:
            self.run.before_model_call(model=model, provider=provider)
        except RunStopped as stop:
            raise AgentsRunStopped.of_stop(stop) from None
        # The SDK calls the model again only once the previous turn's tools and
        # handoff are done: that turn ends here, before a model switch is reported.
        self.run.end_turn()
        self._switch(model)
        self._calls += 1
        before = otel_trace.get_current_span()
        if self.run.model_start(self._calls, model=model, provider=provider, stream=self.streamed):
            self.open_call = self._calls
            self.current.model_call = _made_current(before)

    def _switch(self, model: str) -> None:
        previous, self._model = self._model, model
        if previous and previous != model:
            em = self.run.tracker.receivers
            if em.listens("on_model_switched"):
                em.on_model_switched(
                    ModelSwitchedContext(
                        run_id=self.run.run_id,
                        time_ns=_now_ns(),
                        from_model=previous,
                        to_model=model,
                    )
                )

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[TResponseInputItem],
    ) -> None:
        """A model call begins: a new turn and its ``on_stream_start``; raises a decided stop."""
        await self._llm_start(agent)
        if self.inner is not None:
            await self.inner.on_llm_start(context, agent, system_prompt, input_items)

    @shielded
    async def _llm_end(self, response: ModelResponse) -> None:
        key, self.open_call = self.open_call, None
        self.current.model_call = None
        if key is None:
            return
        text, calls = _read_response(response)
        self._last_calls = calls
        self.run.model_end(
            key,
            usage=_usage(response.usage),
            text=text,
            tool_calls=calls,
            response_id=response.response_id,
        )

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        """The model call returned: usage, text and the tool calls it asks for."""
        await self._llm_end(response)
        if self.inner is not None:
            await self.inner.on_llm_end(context, agent, response)

    @shielded
    async def _tool_start(self, context: RunContextWrapper[Any], tool: Tool) -> None:
        self._tools += 1
        before = otel_trace.get_current_span()
        if isinstance(context, ToolContext):
            key: object = context.tool_call_id
            self._started_ids.add(context.tool_call_id)
            self.run.tool_start(
                key,
                tool=tool.name,
                call_id=context.tool_call_id,
                arguments=_arguments(context.tool_arguments),
            )
        else:  # hosted and shell-like tools carry no call id
            key = f"{tool.name}#{self._tools}"
            self.run.tool_start(key, tool=tool.name)
        self._tool_keys[id(context)] = key
        # The span an observer made current for the call (execute_tool) is current
        # only in this hook's task; the tool body, in a task of its own, sees it
        # through the run's current span.
        span = _made_current(before)
        if span is not None:
            self._tool_spans[key] = self.current.bind_tool(span)

    async def on_tool_start(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool
    ) -> None:
        """A tool call attempt begins: ``on_tool_pre``."""
        await self._tool_start(context, tool)
        if self.inner is not None:
            await self.inner.on_tool_start(context, agent, tool)

    @shielded
    async def _tool_end(self, context: RunContextWrapper[Any], tool: Tool, result: object) -> None:
        key = self._tool_keys.pop(id(context), None)
        if key is None and isinstance(context, ToolContext):
            key = context.tool_call_id
        if key is None:
            return
        self.current.unbind_tool(self._tool_spans.pop(key, None))
        text = result if isinstance(result, str) else str(result)
        failure = _tool_failure()
        error = None if failure is None else ToolExecutionError(failure, tool=tool.name)
        self.run.tool_end(key, result=text, error=error)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], tool: Tool, result: object
    ) -> None:
        """A tool call attempt returned: ``on_tool_post`` with its result.

        The SDK turns a tool's exception into a message for the model (its
        ``failure_error_function``) before this hook, and marks the tool's
        function span failed: with SDK tracing on, the call is reported as an
        error carrying that message; with tracing off, as its output.
        """
        await self._tool_end(context, tool, result)
        if self.inner is not None:
            await self.inner.on_tool_end(context, agent, tool, result)

    def _handoff_call(self, to_agent: Agent[Any]) -> FrameworkToolCall | None:
        """The call of the last response that asked for this handoff (never a function tool's)."""
        unstarted = [c for c in self._last_calls if c.id not in self._started_ids]
        default = Handoff.default_tool_name(to_agent)
        for call in unstarted:
            if call.name == default:
                return call
        return unstarted[0] if unstarted else None

    @shielded
    async def _handoff(self, to_agent: Agent[Any]) -> None:
        call = self._handoff_call(to_agent)
        if call is not None:
            self._started_ids.add(call.id)
            key: object = call.id
            name, call_id = call.name, call.id
        else:
            self._tools += 1
            key = name = Handoff.default_tool_name(to_agent)
            call_id = f"{name}#{self._tools}"
        self.run.tool_start(
            key, tool=name, call_id=call_id, arguments=call.arguments if call is not None else {}
        )
        self.run.tool_end(key, result=to_agent.name)

    async def on_handoff(
        self, context: RunContextWrapper[Any], from_agent: Agent[Any], to_agent: Agent[Any]
    ) -> None:
        """Control passes to another agent: reported as a tool call of the handoff."""
        await self._handoff(to_agent)
        if self.inner is not None:
            await self.inner.on_handoff(context, from_agent, to_agent)

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Agent[Any]) -> None:
        """Only forwarded: the run started when the adapter started it."""
        if self.inner is not None:
            await self.inner.on_agent_start(context, agent)

    async def on_agent_end(
        self, context: AgentHookContext[Any], agent: Agent[Any], output: Any
    ) -> None:
        """Only forwarded: the run ends when ``Runner`` returns."""
        if self.inner is not None:
            await self.inner.on_agent_end(context, agent, output)

    # -- the end of the run ----------------------------------------------------------------
    def _park(self, interruptions: Sequence[Any]) -> bool:
        """Report the first tool call awaiting approval as a human gate; True if there is one."""
        item = interruptions[0] if interruptions else None
        run, turn = self.run, self.run.turn
        if item is None or turn is None:
            return False
        raw = getattr(item, "raw_item", None)
        tool = getattr(item, "tool_name", None) or getattr(raw, "name", None) or "tool"
        call_id = getattr(raw, "call_id", None) or str(id(item))
        em = run.tracker.receivers
        if em.listens("on_suspended"):
            em.on_suspended(
                SuspendedContext(
                    run_id=run.run_id,
                    time_ns=_now_ns(),
                    turn=turn,
                    tool=str(tool),
                    tool_call_id=str(call_id),
                    reason="the tool call needs approval",
                    input_schema={},
                    kind="human",
                )
            )
        return True

    def finish(self, error: BaseException | None = None, interruptions: Sequence[Any] = ()) -> None:
        """End the run (once): fail the model call in flight with ``error``, then ``on_run_end``.

        A run the SDK interrupted for tool approvals ends ``suspended``, after an
        ``on_suspended`` for the first call awaiting approval.
        """
        self.current.clear()
        self._tool_spans.clear()
        if isinstance(error, AgentsRunStopped) and error.stop is not None:
            error = error.stop  # the telemetry records the stop itself
        try:
            if error is None and interruptions and self._park(interruptions):
                self.run.end(status="suspended")
                return
            if error is not None:
                error = _run_error(error)
                if self.open_call is not None:
                    self.run.model_error(self.open_call, error)
                    self.open_call = None
            status = "max_turns" if isinstance(error, MaxTurnsExceeded) else None
            self.run.end(error=error, status=status)
        except Exception:  # never let bookkeeping replace the run's own outcome
            _log.exception("loopobs: ending an OpenAI Agents SDK run failed")


class AgentsAdapter:
    """Runs OpenAI Agents SDK agents with every event reported to loopobs observers.

    ``run``, ``run_sync`` and ``run_streamed`` take the same arguments as the
    SDK's ``Runner`` methods and return what they return; ``hooks`` given by
    the caller are still called. Each call is one loopobs run; runs sharing an
    SDK ``session`` (or ``conversation_id``) share a loopobs session, so their
    turn numbers keep counting.

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL …).
        detectors: observers whose verdicts may stop a run; ``None`` means the
            default repetition and convergence detectors, ``[]`` none.
        agent: the agent name reported when an agent has none.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
    ) -> None:
        self.tracker = RunTracker(observers, detectors=detectors, agent=agent, prices=prices)

    @property
    def observers(self) -> ObserverSet:
        """The observers (a :class:`~loopobs.contract.observer.ObserverSet`); attach any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs

    def _start(
        self, agent: Agent[Any], input: Any, kwargs: dict[str, Any], *, streamed: bool = False
    ) -> ObservedRunHooks:
        run_config = kwargs.get("run_config")
        if isinstance(run_config, Mapping):
            run_config = RunConfig(**run_config)
            kwargs["run_config"] = run_config
        session = kwargs.get("session")
        key = getattr(session, "session_id", None) or kwargs.get("conversation_id")
        session_id = uuid.uuid5(_SESSION_NAMESPACE, str(key)) if key else None
        run = self.tracker.start_run(
            agent=agent.name or None,
            model=_model_name(agent, run_config),
            session_id=session_id,
            query=_query(input),
            instructions=agent.instructions if isinstance(agent.instructions, str) else "",
        )
        hooks = ObservedRunHooks(run, run_config, kwargs.get("hooks"), streamed=streamed)
        kwargs["hooks"] = hooks
        return hooks

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run(agent, input, **kwargs)``, observed.

        Raises:
            RunStopped: the loop policy stopped the run (a runaway tool loop).
            Exception: whatever ``Runner.run`` raises, unchanged.
        """
        hooks = self._start(agent, input, kwargs)
        token = otel_context.attach(otel_trace.set_span_in_context(hooks.current))
        try:
            result = await Runner.run(agent, input, **kwargs)
        except BaseException as exc:
            hooks.finish(exc)
            raise
        finally:
            otel_context.detach(token)
        hooks.finish(interruptions=result.interruptions)
        return result

    def run_sync(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        **kwargs: Any,
    ) -> RunResult:
        """``Runner.run_sync(...)``, observed: :meth:`run` for code without an event loop."""
        return asyncio.run(self.run(agent, input, **kwargs))

    def run_streamed(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        **kwargs: Any,
    ) -> RunResultStreaming:
        """``Runner.run_streamed(...)``, observed; must be called inside an event loop.

        The run ends when the SDK's run task ends: after the last event, on an
        error (which ``stream_events()`` raises), or on ``result.cancel()``.
        """
        hooks = self._start(agent, input, kwargs, streamed=True)
        # The SDK's run task copies the context it is created in: the run's current span.
        token = otel_context.attach(otel_trace.set_span_in_context(hooks.current))
        try:
            result = Runner.run_streamed(agent, input, **kwargs)
        except BaseException as exc:
            hooks.finish(exc)
            raise
        finally:
            otel_context.detach(token)
        task = result.run_loop_task
        if task is None:  # nothing will run: the SDK refused before starting
            hooks.finish()
            return result
        task.add_done_callback(lambda t: _finish_streamed(hooks, result, t))
        return result


def _finish_streamed(
    hooks: ObservedRunHooks, result: RunResultStreaming, task: asyncio.Task[Any]
) -> None:
    if task.cancelled():
        hooks.finish(asyncio.CancelledError())
    elif task.exception() is not None:
        hooks.finish(task.exception())
    else:
        hooks.finish(interruptions=result.interruptions)
