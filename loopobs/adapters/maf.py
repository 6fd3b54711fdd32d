"""Microsoft Agent Framework: middleware that reports and stops each agent run.

:class:`LoopobsMiddleware` holds three Agent Framework middleware — agent, chat and
function — that together report every run of an ``Agent`` as one loopobs run::

    observed = LoopobsMiddleware(observers=[TracingObserver(...), PrometheusObserver(...)])
    agent = Agent(client=client, name="weather", tools=[...], middleware=observed.middleware)
    response = await agent.run("What is the weather in Paris?")

What maps to what:

- the agent middleware → one loopobs run per ``agent.run(...)`` (the agent's ``name``),
  ended exactly once, whatever the run raises; runs sharing an ``AgentSession`` share a
  loopobs session (turn numbers keep counting);
- the chat middleware → a turn and its model call, with the ``usage_details`` the client
  reported (none reported is unknown, never 0), the text and the function calls of the
  response; a call that raises fails its stream;
- the function middleware → one tool call attempt (paired by the model's call id), with its
  result; an exception is a tool error.

Stopping: when a detector's verdict (or a :class:`~loopobs.cost.budget.BudgetGuard`) says
``stop``, the chat middleware raises :class:`~loopobs.adapters.RunStopped` before the next
model call; the framework propagates it, so ``agent.run`` raises it. The chat and function
middleware find their run through a context variable the agent middleware sets, so they
report only inside a run the agent middleware opened (put all three on the agent).

Streamed runs (``agent.run(..., stream=True)``) are not reported yet: they pass through.

Content: messages, tool arguments and results reach observers as in every adapter; loopobs's
exporters keep them out of telemetry unless opted in. The framework's own spans are untouched
(their content switch is ``ENABLE_SENSITIVE_DATA``).
"""

from __future__ import annotations

import contextvars
import json
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from loopobs.adapters import missing_extra

try:
    from agent_framework import (
        AgentContext,
        AgentMiddleware,
        ChatContext,
        ChatMiddleware,
        FunctionInvocationContext,
        FunctionMiddleware,
    )
except ModuleNotFoundError as _exc:  # tested with the framework hidden
    raise missing_extra("maf", "agent-framework-core", "agent-framework", _exc) from _exc

from loopobs.adapters import AdapterRun, FrameworkToolCall, RunTracker, shielded
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["LoopobsMiddleware"]

_SESSION_NAMESPACE = uuid.UUID("9a3c1f4e-2b6d-4e8a-b1c7-5d2e3f4a6b70")


class _Current:
    """The run the agent middleware opened, as the chat and function middleware see it."""

    __slots__ = ("calls", "run", "tools")

    def __init__(self, run: AdapterRun) -> None:
        self.run = run
        self.calls = 0
        self.tools = 0


_current: contextvars.ContextVar[_Current | None] = contextvars.ContextVar(
    "loopobs_maf_run", default=None
)


def _model_name(client: Any, options: Any) -> str:
    if isinstance(options, dict):
        for key in ("model_id", "model"):
            if isinstance(options.get(key), str) and options[key]:
                return str(options[key])
    for attribute in ("model_id", "model"):
        value = getattr(client, attribute, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _provider(client: Any) -> str:
    name = getattr(client, "OTEL_PROVIDER_NAME", None)
    if isinstance(name, str) and name:
        return name
    module = type(client).__module__
    return "openai" if "openai" in module else ""


def _usage(details: Any) -> Usage | None:
    if not isinstance(details, dict) or details.get("input_token_count") is None:
        return None
    return Usage(
        input_tokens=int(details.get("input_token_count") or 0),
        output_tokens=int(details.get("output_token_count") or 0),
    )


def _contents_text(contents: Iterable[Any]) -> str:
    texts = [
        c.text
        for c in contents
        if getattr(c, "type", None) == "text" and isinstance(getattr(c, "text", None), str)
    ]
    return "".join(texts)


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, str) and value:
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"arguments": value}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {}


def _result_text(result: Any) -> str:
    if isinstance(result, str):
        return result
    if isinstance(result, list):
        text = _contents_text(result)
        if text:
            return text
    try:
        return json.dumps(result, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(result)


class _Agent(AgentMiddleware):
    def __init__(self, owner: LoopobsMiddleware) -> None:
        self.owner = owner

    @shielded
    def _start(self, context: AgentContext) -> _Current | None:
        if _current.get() is not None:  # a nested agent run inside ours: reported in ours
            return None
        if context.stream:  # not reported yet: the run ends when the caller drains the stream
            return None
        session = context.session
        session_id = getattr(session, "session_id", None) if session is not None else None
        query = ""
        for message in reversed(context.messages or ()):
            if getattr(message, "role", None) == "user":
                query = getattr(message, "text", "") or ""
                break
        name = getattr(context.agent, "name", None)
        run = self.owner.tracker.start_run(
            agent=name if isinstance(name, str) and name else None,
            session_id=uuid.uuid5(_SESSION_NAMESPACE, str(session_id)) if session_id else None,
            query=query,
        )
        return _Current(run)

    async def process(
        self, context: AgentContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        """One agent run: ``on_run_start``, the run, ``on_run_end`` (once, whatever happens)."""
        current = self._start(context)
        if current is None:
            await call_next()
            return
        token = _current.set(current)
        try:
            await call_next()
        except BaseException as exc:
            current.run.end(error=exc)
            raise
        finally:
            _current.reset(token)
        current.run.end()


class _Chat(ChatMiddleware):
    @shielded
    def _start(self, context: ChatContext) -> tuple[_Current, int] | None:
        current = _current.get()
        if current is None:
            return None
        model = _model_name(context.client, context.options)
        provider = _provider(context.client)
        # Budgets, then a decided stop: RunStopped leaves here, before the model call.
        current.run.before_model_call(model=model, provider=provider)
        current.calls += 1
        opened = current.run.model_start(current.calls, model=model, provider=provider)
        return (current, current.calls) if opened else None

    @shielded
    def _end(self, opened: tuple[_Current, int], context: ChatContext) -> None:
        current, key = opened
        response = context.result
        messages = getattr(response, "messages", None) or []
        calls: list[FrameworkToolCall] = []
        texts: list[str] = []
        for message in messages:
            contents = getattr(message, "contents", None) or []
            texts.append(_contents_text(contents))
            for content in contents:
                if getattr(content, "type", None) == "function_call":
                    name = str(getattr(content, "name", "") or "tool")
                    call_id = str(getattr(content, "call_id", "") or name)
                    calls.append(
                        FrameworkToolCall(
                            call_id, name, _arguments(getattr(content, "arguments", None))
                        )
                    )
        finish = getattr(response, "finish_reason", None)
        current.run.model_end(
            key,
            usage=_usage(getattr(response, "usage_details", None)),
            text="".join(texts),
            tool_calls=calls,
            finish_reason=str(finish) if finish is not None else None,
            response_id=getattr(response, "response_id", None),
        )

    async def process(self, context: ChatContext, call_next: Callable[[], Awaitable[None]]) -> None:
        """One model call; raises a decided stop before it."""
        opened = self._start(context)
        if opened is None:
            await call_next()
            return
        try:
            await call_next()
        except BaseException as exc:
            opened[0].run.model_error(opened[1], exc)
            raise
        if context.stream:  # the response arrives as the caller reads it: reported as is
            opened[0].run.model_end(opened[1])
            return
        self._end(opened, context)


class _Function(FunctionMiddleware):
    @shielded
    def _start(self, context: FunctionInvocationContext) -> tuple[AdapterRun, str] | None:
        current = _current.get()
        if current is None:
            return None
        current.tools += 1
        name = str(getattr(context.function, "name", "") or "tool")
        metadata = context.metadata if isinstance(context.metadata, dict) else {}
        call_id = str(metadata.get("call_id") or f"{name}#{current.tools}")
        current.run.tool_start(
            call_id, tool=name, call_id=call_id, arguments=_arguments(context.arguments)
        )
        return current.run, call_id

    @shielded
    def _end(
        self, opened: tuple[AdapterRun, str], result: Any, error: BaseException | None
    ) -> None:
        run, call_id = opened
        if error is not None:
            run.tool_end(call_id, error=error)
        else:
            run.tool_end(call_id, result=_result_text(result))

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        """One tool call attempt: ``on_tool_pre`` and ``on_tool_post``."""
        opened = self._start(context)
        if opened is None:
            await call_next()
            return
        try:
            await call_next()
        except BaseException as exc:
            self._end(opened, None, exc)
            raise
        self._end(opened, context.result, None)


class LoopobsMiddleware:
    """Agent, chat and function middleware reporting every run of an Agent Framework agent.

    Pass :attr:`middleware` (all three) to the ``Agent`` (``Agent(..., middleware=...)``);
    one instance may serve several agents and concurrent runs.

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
        self.middleware: list[Any] = [_Agent(self), _Chat(), _Function()]
        """The agent, chat and function middleware, to pass to the ``Agent`` together."""

    @property
    def observers(self) -> ObserverSet:
        """The observers; attach and detach at any time."""
        return self.tracker.observers

    @property
    def active_runs(self) -> int:
        """Runs started and not yet ended."""
        return self.tracker.active_runs
