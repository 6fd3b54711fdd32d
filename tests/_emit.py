"""Hand-emitted runs in the contract's order, for exporter tests (no AgentLoop needed).

``Script`` emits one run's events into an observer with a deterministic clock
(1 ms per event), the way ``AgentLoop`` does: tool attempts in their own tasks
(``on_tool_pre`` / ``on_tool_post`` emitted inside them), everything else on the
run's task. Scenario coroutines (``full_run``, ``failed_run``, ``parked_run``)
return the script so tests can read ids and totals.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from loopobs.contract.errors import FallbackExhausted, LoopError, RateLimited, ToolExecutionError
from loopobs.contract.events import (
    CompactionContext,
    ConvergenceDetectedContext,
    FallbackContext,
    LoopDetectedContext,
    ModelSwitchedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    SleepContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    SuspendedContext,
    TextDeltaContext,
    ThinkingDeltaContext,
    ToolCallReceivedContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.contract.observer import LoopObserver

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


class Script:
    """Emits one run's events into ``observer`` with a 1 ms-per-event clock."""

    def __init__(
        self,
        observer: LoopObserver,
        *,
        agent: str = "agent",
        t0: int = T0,
        run_id: UUID | None = None,
        session_id: UUID | None = None,
    ) -> None:
        self.obs = observer
        self.run_id = run_id or uuid.uuid4()
        self.session_id = session_id or uuid.uuid4()
        self.agent = agent
        self.now = t0
        self.times: list[int] = []

    def tick(self) -> int:
        self.now += MS
        self.times.append(self.now)
        return self.now

    def common(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "time_ns": self.tick()}

    # one call per hook --------------------------------------------------------------------
    def run_start(
        self, model: str = "m1", resumed_from: UUID | None = None, instructions: str = ""
    ) -> None:
        self.obs.on_run_start(
            RunStartContext(
                **self.common(),
                session_id=self.session_id,
                agent=self.agent,
                model=model,
                resumed_from=resumed_from,
                instructions=instructions,
            )
        )

    def run_end(
        self,
        *,
        success: bool = True,
        status: RunStatus = RunStatus.COMPLETED,
        error: LoopError | None = None,
        turns: int = 0,
        inp: int = 0,
        out: int = 0,
    ) -> None:
        self.obs.on_run_end(
            RunEndContext(
                **self.common(),
                success=success,
                status=status,
                error=error,
                total_turns=turns,
                duration_ms=2500.0,
                input_tokens=inp,
                output_tokens=out,
            )
        )

    def turn_start(self, turn: int, query: str = "what is 2+2?") -> None:
        self.obs.on_turn_start(TurnStartContext(**self.common(), turn=turn, query=query))

    def turn_end(
        self,
        turn: int,
        *,
        success: bool = True,
        error: LoopError | None = None,
        inp: int = 0,
        out: int = 0,
    ) -> None:
        self.obs.on_turn_end(
            TurnEndContext(
                **self.common(),
                turn=turn,
                success=success,
                error=error,
                duration_ms=40.0,
                input_tokens=inp,
                output_tokens=out,
            )
        )

    def stream_start(self, turn: int, model: str, attempt: int = 0) -> None:
        self.obs.on_stream_start(
            StreamStartContext(
                **self.common(),
                turn=turn,
                model=model,
                provider="scripted",
                attempt=attempt,
                stream=True,  # as AgentLoop's calls, which all stream
            )
        )

    def text(self, turn: int, delta: str) -> None:
        self.obs.on_text_delta(TextDeltaContext(**self.common(), turn=turn, delta=delta))

    def thinking(self, turn: int, delta: str) -> None:
        self.obs.on_thinking_delta(ThinkingDeltaContext(**self.common(), turn=turn, delta=delta))

    def stream_success(
        self,
        turn: int,
        model: str,
        attempt: int = 0,
        *,
        inp: int = 100,
        out: int = 20,
        cache_read: int = 0,
        reasoning: int = 0,
        finish: str = "stop",
        ttft_ms: float | None = 150.0,
    ) -> None:
        self.obs.on_stream_success(
            StreamSuccessContext(
                **self.common(),
                turn=turn,
                model=model,
                provider="scripted",
                attempt=attempt,
                input_tokens=inp,
                output_tokens=out,
                cache_read_input_tokens=cache_read,
                reasoning_output_tokens=reasoning,
                duration_ms=300.0,
                time_to_first_token_ms=ttft_ms,
                finish_reason=finish,
                response_id=f"resp-{turn}-{attempt}",
                response_model=f"{model}-2026",
            )
        )

    def stream_failure(self, turn: int, model: str, error: LoopError, attempt: int = 0) -> None:
        self.obs.on_stream_failure(
            StreamFailureContext(
                **self.common(),
                turn=turn,
                model=model,
                error=error,
                provider="scripted",
                attempt=attempt,
                duration_ms=120.0,
            )
        )

    def response(self, turn: int, text: str, tool_calls: int = 0) -> None:
        self.obs.on_response(
            ResponseContext(**self.common(), turn=turn, text=text, tool_calls=tool_calls)
        )

    def call_received(self, turn: int, tool: str, call_id: str, args: dict[str, Any]) -> None:
        self.obs.on_tool_call_received(
            ToolCallReceivedContext(
                **self.common(), turn=turn, tool=tool, tool_call_id=call_id, input=args
            )
        )

    def tool_pre(self, turn: int, tool: str, call_id: str, attempt: int = 0) -> None:
        self.obs.on_tool_pre(
            ToolPreContext(
                **self.common(), turn=turn, tool=tool, tool_call_id=call_id, attempt=attempt
            )
        )

    def tool_post(
        self,
        turn: int,
        tool: str,
        call_id: str,
        *,
        result: str = "4",
        error: LoopError | None = None,
        outcome: str = "output",
        attempt: int = 0,
    ) -> None:
        self.obs.on_tool_post(
            ToolPostContext(
                **self.common(),
                tool_call_id=call_id,
                turn=turn,
                tool=tool,
                result_hash=0xFEDCBA9876543210 if error is None else None,
                is_error=error is not None,
                duration_ms=5.0,
                attempt=attempt,
                outcome="error" if error is not None else outcome,  # type: ignore[arg-type]
                error=error,
                result=result,
            )
        )

    def compaction(self) -> None:
        self.obs.on_compaction(
            CompactionContext(
                **self.common(),
                tokens_before=9000,
                tokens_after=3000,
                tokens_saved=6000,
                messages_removed=7,
                reason="threshold",
            )
        )

    def fallback(self, turn: int, frm: str, to: str) -> None:
        self.obs.on_fallback(
            FallbackContext(**self.common(), from_model=frm, to_model=to, turn=turn)
        )

    def switched(self, frm: str, to: str) -> None:
        self.obs.on_model_switched(
            ModelSwitchedContext(**self.common(), from_model=frm, to_model=to)
        )

    def loop_detected(self, tool: str) -> None:
        self.obs.on_loop_detected(
            LoopDetectedContext(
                **self.common(), pattern="exact", repetitions=3, tool=tool, action="warn"
            )
        )

    def converged(self) -> None:
        self.obs.on_convergence_detected(
            ConvergenceDetectedContext(
                **self.common(), action="stop", similarity=0.97, consecutive=3
            )
        )

    def suspended(self, turn: int, tool: str, call_id: str) -> None:
        self.obs.on_suspended(
            SuspendedContext(
                **self.common(),
                turn=turn,
                tool=tool,
                tool_call_id=call_id,
                reason="needs approval",
                input_schema={"type": "object"},
                kind="human",
            )
        )

    def sleep(self, turn: int, tool: str, call_id: str) -> None:
        self.obs.on_sleep(
            SleepContext(
                **self.common(),
                turn=turn,
                tool=tool,
                tool_call_id=call_id,
                wake_at=dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc),
            )
        )

    # tools in their own tasks, like the loop ----------------------------------------------
    async def tool_task(
        self,
        turn: int,
        tool: str,
        call_id: str,
        body: Callable[[], Awaitable[None]] | None = None,
        error: LoopError | None = None,
        result: str = "4",
    ) -> None:
        async def attempt() -> None:
            self.tool_pre(turn, tool, call_id)
            try:
                await asyncio.sleep(0)
                if body is not None:
                    await body()
            finally:
                self.tool_post(turn, tool, call_id, error=error, result=result)

        await asyncio.create_task(attempt())


async def full_run(
    obs: LoopObserver,
    *,
    agent: str = "agent",
    t0: int = T0,
    tool_body: Callable[[], Awaitable[None]] | None = None,
    instructions: str = "",
) -> Script:
    """Every non-parking event kind: compaction, failure + fallback, two tools, two turns.

    Turn 0: m1 fails (RateLimited), fallback to m2 succeeds (100/20 tokens, 10
    cache read, 5 reasoning) asking for ``add`` (ok) and ``div`` (error). Turn 1:
    m2 answers (50/10). The run succeeds with 150/30 tokens.
    """
    s = Script(obs, agent=agent, t0=t0)
    s.run_start("m1", instructions=instructions)
    s.compaction()
    s.turn_start(0)
    s.stream_start(0, "m1", 0)
    s.stream_failure(0, "m1", RateLimited("slow down"), 0)
    s.fallback(0, "m1", "m2")
    s.switched("m1", "m2")
    s.stream_start(0, "m2", 1)
    s.thinking(0, "let me add")
    s.text(0, "Adding")
    s.stream_success(0, "m2", 1, inp=100, out=20, cache_read=10, reasoning=5, finish="tool_calls")
    s.response(0, "Adding", tool_calls=2)
    s.call_received(0, "add", "call-a", {"a": 2, "b": 2})
    s.call_received(0, "div", "call-b", {"a": 1, "b": 0})
    s.loop_detected("add")
    await asyncio.gather(
        s.tool_task(0, "add", "call-a", tool_body),
        s.tool_task(
            0,
            "div",
            "call-b",
            error=ToolExecutionError("division by zero", tool="div"),
            result="error: division by zero",
        ),
    )
    s.turn_end(0, inp=100, out=20)
    s.turn_start(1)
    s.stream_start(1, "m2", 0)
    s.text(1, "It is ")
    s.text(1, "4.")
    s.stream_success(1, "m2", 0, inp=50, out=10)
    s.response(1, "It is 4.")
    s.converged()
    s.turn_end(1, inp=50, out=10)
    s.run_end(turns=2, inp=150, out=30)
    return s


async def failed_run(obs: LoopObserver, *, agent: str = "agent") -> Script:
    """One turn whose only model fails; the turn and the run fail with FallbackExhausted."""
    s = Script(obs, agent=agent)
    s.run_start("m1")
    s.turn_start(0)
    s.stream_start(0, "m1", 0)
    s.stream_failure(0, "m1", RateLimited("overloaded"), 0)
    err = FallbackExhausted("every model failed")
    s.turn_end(0, success=False, error=err)
    s.run_end(success=False, status=RunStatus.FAILED, error=err, turns=1)
    return s


async def parked_run(obs: LoopObserver, *, sleep: bool = False) -> Script:
    """A tool parks the run (human gate, or a timer when ``sleep``)."""
    s = Script(obs)
    s.run_start("m1")
    s.turn_start(0)
    s.stream_start(0, "m1", 0)
    s.stream_success(0, "m1", 0, finish="tool_calls")
    s.response(0, "", tool_calls=1)
    s.call_received(0, "approve", "call-p", {})
    s.tool_pre(0, "approve", "call-p")
    s.tool_post(0, "approve", "call-p", outcome="sleep" if sleep else "suspend", result="")
    if sleep:
        s.sleep(0, "approve", "call-p")
    else:
        s.suspended(0, "approve", "call-p")
    s.turn_end(0, inp=100, out=20)
    s.run_end(
        success=False,
        status=RunStatus.SLEEPING if sleep else RunStatus.SUSPENDED,
        turns=1,
        inp=100,
        out=20,
    )
    return s
