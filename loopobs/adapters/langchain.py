"""LangChain / LangGraph: a callback handler that reports runnables and graphs as loopobs runs.

Pass :class:`LoopobsCallbackHandler` in a runnable's config and every observer sees
the run as it would see an ``AgentLoop`` run::

    handler = LoopobsCallbackHandler([TracingObserver(provider), PrometheusObserver()])
    graph.invoke({"messages": [("user", "hi")]}, config={"callbacks": [handler]})

What becomes what:

- the outermost chain or graph (a callback without a parent) is the run; with a
  LangGraph ``thread_id`` in the config, runs of one thread share a session, so
  turn numbers keep counting across them;
- each chat model (or LLM) call is a model call: a turn begins with it and holds
  the tool calls that follow; streamed tokens are text deltas (reasoning content
  blocks, thinking deltas); the usage is the message's ``usage_metadata`` as the
  model reported it (OpenAI-style ``token_usage`` otherwise), and unknown when it
  reported none (``ChatOpenAI`` streaming without ``stream_usage``: no
  ``stream_options.include_usage``), never 0; ``gen_ai.request.stream`` is whether
  LangChain streamed the call (its invocation parameters asked for it, or a token
  arrived);
- each tool call is a tool call attempt, paired by LangChain's run id and
  numbered by the model's ``tool_call_id``; a tool that raises, or returns a
  ``ToolMessage`` with ``status="error"``, is a failed attempt;
- nested graphs, subgraph nodes and parallel tool calls report into the run of
  their outermost parent (found through ``parent_run_id``, never through "the
  current run"), so they keep their parents whatever thread or task runs them;
  a graph invoked from inside a tool is a run of its own, nested under that
  tool's span; a model call running while another of the same run is in flight
  (parallel branches) is reported as a run of its own for that branch, in the
  graph run's session and under its budget and stop (a branch's calls never
  escape the ``BudgetGuard`` of the run they are part of).

Bounded: the handler follows at most :data:`MAX_FOLLOWED` LangChain runs whose end
has not been reported; past that the oldest is forgotten (counted in
``evicted_runs``), and a loopobs run it would have ended ends ``cancelled``. When a
loopobs run ends, the LangChain runs still followed for it (a node or tool of an
interrupted graph, whose end never came) are forgotten with it: their late ends would
change nothing.

The handler runs inline (on the thread or task that runs the model or tool), so
the spans of the tracing observer are current while user code runs and spans it
opens nest under them, also in thread pools and asyncio tasks.

Stop: when a detector decides ``stop``, the handler raises
:class:`~loopobs.adapters.RunStopped` from the next callback LangChain lets
exceptions through (it sets ``raise_error``): the end of the tool call that
completed the pattern, or the next tool or model call start. The graph ends and
``invoke`` / ``ainvoke`` raise ``RunStopped`` in the caller (a ``ToolNode`` built
with ``handle_tool_errors=True`` turns the first raise into a tool message; the
next model call start raises again, outside it). ``warn`` leaves the run alone.

One handler serves ``invoke``, ``stream``, ``ainvoke`` and ``astream`` alike:
:class:`LoopobsCallbackHandler` is a synchronous handler that LangChain calls
inline in async runs too. :class:`AsyncLoopobsCallbackHandler` is the same for
code that wants an ``AsyncCallbackHandler``; in a synchronous run LangChain runs
async handlers on another thread and swallows their exceptions, so prefer the
synchronous one there.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from loopobs.adapters._extras import missing_extra

try:
    from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
    from langchain_core.messages import BaseMessage, ToolMessage
    from langchain_core.outputs import ChatGenerationChunk, LLMResult
except ModuleNotFoundError as exc:  # pragma: no cover - exercised in a subprocess test
    raise missing_extra("langchain", "langchain-core", "langchain", exc) from exc

from loopobs.adapters._run import (
    AdapterRun,
    FrameworkToolCall,
    RunStopped,
    RunTracker,
    shielded,
    token_count,
)
from loopobs.contract.errors import Cancelled, ToolExecutionError
from loopobs.contract.events import Usage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.cost.pricing import PricesArg

__all__ = ["AsyncLoopobsCallbackHandler", "LoopobsCallbackHandler", "RunStopped"]

_SESSION_NAMESPACE = uuid.UUID("6f0c1d36-5a53-4f4e-9a0e-0c6b1f1f9a31")


# -- reading LangChain's objects --------------------------------------------------------------


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    return ""


def _reasoning(content: Any) -> str:
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, Mapping) and block.get("type") in ("reasoning", "thinking"):
            parts.append(str(block.get("reasoning") or block.get("thinking") or ""))
    return "".join(parts)


def _query(inputs: Any) -> str:
    """The latest human message of a chain's input (content)."""
    if isinstance(inputs, str):
        return inputs
    messages: Any = inputs.get("messages") if isinstance(inputs, Mapping) else inputs
    if isinstance(messages, Sequence) and not isinstance(messages, str):
        for message in reversed(messages):
            if isinstance(message, BaseMessage) and message.type == "human":
                return _text(message.content)
            if isinstance(message, tuple) and len(message) == 2 and message[0] in ("user", "human"):
                return str(message[1])
    if isinstance(inputs, Mapping):
        value = inputs.get("input") or inputs.get("question")
        if isinstance(value, str):
            return value
    return ""


def _usage(message: Any, llm_output: Mapping[str, Any] | None) -> Usage | None:
    """Token usage as the model reported it: ``usage_metadata``, else ``token_usage``."""
    meta = getattr(message, "usage_metadata", None)
    if meta:
        inp = meta.get("input_token_details") or {}
        out = meta.get("output_token_details") or {}
        return Usage(
            input_tokens=token_count(meta.get("input_tokens")),
            output_tokens=token_count(meta.get("output_tokens")),
            cache_read_input_tokens=token_count(inp.get("cache_read")),
            cache_write_input_tokens=token_count(inp.get("cache_creation")),
            reasoning_output_tokens=token_count(out.get("reasoning")),
        )
    usage = (llm_output or {}).get("token_usage") or (llm_output or {}).get("usage")
    if isinstance(usage, Mapping) and ("prompt_tokens" in usage or "input_tokens" in usage):
        return Usage(
            input_tokens=token_count(usage.get("prompt_tokens", usage.get("input_tokens"))),
            output_tokens=token_count(usage.get("completion_tokens", usage.get("output_tokens"))),
        )
    return None


def _model_name(
    serialized: Mapping[str, Any] | None,
    metadata: Mapping[str, Any] | None,
    kwargs: Mapping[str, Any],
) -> tuple[str, str]:
    meta = metadata or {}
    params = kwargs.get("invocation_params") or {}
    model = (
        meta.get("ls_model_name")
        or params.get("model")
        or params.get("model_name")
        or (serialized or {}).get("name")
        or params.get("_type")
        or ""
    )
    return str(model), str(meta.get("ls_provider") or "")


def _asks_to_stream(kwargs: Mapping[str, Any]) -> bool:
    """Whether the model's invocation parameters ask for a streamed response."""
    params = kwargs.get("invocation_params") or {}
    return params.get("stream") is True or params.get("streaming") is True


def _session(metadata: Mapping[str, Any] | None) -> uuid.UUID | None:
    thread = (metadata or {}).get("thread_id")
    return uuid.uuid5(_SESSION_NAMESPACE, str(thread)) if thread is not None else None


# -- the translation ------------------------------------------------------------------------

MAX_FOLLOWED = 65536
"""LangChain runs (chains, model and tool calls) a handler follows until their end is reported;
past it the oldest is forgotten, and a loopobs run it ended is ended ``cancelled``."""


class _Bridge:
    """LangChain callbacks → :class:`AdapterRun` calls; shared by the sync and async handler."""

    def __init__(self, tracker: RunTracker, agent: str | None) -> None:
        self.tracker = tracker
        self.agent = agent
        self._lock = threading.Lock()
        # LangChain run id → the loopobs run its events belong to (oldest first).
        self._owner: OrderedDict[uuid.UUID, AdapterRun] = OrderedDict()
        # LangChain run ids whose end ends a loopobs run (roots, graphs run by a tool, forks).
        self._roots: dict[uuid.UUID, AdapterRun] = {}
        # loopobs run → the LangChain run ids followed for it: forgotten when its root ends,
        # so that children whose end never came (an interrupted graph) do not stay followed.
        self._members: dict[AdapterRun, set[uuid.UUID]] = {}
        self._tools: set[uuid.UUID] = set()
        # Model calls known to stream: asked for in the invocation params, or a token seen.
        self._streamed: set[uuid.UUID] = set()
        self.evicted = 0
        """LangChain runs forgotten before their end was reported (see :data:`MAX_FOLLOWED`)."""

    @property
    def followed(self) -> int:
        """LangChain runs followed now (their end not reported yet)."""
        return len(self._owner)

    def _follow(
        self, run_id: uuid.UUID, run: AdapterRun, *, root: bool = False, tool: bool = False
    ) -> None:
        """Follow ``run_id`` until its end; past the bound, forget the oldest followed."""
        ended: list[AdapterRun] = []
        with self._lock:
            self._owner[run_id] = run
            members = self._members.get(run)
            if members is None:
                members = self._members[run] = set()
            members.add(run_id)
            if root:
                self._roots[run_id] = run
            if tool:
                self._tools.add(run_id)
            while len(self._owner) > MAX_FOLLOWED:
                old, owner = self._owner.popitem(last=False)
                self._tools.discard(old)
                self._streamed.discard(old)
                self.evicted += 1
                forgotten = self._roots.pop(old, None)
                if forgotten is not None:
                    self.evicted += self._forget_members(forgotten)
                    ended.append(forgotten)
                else:
                    self._members.get(owner, set()).discard(old)
        for forgotten in ended:
            forgotten.end(error=Cancelled("LangChain never reported the end of this run"))

    def _unfollow(self, run_id: uuid.UUID) -> tuple[AdapterRun | None, AdapterRun | None]:
        """Stop following ``run_id`` (its end came): the loopobs run it belongs to, and that
        run again if ``run_id`` was its root, whose end ends it; then every LangChain run
        still followed for it is forgotten, as its end can no longer matter. Lock held."""
        run = self._owner.pop(run_id, None)
        root = self._roots.pop(run_id, None)
        self._tools.discard(run_id)
        self._streamed.discard(run_id)
        if root is not None:
            self._forget_members(root)
        elif run is not None:
            members = self._members.get(run)
            if members is not None:
                members.discard(run_id)
        return run, root

    def _forget_members(self, run: AdapterRun) -> int:
        """Forget the LangChain runs still followed for ``run``, whose root has ended or
        been forgotten; how many were still followed. Lock held."""
        forgotten = 0
        for member in self._members.pop(run, ()):
            if self._owner.pop(member, None) is not None:
                forgotten += 1
            self._tools.discard(member)
            self._streamed.discard(member)
        return forgotten

    def _open(self, run_id: uuid.UUID, run: AdapterRun) -> None:
        self._follow(run_id, run, root=True)

    def _owner_of(self, parent: uuid.UUID | None) -> AdapterRun | None:
        return self._owner.get(parent) if parent is not None else None

    # -- chains --------------------------------------------------------------------------
    def chain_start(
        self,
        serialized: Mapping[str, Any] | None,
        inputs: Any,
        run_id: uuid.UUID,
        parent: uuid.UUID | None,
        metadata: Mapping[str, Any] | None,
        name: str | None,
    ) -> None:
        owner = self._owner_of(parent)
        if owner is not None and parent not in self._tools:
            self._follow(run_id, owner)
            return
        agent = self.agent or name or (serialized or {}).get("name") or None
        run = self.tracker.start_run(
            agent=agent, session_id=_session(metadata), query=_query(inputs)
        )
        self._open(run_id, run)

    def chain_end(self, run_id: uuid.UUID, error: BaseException | None) -> None:
        with self._lock:
            _, run = self._unfollow(run_id)
        if run is not None:
            run.end(error=error)

    # -- model calls ---------------------------------------------------------------------
    def model_start(
        self,
        serialized: Mapping[str, Any] | None,
        messages: Any,
        run_id: uuid.UUID,
        parent: uuid.UUID | None,
        metadata: Mapping[str, Any] | None,
        kwargs: Mapping[str, Any],
    ) -> None:
        model, provider = _model_name(serialized, metadata, kwargs)
        # Asked for in the model's parameters, it streams; otherwise it may still (LangGraph's
        # stream_mode="messages", .stream()): known at its end, from the tokens seen.
        stream = _asks_to_stream(kwargs) or None
        run = self._owner_of(parent)
        if run is not None and parent not in self._tools:
            run.before_model_call(model=model, provider=provider)
            if run.model_start(run_id, model=model, provider=provider, stream=stream):
                self._follow(run_id, run)
                if stream:
                    self._streamed.add(run_id)
                return
        # A model call of its own: called directly, from a tool, or beside another model
        # call of the same run (a parallel branch). It is a run of its own; a branch
        # stays part of its graph run: its session, its budget, its stop.
        query = _query(messages[0] if messages and isinstance(messages[0], list) else messages)
        agent = (metadata or {}).get("langgraph_node") or self.agent or model or None
        branch_of = run if run is not None and parent not in self._tools else None
        fork = self.tracker.start_run(
            agent=str(agent) if agent else None, model=model, query=query, branch_of=branch_of
        )
        try:
            fork.before_model_call(model=model, provider=provider)
        except RunStopped as stop:
            # LangChain reports no end for a call its start refused: end the run here.
            fork.end(error=stop)
            raise
        fork.model_start(run_id, model=model, provider=provider, stream=stream)
        self._open(run_id, fork)
        if stream:
            self._streamed.add(run_id)

    def token(self, run_id: uuid.UUID, token: str | list[Any], chunk: Any) -> None:
        run = self._owner.get(run_id)
        if run is None:
            return
        self._streamed.add(run_id)
        text = token if isinstance(token, str) else _text(token)
        if text:
            run.text_delta(run_id, text)
        if isinstance(chunk, ChatGenerationChunk):
            thinking = _reasoning(chunk.message.content)
            if thinking:
                run.thinking_delta(run_id, thinking)

    def model_end(self, response: LLMResult, run_id: uuid.UUID) -> None:
        with self._lock:
            streamed = run_id in self._streamed
            run, standalone = self._unfollow(run_id)
        if run is None:
            return
        generation = (
            response.generations[0][0] if response.generations and response.generations[0] else None
        )
        message = getattr(generation, "message", None)
        text = (
            _text(message.content)
            if message is not None
            else (generation.text if generation is not None else "")
        )
        calls = [
            FrameworkToolCall(str(c.get("id") or ""), str(c.get("name", "")), c.get("args") or {})
            for c in (getattr(message, "tool_calls", None) or [])
        ]
        meta: Mapping[str, Any] = getattr(message, "response_metadata", None) or {}
        run.model_end(
            run_id,
            usage=_usage(message, response.llm_output),
            text=text,
            tool_calls=calls,
            finish_reason=meta.get("finish_reason") or meta.get("stop_reason"),
            response_id=meta.get("id") or getattr(message, "id", None),
            response_model=meta.get("model_name") or meta.get("model"),
            stream=streamed,
        )
        if standalone is not None:
            standalone.end()
            return
        run.raise_if_stopped()

    def model_error(self, error: BaseException, run_id: uuid.UUID) -> None:
        with self._lock:
            streamed = run_id in self._streamed
            run, standalone = self._unfollow(run_id)
        if run is not None:
            # A token seen says it streamed; none seen, it may have failed before the first.
            run.model_error(run_id, error, stream=True if streamed else None)
        if standalone is not None:
            standalone.end(error=error)

    # -- tools ---------------------------------------------------------------------------
    def tool_start(
        self,
        serialized: Mapping[str, Any] | None,
        input_str: str,
        run_id: uuid.UUID,
        parent: uuid.UUID | None,
        name: str | None,
        inputs: Mapping[str, Any] | None,
        call_id: str | None,
    ) -> None:
        tool = name or (serialized or {}).get("name") or "tool"
        run = self._owner_of(parent)
        if run is None or parent in self._tools:
            run = self.tracker.start_run(agent=self.agent or tool)
            self._open(run_id, run)
        run.raise_if_stopped()
        self._follow(run_id, run, tool=True)
        arguments = dict(inputs) if isinstance(inputs, Mapping) else {"input": input_str}
        run.tool_start(run_id, tool=str(tool), call_id=call_id, arguments=arguments)

    def tool_end(self, output: Any, run_id: uuid.UUID, error: BaseException | None) -> None:
        with self._lock:
            run, standalone = self._unfollow(run_id)
        if run is None:
            return
        if error is not None:
            run.tool_end(run_id, error=error)
        elif isinstance(output, ToolMessage):
            text = _text(output.content)
            if output.status == "error":
                run.tool_end(
                    run_id,
                    result=text,
                    error=ToolExecutionError(
                        text, tool=output.name or "", error_type="ToolException"
                    ),
                )
            else:
                run.tool_end(run_id, result=text)
        else:
            run.tool_end(run_id, result=output if isinstance(output, str) else str(output))
        if standalone is not None:
            standalone.end(error=error)
        elif error is None:
            run.raise_if_stopped()


def _tracker(
    observers: Iterable[LoopObserver],
    detectors: Iterable[LoopObserver] | None,
    tracker: RunTracker | None,
    prices: PricesArg,
) -> RunTracker:
    if tracker is not None:
        return tracker
    return RunTracker(observers, detectors=detectors, prices=prices)


class _Feeding:
    """What both handlers share: the tracker they feed, and how LangChain must call them.

    ``raise_error`` lets a stop reach the run; ``run_inline`` keeps the events in order.
    """

    raise_error = True
    run_inline = True

    def __init__(
        self,
        observers: Iterable[LoopObserver] = (),
        *,
        detectors: Iterable[LoopObserver] | None = None,
        agent: str | None = None,
        prices: PricesArg = None,
        tracker: RunTracker | None = None,
    ) -> None:
        super().__init__()
        self.tracker = _tracker(observers, detectors, tracker, prices)
        self._bridge = _Bridge(self.tracker, agent)

    @property
    def observers(self) -> ObserverSet:
        """The observers fed by this handler; attach and detach at any time."""
        return self.tracker.observers

    @property
    def followed_runs(self) -> int:
        """LangChain runs (chains, model and tool calls) whose end is not reported yet."""
        return self._bridge.followed

    @property
    def evicted_runs(self) -> int:
        """LangChain runs forgotten because their end never came (at most 65,536 are followed:
        past that the oldest goes, and a loopobs run it ended is ended ``cancelled``)."""
        return self._bridge.evicted


class LoopobsCallbackHandler(_Feeding, BaseCallbackHandler):
    """Reports LangChain runnables and LangGraph graphs to loopobs observers.

    Args:
        observers: observers to attach (tracing, metrics, Prometheus, JSONL, …).
        detectors: observers whose ``stop`` verdicts stop the run; ``None`` means
            the default repetition and convergence detectors, ``[]`` none.
        agent: the agent name runs report; default: the outermost chain's name.
        prices: how model calls are priced (``cost_usd``), as ``AgentLoop(prices=...)``.
        tracker: share one :class:`~loopobs.adapters.RunTracker` between handlers
            (then ``observers``, ``detectors`` and ``prices`` are ignored).

    Works in synchronous and asynchronous runs (it is called inline in both), from
    any thread. Raises only :class:`~loopobs.adapters.RunStopped`, and only to stop
    a run; its own failures and the observers' are logged and never reach LangChain.
    """

    @shielded
    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain starts a run; nested ones join their parent's."""
        self._bridge.chain_start(
            serialized, inputs, run_id, parent_run_id, metadata, kwargs.get("name")
        )

    @shielded
    def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain's end ends its run."""
        self._bridge.chain_end(run_id, None)

    @shielded
    def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain's error ends its run (status from the error)."""
        self._bridge.chain_end(run_id, error)

    @shielded
    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.model_start(serialized, messages, run_id, parent_run_id, metadata, kwargs)

    @shielded
    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A completion-model call begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.model_start(serialized, prompts, run_id, parent_run_id, metadata, kwargs)

    @shielded
    def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A streamed chunk: a text (or reasoning) delta."""
        self._bridge.token(run_id, token, chunk)

    @shielded
    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call succeeded (may raise ``RunStopped`` on converged answers)."""
        self._bridge.model_end(response, run_id)

    @shielded
    def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call failed or was cancelled."""
        self._bridge.model_error(error, run_id)

    @shielded
    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool call attempt begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.tool_start(
            serialized,
            input_str,
            run_id,
            parent_run_id,
            kwargs.get("name"),
            inputs,
            kwargs.get("tool_call_id"),
        )

    @shielded
    def on_tool_end(
        self,
        output: Any,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool call attempt ended (may raise ``RunStopped`` when it completes a loop)."""
        self._bridge.tool_end(output, run_id, None)

    @shielded
    def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool call attempt raised or was cancelled."""
        self._bridge.tool_end(None, run_id, error)


class AsyncLoopobsCallbackHandler(_Feeding, AsyncCallbackHandler):
    """:class:`LoopobsCallbackHandler` as an ``AsyncCallbackHandler``, for async runs.

    Same arguments and behaviour; awaited inline on the task that runs the model
    or tool. In a synchronous run LangChain calls async handlers on another thread
    and drops what they raise: there, use :class:`LoopobsCallbackHandler`.
    """

    @shielded
    async def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain starts a run; nested ones join their parent's."""
        self._bridge.chain_start(
            serialized, inputs, run_id, parent_run_id, metadata, kwargs.get("name")
        )

    @shielded
    async def on_chain_end(
        self,
        outputs: dict[str, Any],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain's end ends its run."""
        self._bridge.chain_end(run_id, None)

    @shielded
    async def on_chain_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The outermost chain's error ends its run (status from the error)."""
        self._bridge.chain_end(run_id, error)

    @shielded
    async def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A model call begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.model_start(serialized, messages, run_id, parent_run_id, metadata, kwargs)

    @shielded
    async def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A completion-model call begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.model_start(serialized, prompts, run_id, parent_run_id, metadata, kwargs)

    @shielded
    async def on_llm_new_token(
        self,
        token: str | list[str | dict[str, Any]],
        *,
        chunk: Any = None,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """A streamed chunk: a text (or reasoning) delta."""
        self._bridge.token(run_id, token, chunk)

    @shielded
    async def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call succeeded (may raise ``RunStopped`` on converged answers)."""
        self._bridge.model_end(response, run_id)

    @shielded
    async def on_llm_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The model call failed or was cancelled."""
        self._bridge.model_error(error, run_id)

    @shielded
    async def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool call attempt begins (may raise ``RunStopped`` for a stopped run)."""
        self._bridge.tool_start(
            serialized,
            input_str,
            run_id,
            parent_run_id,
            kwargs.get("name"),
            inputs,
            kwargs.get("tool_call_id"),
        )

    @shielded
    async def on_tool_end(
        self,
        output: Any,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool call attempt ended (may raise ``RunStopped`` when it completes a loop)."""
        self._bridge.tool_end(output, run_id, None)

    @shielded
    async def on_tool_error(
        self,
        error: BaseException,
        *,
        run_id: uuid.UUID,
        parent_run_id: uuid.UUID | None = None,
        tags: list[str] | None = None,
        **kwargs: Any,
    ) -> None:
        """The tool call attempt raised or was cancelled."""
        self._bridge.tool_end(None, run_id, error)
