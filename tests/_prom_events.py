"""A realistic run emitted by hand, in the contract's order, with its exact figures.

Used by the Prometheus tests (and the multi-process workers) to drive an
observer without the agent loop. One run has two turns:

- turn 0: ``m1`` fails (rate limited) → fallback and switch to ``m2`` → ``m2``
  answers with two tool calls: ``search`` succeeds, ``fetch`` fails; the
  repetition detector warns about ``search``.
- a compaction, then turn 1: ``m2`` answers with no tool call; the
  convergence detector warns, and the run's budget warns (80 % of its USD).

Both calls are priced (:data:`COSTS`); with ``unpriced_first_call`` the first
call's cost is unknown, and so is the run's.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopobs import (
    BudgetExceededContext,
    BudgetUnpricedContext,
    CompactionContext,
    ConvergenceDetectedContext,
    EventContext,
    FallbackContext,
    LoopDetectedContext,
    LoopObserver,
    ModelSwitchedContext,
    RateLimited,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    SharedBudgetContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    TextDeltaContext,
    ToolCallReceivedContext,
    ToolExecutionError,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
    Usage,
)

AGENT = "researcher"
PROVIDER = "scripted"


# Per run: the successful calls' tokens (m2 twice) and their sums.
@dataclass(frozen=True)
class Call:
    """One successful model call of the script."""

    input: int
    output: int
    cache_read: int
    reasoning: int
    duration_ms: float
    ttft_ms: float | None


CALLS = (
    Call(input=100, output=20, cache_read=30, reasoning=5, duration_ms=400.0, ttft_ms=120.0),
    Call(input=200, output=40, cache_read=0, reasoning=0, duration_ms=800.0, ttft_ms=None),
)
FAILED_CALL_MS = 50.0
INPUT_TOKENS = 300
OUTPUT_TOKENS = 60
CACHE_READ_TOKENS = 30
REASONING_TOKENS = 5
TOKENS_PER_RUN = INPUT_TOKENS + OUTPUT_TOKENS + CACHE_READ_TOKENS + REASONING_TOKENS  # 395
TOOL_MS = {"search": 50.0, "fetch": 20.0}
RUN_MS = 1500.0
TOKENS_SAVED = 600
COSTS = (0.0021, 0.0009)
"""USD of the two successful calls."""
RUN_COST = sum(COSTS)


def emit_run(
    observer: LoopObserver,
    *,
    run_id: uuid.UUID | None = None,
    agent: str = AGENT,
    before_end: Callable[[], None] | None = None,
    unpriced_first_call: bool = False,
) -> uuid.UUID:
    """Emit one complete run into ``observer``; ``before_end`` runs just before ``on_run_end``."""
    rid = run_id or uuid.uuid4()
    t = [0]

    def ev(cls: type[EventContext], **fields: Any) -> None:
        t[0] += 1_000_000
        ctx = cls(run_id=rid, time_ns=t[0], **fields)
        getattr(observer, ctx.hook)(ctx)

    ev(RunStartContext, session_id=rid, agent=agent, model="m1")
    # turn 0
    ev(TurnStartContext, turn=0, query="q")
    ev(StreamStartContext, turn=0, model="m1", provider=PROVIDER, attempt=0)
    ev(
        StreamFailureContext,
        turn=0,
        model="m1",
        provider=PROVIDER,
        attempt=0,
        error=RateLimited("slow down", provider=PROVIDER),
        duration_ms=FAILED_CALL_MS,
    )
    ev(FallbackContext, from_model="m1", to_model="m2", turn=0)
    ev(ModelSwitchedContext, from_model="m1", to_model="m2")
    ev(StreamStartContext, turn=0, model="m2", provider=PROVIDER, attempt=1)
    ev(TextDeltaContext, turn=0, delta="a")
    ev(TextDeltaContext, turn=0, delta="b")  # 1 ms after the first: one chunk interval
    first = CALLS[0]
    ev(
        StreamSuccessContext,
        turn=0,
        model="m2",
        provider=PROVIDER,
        attempt=1,
        input_tokens=first.input,
        output_tokens=first.output,
        cache_read_input_tokens=first.cache_read,
        reasoning_output_tokens=first.reasoning,
        duration_ms=first.duration_ms,
        time_to_first_token_ms=first.ttft_ms,
        cost_usd=None if unpriced_first_call else COSTS[0],
    )
    ev(
        ResponseContext,
        turn=0,
        text="",
        tool_calls=2,
        usage=Usage(input_tokens=first.input, output_tokens=first.output),
    )
    ev(ToolCallReceivedContext, turn=0, tool="search", tool_call_id="c1", input={"q": "x"})
    ev(ToolCallReceivedContext, turn=0, tool="fetch", tool_call_id="c2", input={"url": "u"})
    ev(ToolPreContext, turn=0, tool="search", tool_call_id="c1")
    ev(LoopDetectedContext, pattern="search(x)", repetitions=3, tool="search", action="warn")
    ev(
        ToolPostContext,
        turn=0,
        tool="search",
        tool_call_id="c1",
        duration_ms=TOOL_MS["search"],
        result_hash=1,
    )
    ev(ToolPreContext, turn=0, tool="fetch", tool_call_id="c2")
    ev(
        ToolPostContext,
        turn=0,
        tool="fetch",
        tool_call_id="c2",
        duration_ms=TOOL_MS["fetch"],
        is_error=True,
        outcome="error",
        error=ToolExecutionError("boom", tool="fetch", error_type="OSError"),
    )
    ev(
        TurnEndContext,
        turn=0,
        success=True,
        duration_ms=600.0,
        input_tokens=first.input,
        output_tokens=first.output,
    )
    # compaction, turn 1
    ev(
        CompactionContext,
        tokens_before=1000,
        tokens_after=400,
        tokens_saved=TOKENS_SAVED,
        messages_removed=3,
    )
    ev(TurnStartContext, turn=1, query="q")
    ev(StreamStartContext, turn=1, model="m2", provider=PROVIDER, attempt=0)
    second = CALLS[1]
    ev(
        StreamSuccessContext,
        turn=1,
        model="m2",
        provider=PROVIDER,
        input_tokens=second.input,
        output_tokens=second.output,
        duration_ms=second.duration_ms,
        cost_usd=COSTS[1],
    )
    ev(ResponseContext, turn=1, text="done", tool_calls=0)
    ev(ConvergenceDetectedContext, action="warn", similarity=0.97, consecutive=2)
    ev(
        BudgetExceededContext,
        limit="usd",
        value=RUN_COST,
        budget=RUN_COST / 0.8,
        scope="run",
        action="warn",
    )
    ev(
        TurnEndContext,
        turn=1,
        success=True,
        duration_ms=800.0,
        input_tokens=second.input,
        output_tokens=second.output,
    )
    if before_end is not None:
        before_end()
    ev(
        RunEndContext,
        success=True,
        total_turns=2,
        duration_ms=RUN_MS,
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        cost_usd=None if unpriced_first_call else RUN_COST,
    )
    return rid


def emit_extras(observer: LoopObserver) -> uuid.UUID:
    """A run with a context provider and an MCP tool call, then a session's queue and reset."""
    from loopobs import (
        BackpressureContext,
        ContextProviderContext,
        McpCallInfo,
        ProviderFailed,
        SessionResetContext,
    )

    rid = uuid.uuid4()
    t = [0]

    def ev(cls: type[EventContext], **fields: Any) -> None:
        t[0] += 1_000_000
        ctx = cls(run_id=fields.pop("run_id", rid), time_ns=t[0], **fields)
        getattr(observer, ctx.hook)(ctx)

    ev(RunStartContext, session_id=rid, agent=AGENT, model="m1")
    ev(TurnStartContext, turn=0, query="q")
    ev(
        ContextProviderContext,
        turn=0,
        provider="memory",
        outcome="ok",
        duration_ms=3.0,
        chars=5,
        text="hello",
    )
    ev(
        ContextProviderContext,
        turn=0,
        provider="slow",
        outcome="timeout",
        duration_ms=50.0,
        error=ProviderFailed("late", context_provider="slow", error_type="timeout"),
    )
    ev(StreamStartContext, turn=0, model="m1", provider=PROVIDER, attempt=0)
    ev(
        StreamSuccessContext,
        turn=0,
        model="m1",
        provider=PROVIDER,
        input_tokens=10,
        output_tokens=2,
        duration_ms=100.0,
    )
    # The fleet layer: a shared budget's reservation and commit, and an unpriced USD limit.
    ev(SharedBudgetContext, operation="reserve", store="memory", duration_ms=0.8, reserved_usd=0.5)
    ev(
        SharedBudgetContext,
        operation="commit",
        store="memory",
        duration_ms=0.6,
        reserved_usd=0.5,
        committed_usd=0.125,
        expired=1,
    )
    ev(BudgetUnpricedContext, model="m1", provider=PROVIDER, scope="shared", budget=25.0)
    ev(ResponseContext, turn=0, text="", tool_calls=1)
    ev(ToolCallReceivedContext, turn=0, tool="echo", tool_call_id="m1", input={"text": "x"})
    ev(ToolPreContext, turn=0, tool="echo", tool_call_id="m1")
    ev(
        ToolPostContext,
        turn=0,
        tool="echo",
        tool_call_id="m1",
        duration_ms=4.0,
        result_hash=2,
        mcp=McpCallInfo(
            server="files", protocol_version="2025-11-25", request_id="3", duration_ms=3.5
        ),
    )
    ev(TurnEndContext, turn=0, success=True, duration_ms=120.0, input_tokens=10, output_tokens=2)
    ev(
        RunEndContext,
        success=True,
        total_turns=1,
        duration_ms=130.0,
        input_tokens=10,
        output_tokens=2,
    )
    session = uuid.uuid4()
    ev(
        BackpressureContext,
        run_id=session,
        queue="inbox",
        outcome="saturated",
        capacity=2,
        policy="reject",
    )
    ev(
        BackpressureContext,
        run_id=session,
        queue="inbox",
        outcome="rejected",
        capacity=2,
        policy="reject",
    )
    ev(SessionResetContext, run_id=session, epoch=1, discarded=2)
    return rid


# -- the same kind of run through the real AgentLoop --------------------------------------------

LOOP_INPUT = (100, 200)
"""Input tokens of the two calls of a loop run (the tool call, then the answer)."""
LOOP_OUTPUT = (20, 40)
LOOP_TOKENS_PER_RUN = sum(LOOP_INPUT) + sum(LOOP_OUTPUT)  # 360


def loop_step(request: Any) -> Any:
    """Script for concurrent runs: ask for ``search`` first, answer once its result is in."""
    from loopobs.llm import Reply, ToolCall

    if request.messages and request.messages[-1].role == "tool":
        return Reply(
            text="done", usage=Usage(input_tokens=LOOP_INPUT[1], output_tokens=LOOP_OUTPUT[1])
        )
    return Reply(
        tool_calls=(ToolCall("search", {"q": "x"}),),
        usage=Usage(input_tokens=LOOP_INPUT[0], output_tokens=LOOP_OUTPUT[0]),
    )


def make_loop(*observers: LoopObserver, agent: str = AGENT, **options: Any) -> Any:
    """An ``AgentLoop`` on a ``ScriptedClient`` playing :func:`loop_step`, tool ``search``.

    ``options`` go to ``AgentLoop`` as they are.
    """
    from loopobs import AgentLoop, tool
    from loopobs.llm import ScriptedClient

    @tool
    def search(q: str) -> str:
        """Search for ``q``."""
        return f"results for {q}"

    return AgentLoop(
        ScriptedClient(loop_step),
        model="m1",
        tools=[search],
        observers=observers,
        agent_name=agent,
        **options,
    )
