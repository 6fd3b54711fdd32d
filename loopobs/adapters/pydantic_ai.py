"""The pydantic-ai adapter: a capability that reports agent runs as loopobs runs.

:class:`LoopobsCapability` is a pydantic-ai capability (the framework's public
hook API). Give it to an agent, or to one run::

    capability = LoopobsCapability(observers=[TracingObserver(...), PrometheusObserver(...)])
    agent = Agent("openai:gpt-4o", capabilities=[capability])
    result = await agent.run("What is the weather in Paris?")

It works however the run is driven: ``run``, ``run_sync``, ``run_stream``,
``run_stream_events`` and ``iter``. What maps to what:

- ``wrap_run`` → one loopobs run (``invoke_agent {agent name}``), ended exactly
  once: on the result, on any exception (a usage limit, a tool's unhandled
  error, ``UnexpectedModelBehavior``), and on cancellation (also when the caller
  leaves a ``run_stream`` / ``iter`` block early);
- ``wrap_model_request`` → a turn and its model call, with the usage the model
  reported (``RequestUsage``: cache reads and writes, reasoning tokens; unknown,
  never 0, for a response pydantic-ai marks as without usage), whether the request
  was streamed (``ModelRequestContext.streaming``), the
  response's text, finish reason, response id and model, and its tool calls
  (output tools excluded: their arguments are the final result, reported as
  the response's text);
- ``prepare_model_request`` → from a request's second attempt on (``ModelFallback``,
  a backoff), the failed attempt's stream failure, ``on_fallback`` and
  ``on_model_switched`` when the model changes, and the next attempt's stream;
- ``wrap_tool_execute`` → one tool call attempt. ``ModelRetry`` from a tool (the
  model is asked to try again) is reported as an error outcome
  (``ToolExecutionError`` with ``error_type="ModelRetry"``) carrying the retry
  message; the model's new call, in the next turn, is a call of its own;
- a result of ``DeferredToolRequests`` (approvals, external calls) → the run
  parks: ``on_suspended`` for the first deferred call, status ``suspended``.

Stopping: when a detector's verdict is ``stop``, the adapter raises
:class:`~loopobs.adapters.RunStopped` from ``wrap_tool_execute`` right after the
tool call that completed the pattern, and from the next ``wrap_model_request``
for any other stop. pydantic-ai propagates exceptions of capability hooks, so
``agent.run(...)`` raises ``RunStopped`` (a :class:`~loopobs.contract.errors.LoopDetected`)
and the run ends with status ``loop_detected``. ``warn`` verdicts leave the run
alone. Converged answers come with a final answer, which ends the run anyway:
it completes, and the detection is reported.

Text and thinking deltas (and so time to first token) are reported only with
``LoopobsCapability(..., deltas=True)``: listening to the run's event stream makes
pydantic-ai stream every model request, also under ``agent.run()``, which changes
how the model is called; the default leaves that alone.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable
from typing import Any

from loopobs.adapters import missing_extra

try:
    from pydantic_ai import DeferredToolRequests, RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.exceptions import ToolRetryError
    from pydantic_ai.messages import (
        AgentStreamEvent,
        ModelResponse,
        PartDeltaEvent,
        PartStartEvent,
        TextPart,
        TextPartDelta,
        ThinkingPart,
        ThinkingPartDelta,
        ToolCallPart,
    )
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RequestUsage
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("pydantic_ai", "pydantic-ai-slim", "pydantic-ai", _exc) from _exc

from loopobs.adapters import AdapterRun, FrameworkToolCall, RunTracker, shielded, token_count
from loopobs.contract.errors import ModelError, ToolExecutionError
from loopobs.contract.events import FallbackContext, ModelSwitchedContext, SuspendedContext, Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["LoopobsCapability"]

_log = logging.getLogger("loopobs.adapters.pydantic_ai")

_SESSION_NAMESPACE = uuid.UUID("0b7e4f0e-2f7c-4a57-8a5e-7a1d0c9f3e21")


def _usage(usage: RequestUsage) -> Usage | None:
    """pydantic-ai's usage of one request in the contract's counting (the same: cached tokens
    inside input, reasoning tokens inside output); None when the response had none (pydantic-ai
    marks it ``unmeasured_requests``: its zeros mean unknown)."""
    if getattr(usage, "unmeasured_requests", 0):
        return None
    return Usage(
        input_tokens=token_count(usage.input_tokens),
        output_tokens=token_count(usage.output_tokens),
        cache_read_input_tokens=token_count(usage.cache_read_tokens),
        cache_write_input_tokens=token_count(usage.cache_write_tokens),
        reasoning_output_tokens=_reasoning_tokens(usage),
    )


def _reasoning_tokens(usage: RequestUsage) -> Any:
    # A field of its own in recent releases; before, only the provider's ``details``.
    value = getattr(usage, "output_reasoning_tokens", None)
    if value is not None:
        return token_count(value)
    details = usage.details or {}
    return token_count(details.get("reasoning_tokens"))


def _streaming(request_context: ModelRequestContext) -> bool | None:
    """Whether pydantic-ai streams this request (``run_stream``, ``iter``, an event stream
    handler); None on releases before ``ModelRequestContext.streaming``."""
    streaming = getattr(request_context, "streaming", None)
    return streaming if isinstance(streaming, bool) else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        from pydantic_core import to_json

        return to_json(value).decode()
    except Exception:
        return str(value)


def _read_response(
    response: ModelResponse, output_tools: set[str]
) -> tuple[str, list[FrameworkToolCall]]:
    """The response's text (or, for an output tool, its arguments) and its tool calls."""
    texts: list[str] = []
    calls: list[FrameworkToolCall] = []
    for part in response.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            if part.tool_name in output_tools:
                texts.append(part.args_as_json_str())
            else:
                calls.append(
                    FrameworkToolCall(part.tool_call_id, part.tool_name, part.args_as_dict())
                )
    return "".join(texts), calls


class LoopobsCapability(AbstractCapability[Any]):
    """A pydantic-ai capability that reports every run of its agent to loopobs observers.

    One instance may serve any number of agents and concurrent runs: each run
    gets its own state (:meth:`for_run`). Runs sharing a ``conversation_id``
    share a loopobs session, so their turn numbers keep counting.

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL …).
        detectors: observers whose verdicts may stop a run; ``None`` means the
            default repetition and convergence detectors, ``[]`` none.
        agent: the agent name reported when the agent has none.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: report into this :class:`~loopobs.adapters.RunTracker` instead
            (``observers``, ``detectors``, ``agent`` and ``prices`` are then ignored), to share
            observers, detectors and sessions with another adapter.
        deltas: also report text and thinking deltas (and time to first token);
            pydantic-ai then streams every model request of the agent's runs.
    """

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str = "agent",
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
        deltas: bool = False,
    ) -> None:
        self.tracker = tracker or RunTracker(
            observers, detectors=detectors, agent=agent, prices=prices
        )
        self.deltas = deltas

    def __repr__(self) -> str:
        return f"LoopobsCapability(observers={len(self.tracker.observers)})"

    @property
    def observers(self) -> ObserverSet:
        """The observers; attach and detach at any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs

    async def for_run(self, ctx: RunContext[Any]) -> AbstractCapability[Any]:
        """A fresh :class:`_ObservedRun` for each run: runs never share state."""
        return _ObservedRunWithDeltas(self.tracker) if self.deltas else _ObservedRun(self.tracker)


class _ObservedRun(AbstractCapability[Any]):
    """The per-run half of :class:`LoopobsCapability`: one :class:`AdapterRun` per agent run."""

    def __init__(self, tracker: RunTracker) -> None:
        self.tracker = tracker
        self.run: AdapterRun | None = None
        self._requests = 0
        self._open: tuple[int, int] | None = None
        """The key of the model call attempt in flight: (request, attempt)."""
        self._open_model = ""

    def __repr__(self) -> str:
        return "LoopobsCapability.run"

    @shielded
    def _start(self, ctx: RunContext[Any]) -> None:
        agent = ctx.agent.name if ctx.agent is not None else None
        session = (
            uuid.uuid5(_SESSION_NAMESPACE, ctx.conversation_id) if ctx.conversation_id else None
        )
        self.run = self.tracker.start_run(
            agent=agent,
            model=ctx.model.model_name,
            session_id=session,
            query=ctx.prompt if isinstance(ctx.prompt, str) else "",
        )

    def _end(self, error: BaseException | None, status: str | None = None) -> None:
        run = self.run
        if run is None:
            return
        try:
            run.end(error=error, status=status)
        except Exception:  # bookkeeping never replaces the run's own outcome
            _log.exception("loopobs: ending a pydantic-ai run failed")

    async def wrap_run(self, ctx: RunContext[Any], *, handler: Any) -> AgentRunResult[Any]:
        """The run: ``on_run_start`` before it, ``on_run_end`` after it, whatever happens.

        A run that ends with deferred tool calls (``DeferredToolRequests``) parks:
        ``on_suspended`` for the first one (``human`` for an approval, ``signal`` for
        an external call), then the run ends ``suspended``.
        """
        self._start(ctx)
        try:
            result: AgentRunResult[Any] = await handler()
        except BaseException as exc:
            self._end(exc)
            raise
        if isinstance(result.output, DeferredToolRequests) and self._park(result.output):
            self._end(None, status="suspended")
        else:
            self._end(None)
        return result

    @shielded
    def _park(self, requests: DeferredToolRequests) -> bool:
        run = self.run
        turn = run.turn if run is not None else None
        waiting = [(c, "human") for c in requests.approvals] + [
            (c, "signal") for c in requests.calls
        ]
        if run is None or turn is None or not waiting:
            return False
        call, kind = waiting[0]
        em = run.tracker.receivers
        if em.listens("on_suspended"):
            em.on_suspended(
                SuspendedContext(
                    run_id=run.run_id,
                    time_ns=time.time_ns(),
                    turn=turn,
                    tool=call.tool_name,
                    tool_call_id=call.tool_call_id,
                    reason=(
                        "the tool call needs approval"
                        if kind == "human"
                        else "the tool call runs outside the agent"
                    ),
                    input_schema={},
                    kind="human" if kind == "human" else "signal",
                )
            )
        return True

    # -- model requests --------------------------------------------------------------------
    @shielded
    def _model_start(self, request_context: ModelRequestContext) -> None:
        run = self.run
        if run is None:
            return
        model = request_context.model
        # Budgets, then a decided stop: RunStopped leaves here, before the request.
        run.before_model_call(model=model.model_name, provider=model.system)
        key = (self._requests, 1)
        if run.model_start(
            key, model=model.model_name, provider=model.system, stream=_streaming(request_context)
        ):
            self._open, self._open_model = key, model.model_name

    @shielded
    def _next_attempt(self, request_context: ModelRequestContext) -> None:
        """Another attempt of the open request (a fallback, a backoff): the last one failed."""
        run, open_key = self.run, self._open
        if run is None or open_key is None or open_key[0] != self._requests:
            return
        model = request_context.model
        previous, current = self._open_model, model.model_name
        self._open = None
        run.model_error(
            open_key,
            ModelError(
                f"attempt {open_key[1]} failed; pydantic-ai made another",
                retryable=True,
                provider=model.system or None,
            ),
        )
        turn = run.turn
        em = run.tracker.receivers
        if previous != current and turn is not None:
            now = time.time_ns()
            if em.listens("on_fallback"):
                em.on_fallback(
                    FallbackContext(
                        run_id=run.run_id,
                        time_ns=now,
                        from_model=previous,
                        to_model=current,
                        turn=turn,
                    )
                )
            if em.listens("on_model_switched"):
                em.on_model_switched(
                    ModelSwitchedContext(
                        run_id=run.run_id, time_ns=now, from_model=previous, to_model=current
                    )
                )
        key = (self._requests, int(getattr(request_context, "attempt", open_key[1] + 1)))
        if run.model_start(
            key, model=current, provider=model.system, stream=_streaming(request_context)
        ):
            self._open, self._open_model = key, current

    @shielded
    def _model_end(self, request_context: ModelRequestContext, response: ModelResponse) -> None:
        run, key = self.run, self._open
        self._open = None
        if run is None or key is None:
            return
        outputs = {t.name for t in request_context.model_request_parameters.output_tools}
        text, calls = _read_response(response, outputs)
        run.model_end(
            key,
            usage=_usage(response.usage),
            text=text,
            tool_calls=calls,
            finish_reason=response.finish_reason,
            response_id=response.provider_response_id,
            response_model=response.model_name,
        )

    @shielded
    def _model_error(self, error: BaseException) -> None:
        run, key = self.run, self._open
        self._open = None
        if run is not None and key is not None:
            run.model_error(key, error)

    async def wrap_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, handler: Any
    ) -> ModelResponse:
        """One model request: a turn, its ``on_stream_start`` and success or failure."""
        self._requests += 1
        self._model_start(request_context)
        try:
            response: ModelResponse = await handler(request_context)
        except BaseException as exc:
            self._model_error(exc)
            raise
        self._model_end(request_context, response)
        return response

    async def prepare_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Each attempt of a request; from the second on (a ``ModelFallback`` moving to the
        next model, a backoff retrying), the previous attempt failed: its stream fails, and
        a fallback to another model is reported (``on_fallback``, ``on_model_switched``)."""
        if getattr(request_context, "attempt", 1) > 1:  # releases before attempts: always 1
            self._next_attempt(request_context)
        return request_context

    # -- tools -----------------------------------------------------------------------------
    @shielded
    def _tool_start(self, key: object, ctx: RunContext[Any], call: ToolCallPart) -> None:
        if self.run is not None:
            self.run.tool_start(
                key, tool=call.tool_name, call_id=call.tool_call_id, arguments=call.args_as_dict()
            )

    @shielded
    def _tool_end(
        self, key: object, tool: str, result: Any = None, error: BaseException | None = None
    ) -> None:
        run = self.run
        if run is None:
            return
        if isinstance(error, ToolRetryError):
            # The model is asked to try again: the call failed, the run goes on.
            message = str(error)
            run.tool_end(
                key,
                result=message,
                error=ToolExecutionError(message, tool=tool, error_type="ModelRetry"),
            )
        elif error is not None:
            run.tool_end(key, error=error)
        else:
            run.tool_end(key, result=_text(result))
        run.raise_if_stopped()

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: Any,
    ) -> Any:
        """One tool call attempt: ``on_tool_pre``, then ``on_tool_post`` with its outcome.

        Raises ``RunStopped`` after the call when the loop policy stopped the run.
        """
        key = object()  # one attempt; the model's call id may repeat across turns
        self._tool_start(key, ctx, call)
        try:
            result = await handler(args)
        except BaseException as exc:
            self._tool_end(key, call.tool_name, error=exc)
            raise
        self._tool_end(key, call.tool_name, result)
        return result


class _ObservedRunWithDeltas(_ObservedRun):
    """:class:`_ObservedRun` that also listens to the run's event stream, for deltas."""

    def listens_to(self, event: AgentStreamEvent) -> bool:
        """Only the starts and deltas of response parts."""
        return isinstance(event, (PartStartEvent, PartDeltaEvent))

    async def on_event(self, ctx: RunContext[Any], *, event: AgentStreamEvent) -> None:
        """A part of the streamed response: a text or thinking delta of the open model call."""
        self._delta(event)

    @shielded
    def _delta(self, event: AgentStreamEvent) -> None:
        run, key = self.run, self._open
        if run is None or key is None:
            return
        if isinstance(event, PartStartEvent):
            part = event.part
            if isinstance(part, TextPart) and part.content:
                run.text_delta(key, part.content)
            elif isinstance(part, ThinkingPart):
                run.thinking_delta(key, part.content)
        elif isinstance(event, PartDeltaEvent):
            delta = event.delta
            if isinstance(delta, TextPartDelta) and delta.content_delta:
                run.text_delta(key, delta.content_delta)
            elif isinstance(delta, ThinkingPartDelta) and delta.content_delta is not None:
                run.thinking_delta(key, delta.content_delta)
