"""``AgentLoop``: an LLM-agnostic ReAct loop that reports every lifecycle event.

A run calls the model; if the model asks for tools, the loop runs them (in
parallel when allowed), feeds the results back and calls the model again,
until an answer without tool calls, ``max_turns``, a failure, a detector's
stop, or a tool that parks the run. Every step is reported to the loop's
observers in the order and with the guarantees of the event contract
(``docs/events.md``): one ``on_run_end`` per ``on_run_start``, one
``on_turn_end`` per ``on_turn_start``, one stream success or failure per
``on_stream_start``, one ``on_tool_post`` per ``on_tool_pre`` — also on
errors and cancellation.

Emission rules observers may rely on:

- each tool call attempt runs in its own asyncio task, which emits its
  ``on_tool_pre`` and ``on_tool_post``;
- ``on_stream_start`` and its success or failure are emitted by the task that
  iterates the model's stream;
- a context is built only when some observer listens to its hook.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import inspect
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loopobs.contract.compaction import Compactor, TruncatingCompactor
from loopobs.contract.errors import CheckpointAlreadyResumed, SessionBusy
from loopobs.contract.model import LlmClient, Message, SystemMessage, UserMessage
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.contract.tools import Tool
from loopobs.contract.tools import tool as make_tool
from loopobs.contract.trace_links import LINKS, TraceLinks
from loopobs.cost.budget import Budget
from loopobs.cost.pricing import PriceLookup, PricesArg, price_lookup
from loopobs.cost.shared import SharedBudget
from loopobs.loop import parking
from loopobs.loop.context_providers import ContextProvider, ProviderSpec, provider_spec
from loopobs.loop.driver import RunDriver
from loopobs.loop.policy import RunPolicy
from loopobs.loop.run import Conversation, RunResult
from loopobs.loop.runtime import LoopSettings, RunDeps
from loopobs.loop.tool_sources import ConnectedSource, LiveTools, ToolSource, merge
from loopobs.loop.workers import DEFAULT_TOOL_WORKERS, ToolWorkers

if TYPE_CHECKING:
    from loopobs.loop.checkpoint import Checkpoint

__all__ = ["AgentLoop", "ClaimHook"]

ClaimHook = Callable[["Checkpoint"], "bool | Awaitable[bool]"]
"""Asked before a checkpoint resumes: True if this resume may use it (it is now claimed)."""


def _default_detectors() -> list[LoopObserver]:
    from loopobs.detectors import ConvergenceDetector, RepetitionDetector

    return [RepetitionDetector(), ConvergenceDetector()]


class AgentLoop:
    """An LLM-agnostic ReAct agent loop with observers.

    Args:
        client: the model backend (any :class:`~loopobs.contract.model.LlmClient`).
        model: the model to call.
        tools: functions decorated with :func:`~loopobs.contract.tools.tool` (plain
            functions are wrapped).
        system_prompt: added at the start of every new session.
        observers: observers to attach (see :attr:`observers`).
        fallback_models: tried in order when a call fails with a retryable error.
        max_turns: turns per run before it ends with status ``max_turns``.
        tool_timeout: seconds a tool may run (a tool's own ``timeout`` wins); None: no limit.
        parallel_tool_calls: run the tool calls of one response concurrently.
        context_window: the model's window in tokens; None disables threshold compaction.
        compaction_threshold: compact when the estimate reaches this share of the window.
        compactor: how to compact (default
            :class:`~loopobs.contract.compaction.TruncatingCompactor`).
        detectors: observers whose verdicts the loop applies; None means the default
            repetition and convergence detectors, ``[]`` none.
        agent_name: reported as ``gen_ai.agent.name``.
        request_options: sent with every model request as ``ModelRequest.options``
            (``max_tokens``, ``temperature``, ``top_p``, ``stop``, ``seed``, …; the
            client passes them to the provider); reported on the ``chat`` spans.
        budget: limits for each run (USD, tokens, calls, wall time); a session's own
            budget is ``Conversation(budget=...)``. See :class:`~loopobs.cost.budget.Budget`.
        shared_budget: limits shared by every process that uses the same ledger
            (``loopobs.redis.RedisLedger``): each model call reserves its worst case
            before it is made, in the session's scope and each ``Conversation(scope=...)``
            entry. See :class:`~loopobs.cost.shared.SharedBudget` and the fleet guide.
        prices: how model calls are priced: None for ``genai-prices``, a mapping of
            model name to :class:`~loopobs.cost.pricing.ModelRates` (or USD per call),
            a function ``(model, provider, usage) -> USD | None``, or a
            :class:`~loopobs.cost.pricing.PriceLookup`.
        sync_tool_workers: threads for sync tools (the loop's own); when all are
            still busy (tools hanging past their timeout), a sync tool call fails
            with ``ToolWorkersExhausted`` instead of waiting.
        claim_checkpoint: asked before a checkpoint resumes (sync or async); return
            False when the checkpoint was already claimed. Processes sharing a
            checkpoint store implement it as an atomic "claim this run id" (a unique
            row, a compare-and-set); this process alone already resumes a
            checkpoint at most once without it.
        tool_sources: sources of more tools (:class:`~loopobs.loop.tool_sources.ToolSource`),
            such as MCP servers (``loopobs.mcp.McpStdio``, ``loopobs.mcp.McpHttp``,
            ``loopobs.mcp.McpSse``; the ``mcp`` extra). They connect when a run starts
            and close when it ends, unless the loop is open (``async with loop:`` or
            :meth:`open`): then they connect once and stay open for every run until
            :meth:`aclose`.
        mcp_servers: deprecated: the same as ``tool_sources`` (it warns; use that).
        context_providers: async ``provider(query) -> str | None`` functions (or
            :class:`~loopobs.loop.context_providers.ProviderSpec`); their text is
            added as system messages to each model call.
        context_provider_timeout: seconds each provider may take (a spec's own wins).
    """

    def __init__(
        self,
        client: LlmClient,
        *,
        model: str,
        tools: Iterable[Tool | Any] = (),
        system_prompt: str | None = None,
        observers: Iterable[LoopObserver] = (),
        fallback_models: Sequence[str] = (),
        max_turns: int = 50,
        tool_timeout: float | None = 30.0,
        parallel_tool_calls: bool = True,
        context_window: int | None = None,
        compaction_threshold: float = 0.8,
        compactor: Compactor | None = None,
        detectors: Iterable[LoopObserver] | None = None,
        agent_name: str = "agent",
        budget: Budget | None = None,
        shared_budget: SharedBudget | None = None,
        prices: PricesArg = None,
        sync_tool_workers: int = DEFAULT_TOOL_WORKERS,
        claim_checkpoint: ClaimHook | None = None,
        request_options: Mapping[str, Any] | None = None,
        mcp_servers: Iterable[ToolSource] = (),
        tool_sources: Iterable[ToolSource] = (),
        context_providers: Iterable[ContextProvider | ProviderSpec] = (),
        context_provider_timeout: float | None = 5.0,
    ) -> None:
        if not model:
            raise ValueError("model must be a non-empty model name")
        if max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if not 0 < compaction_threshold <= 1:
            raise ValueError("compaction_threshold must be in (0, 1]")
        self.client = client
        self.model = model
        self.tools: dict[str, Tool] = {}
        for given in tools:
            t = given if isinstance(given, Tool) else make_tool(given)
            if t.name in self.tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.system_prompt = system_prompt
        self.fallback_models = tuple(fallback_models)
        self.max_turns = max_turns
        self.tool_timeout = tool_timeout
        self.parallel_tool_calls = parallel_tool_calls
        self.context_window = context_window
        self.compaction_threshold = compaction_threshold
        self.compactor: Compactor = compactor or TruncatingCompactor()
        self.agent_name = agent_name
        self.budget = budget
        self.shared_budget = shared_budget
        self.prices: PriceLookup = price_lookup(prices)
        self._observers = ObserverSet(observers)
        # Detectors sit after the user's observers, so every user observer has seen an
        # event before a detector reacts to it, and their verdicts reach everyone.
        self._emit = ObserverSet([self._observers], count_failures_in=self._observers)
        self.detectors = tuple(_default_detectors() if detectors is None else detectors)
        for detector in self.detectors:
            self._emit.add(detector)
        self._policy = RunPolicy()
        self._emit.add(self._policy)
        self._links: TraceLinks = LINKS
        self.workers = ToolWorkers(sync_tool_workers)
        self.claim_checkpoint = claim_checkpoint
        self.request_options: dict[str, Any] = dict(request_options or {})
        self._claims: parking.ResumeClaims = parking.CLAIMS
        if mcp_servers:
            warnings.warn(
                "AgentLoop(mcp_servers=...) is tool_sources=...: MCP servers are tool "
                "sources like any other (mcp_servers goes away in loopobs 0.3)",
                DeprecationWarning,
                stacklevel=2,
            )
        self.tool_sources: tuple[ToolSource, ...] = (*mcp_servers, *tool_sources)
        self.context_providers: tuple[ProviderSpec, ...] = tuple(
            provider_spec(p) for p in context_providers
        )
        self.context_provider_timeout = context_provider_timeout
        self._open_sources: list[ConnectedSource] | None = None
        self._open_lock = asyncio.Lock()

    # -- tool sources ----------------------------------------------------------------------
    async def open(self) -> None:
        """Connect the tool sources (MCP servers) now and keep them open for every run.

        Without it, each run connects its own and closes them when it ends.

        Raises:
            ToolNameClash: two tools have the same name (nothing stays open).
        """
        async with self._open_lock:
            if self._open_sources is not None:
                return
            connected = await _connect_all(self.tool_sources, self._emit)
            try:
                merge(self.tools, connected, strict=True)
            except BaseException:
                await _close_all(connected)
                raise
            self._open_sources = connected

    @property
    def open_sources(self) -> tuple[ConnectedSource, ...]:
        """The sources :meth:`open` connected (empty when the loop is not open)."""
        return tuple(self._open_sources or ())

    async def aclose(self) -> None:
        """Close the sources :meth:`open` connected (stops their server processes)."""
        async with self._open_lock:
            connected, self._open_sources = self._open_sources, None
        if connected:
            await _close_all(connected)

    async def __aenter__(self) -> AgentLoop:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- observers -------------------------------------------------------------------------
    @property
    def observers(self) -> ObserverSet:
        """The loop's observers; attach and detach at any time, also while runs are going."""
        return self._observers

    def attach(self, observer: LoopObserver) -> None:
        """Add an observer; it receives events from the next one emitted."""
        self._observers.add(observer)

    def detach(self, observer: LoopObserver) -> None:
        """Remove an observer."""
        self._observers.remove(observer)

    def switch_model(self, model: str) -> None:
        """Use ``model`` from the next model call on (``on_model_switched`` fires then)."""
        if not model:
            raise ValueError("model must be a non-empty model name")
        self.model = model

    # -- running ---------------------------------------------------------------------------
    def _run_deps(self, sources: Sequence[ConnectedSource] = ()) -> RunDeps:
        """What one run works with: a snapshot of the settings, the live model and tools."""
        tools: Mapping[str, Tool] = LiveTools(self.tools, sources) if sources else dict(self.tools)
        return RunDeps(
            client=self.client,
            tools=tools,
            observers=self._emit,
            policy=self._policy,
            providers=self.context_providers,
            compactor=self.compactor,
            links=self._links,
            workers=self.workers,
            model=lambda: self.model,
            prices=self.prices,
            shared_budget=self.shared_budget,
            settings=LoopSettings(
                max_turns=self.max_turns,
                tool_timeout=self.tool_timeout,
                parallel_tool_calls=self.parallel_tool_calls,
                context_window=self.context_window,
                compaction_threshold=self.compaction_threshold,
                fallback_models=self.fallback_models,
                agent_name=self.agent_name,
                system_prompt=self.system_prompt,
                budget=self.budget,
                request_options=dict(self.request_options),
                context_provider_timeout=self.context_provider_timeout,
            ),
        )

    async def run(
        self,
        input: str | Sequence[Message],
        *,
        session: Conversation | None = None,
    ) -> RunResult:
        """Run the agent on ``input`` (a question, or messages to append) and return the result.

        Errors of the run (model failures, limits, detectors) end up in the
        result's ``status`` and ``error``; cancelling the calling task ends the
        run with status ``cancelled`` and re-raises ``CancelledError``.

        Raises:
            SessionBusy: ``session`` has a run in progress.
        """
        session = session if session is not None else Conversation()
        if session.busy:
            raise SessionBusy(session_id=str(session.id))
        session.busy = True
        try:
            if not session.messages and self.system_prompt:
                session.messages.append(SystemMessage(content=self.system_prompt))
            if isinstance(input, str):
                session.messages.append(UserMessage(content=input))
            else:
                session.messages.extend(input)
            async with self._sources_for_run() as sources:
                return await RunDriver(self._run_deps(sources), session).execute(None, None)
        finally:
            session.busy = False

    @contextlib.asynccontextmanager
    async def _sources_for_run(self) -> AsyncIterator[Sequence[ConnectedSource]]:
        """The open sources, or (when the loop is not open) ones connected for this run."""
        if self._open_sources is not None or not self.tool_sources:
            yield self._open_sources or ()
            return
        connected = await _connect_all(self.tool_sources, self._emit)
        try:
            yield connected
        finally:
            # Also on cancellation: the servers' processes must not outlive the run.
            await asyncio.shield(_close_all(connected))

    def run_sync(
        self, input: str | Sequence[Message], *, session: Conversation | None = None
    ) -> RunResult:
        """:meth:`run` for code without an event loop.

        Raises:
            RuntimeError: called from inside a running event loop (await :meth:`run`).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(input, session=session))
        raise RuntimeError("run_sync() cannot be called from a running event loop; await run()")

    async def resume(
        self,
        checkpoint: Checkpoint,
        input: Any = None,
        *,
        session: Conversation | None = None,
        now: _dt.datetime | None = None,
    ) -> RunResult:
        """Continue a parked run as a new run on the same session.

        A suspended run needs ``input`` valid against the recorded JSON Schema;
        it becomes the parked call's result. A sleeping run needs the current
        time (``now``, an aware datetime, default the wall clock) at or after
        ``wake_at``; its parked call runs again.

        A checkpoint resumes at most once: this process remembers the checkpoints
        it resumed, and the loop's ``claim_checkpoint`` hook (when set) asks a
        shared store before the run, so that across processes too only one
        resume proceeds. A refusal before the run (invalid input, too early, a
        busy session, a failing hook) does not use the checkpoint up.

        Raises:
            InvalidResumeInput: the checkpoint is inconsistent (edited where it was
                stored), the input fails the schema, or ``now`` is naive (nothing changes).
            NotYetAwake: the run sleeps until later (nothing changes).
            SessionBusy: ``session`` has a run in progress.
            CheckpointAlreadyResumed: the checkpoint was resumed before, in this
                process or (says the claim hook) elsewhere.
            ValueError: ``session`` is not the parked run's session.
        """
        parking.check_resume(checkpoint, input, now)
        session = parking.resumed_session(checkpoint, session)
        if session.busy:
            raise SessionBusy(session_id=str(session.id))
        claims = self._claims
        if not claims.claim(checkpoint.run_id):
            raise CheckpointAlreadyResumed(run_id=str(checkpoint.run_id))
        session.busy = True
        try:
            try:
                granted = await self._ask_claim_hook(checkpoint)
            except BaseException:
                claims.release(checkpoint.run_id)  # the store could not answer: not used up
                raise
            if not granted:
                raise CheckpointAlreadyResumed(
                    f"the checkpoint of run {checkpoint.run_id} was claimed elsewhere",
                    run_id=str(checkpoint.run_id),
                )
            async with self._sources_for_run() as sources:
                return await RunDriver(self._run_deps(sources), session).execute(checkpoint, input)
        finally:
            session.busy = False

    async def _ask_claim_hook(self, checkpoint: Checkpoint) -> bool:
        hook = self.claim_checkpoint
        if hook is None:
            return True
        answer = hook(checkpoint)
        if inspect.isawaitable(answer):
            answer = await answer
        return bool(answer)


_log = logging.getLogger("loopobs.loop")


async def _connect_all(
    sources: Sequence[ToolSource], observers: ObserverSet
) -> list[ConnectedSource]:
    """Connect every source, concurrently; if one fails, close the others and raise."""
    if not sources:
        return []
    results = await asyncio.gather(*(s.connect(observers) for s in sources), return_exceptions=True)
    connected = [r for r in results if not isinstance(r, BaseException)]
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        await _close_all(connected)
        raise failed[0]
    return connected


async def _close_all(connected: Sequence[ConnectedSource]) -> None:
    """Close every source (concurrently); a failure to close is logged, never raised."""
    results = await asyncio.gather(*(c.aclose() for c in connected), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            _log.warning("closing a tool source failed: %r", result)
