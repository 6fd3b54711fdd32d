"""A readable tree per run, in the terminal: :class:`ConsoleTreeObserver` and :func:`render_run`.

The tree mirrors the span tree (run → turn → model calls and tool calls, with
detections, fallbacks and parking as markers) and is built from events alone,
so ``loopobs inspect`` renders a recorded event log the same way.
It shows names, durations, token counts, costs (USD, or "unknown" for a model
without a price) and error types, never message content.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import IO
from uuid import UUID

from loopobs.contract.events import (
    BudgetExceededContext,
    CompactionContext,
    ContextProviderContext,
    ConvergenceDetectedContext,
    EventContext,
    FallbackContext,
    LoopDetectedContext,
    ModelSwitchedContext,
    RunEndContext,
    RunStartContext,
    SleepContext,
    StreamFailureContext,
    StreamStartContext,
    StreamSuccessContext,
    SuspendedContext,
    ToolCallReceivedContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.contract.observer import LoopObserver

__all__ = ["ConsoleTreeObserver", "RunSummary", "render_run", "summarise_runs"]


def _ms(ns: int) -> str:
    ms = ns / 1e6
    return f"{ms / 1000:.2f}s" if ms >= 1000 else f"{ms:.0f}ms" if ms >= 10 else f"{ms:.1f}ms"


def usd(value: float | None) -> str:
    """A USD figure for people: cents for dollars, more digits for fractions of a cent."""
    if value is None:
        return "unknown"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.4f}" if value >= 0.01 else f"${value:.6f}"


@dataclass
class _Node:
    label: str
    children: list[_Node] = field(default_factory=list)


@dataclass
class RunSummary:
    """Totals of one run, as read from its events."""

    run_id: UUID
    agent: str = ""
    model: str = ""
    status: str = "open"
    turns: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    stream_failures: int = 0
    detections: int = 0
    duration_ns: int = 0
    cost_usd: float = 0.0
    """USD of the run's priced model calls."""
    unpriced_calls: int = 0
    """Model calls with no known price (their cost is not in ``cost_usd``)."""
    budget_stops: int = 0

    @property
    def cost(self) -> float | None:
        """The run's cost, or None when some call's price is unknown."""
        return None if self.unpriced_calls else self.cost_usd


def render_run(events: Sequence[EventContext]) -> tuple[str, RunSummary]:
    """The tree of one run's events (in order), and its summary."""
    if not events:
        raise ValueError("render_run needs at least one event")
    summary = RunSummary(run_id=events[0].run_id)
    root = _Node("")
    turn_node: _Node | None = None
    started: dict[tuple[str, object], int] = {}
    unrun: dict[str, str] = {}  # calls received but never started: unknown tools
    first_ns = events[0].time_ns
    for ctx in events:
        parent = turn_node if turn_node is not None else root
        if isinstance(ctx, RunStartContext):
            summary.agent, summary.model = ctx.agent, ctx.model
            first_ns = ctx.time_ns
            if ctx.resumed_from is not None:
                root.children.append(_Node(f"↻ resumed from run {str(ctx.resumed_from)[:8]}"))
        elif isinstance(ctx, TurnStartContext):
            turn_node = _Node(f"turn {ctx.turn}")
            started[("turn", ctx.turn)] = ctx.time_ns
            root.children.append(turn_node)
        elif isinstance(ctx, ToolCallReceivedContext):
            unrun[ctx.tool_call_id] = ctx.tool
        elif isinstance(ctx, TurnEndContext):
            for call_id, name in unrun.items():
                parent.children.append(_Node(f"tool {name} [{call_id}]  NOT RUN (unknown tool)"))
            unrun.clear()
            if turn_node is not None:
                took = ctx.time_ns - started.pop(("turn", ctx.turn), ctx.time_ns)
                state = "ok" if ctx.success else f"FAILED {type(ctx.error).__name__}"
                turn_node.label += (
                    f"  {state}  {_ms(took)}  tokens in={ctx.input_tokens} "
                    f"out={ctx.output_tokens}  cost {usd(ctx.cost_usd)}"
                )
            summary.turns += 1
            turn_node = None
        elif isinstance(ctx, StreamStartContext):
            started[("chat", (ctx.turn, ctx.attempt))] = ctx.time_ns
        elif isinstance(ctx, StreamSuccessContext):
            took = ctx.time_ns - started.pop(("chat", (ctx.turn, ctx.attempt)), ctx.time_ns)
            ttft = (
                f" ttft {ctx.time_to_first_token_ms:.0f}ms"
                if ctx.time_to_first_token_ms is not None
                else ""
            )
            parent.children.append(
                _Node(
                    f"chat {ctx.model} #{ctx.attempt}  ok  {_ms(took)}{ttft}  "
                    f"in={ctx.input_tokens} out={ctx.output_tokens}  "
                    f"finish={ctx.finish_reason}  cost {usd(ctx.cost_usd)}"
                )
            )
            summary.input_tokens += ctx.input_tokens
            summary.output_tokens += ctx.output_tokens
            if ctx.cost_usd is None:
                summary.unpriced_calls += 1
            else:
                summary.cost_usd += ctx.cost_usd
        elif isinstance(ctx, StreamFailureContext):
            took = ctx.time_ns - started.pop(("chat", (ctx.turn, ctx.attempt)), ctx.time_ns)
            parent.children.append(
                _Node(
                    f"chat {ctx.model} #{ctx.attempt}  FAILED {type(ctx.error).__name__}  "
                    f"{_ms(took)}"
                )
            )
            summary.stream_failures += 1
        elif isinstance(ctx, ToolPreContext):
            unrun.pop(ctx.tool_call_id, None)
            started[("tool", (ctx.tool_call_id, ctx.attempt))] = ctx.time_ns
        elif isinstance(ctx, ToolPostContext):
            took = ctx.time_ns - started.pop(("tool", (ctx.tool_call_id, ctx.attempt)), ctx.time_ns)
            state = (
                f"ERROR {type(ctx.error).__name__}"
                if ctx.is_error and ctx.error
                else "ERROR"
                if ctx.is_error
                else ctx.outcome
            )
            server = f"  mcp {ctx.mcp.server}" if ctx.mcp is not None else ""
            parent.children.append(
                _Node(f"tool {ctx.tool} [{ctx.tool_call_id}]  {state}  {_ms(took)}{server}")
            )
            summary.tool_calls += 1
            summary.tool_errors += ctx.is_error
        elif isinstance(ctx, ContextProviderContext):
            # The length only: the text is content.
            detail = f"{ctx.chars} chars" if ctx.outcome == "ok" else ctx.outcome.upper()
            parent.children.append(
                _Node(f"context {ctx.provider}  {detail}  {ctx.duration_ms:.0f}ms")
            )
        elif isinstance(ctx, FallbackContext):
            parent.children.append(_Node(f"⇢ fallback {ctx.from_model} → {ctx.to_model}"))
        elif isinstance(ctx, ModelSwitchedContext):
            parent.children.append(_Node(f"⇄ model switched {ctx.from_model} → {ctx.to_model}"))
        elif isinstance(ctx, CompactionContext):
            parent.children.append(
                _Node(
                    f"✂ compaction ({ctx.reason}) {ctx.tokens_before} → {ctx.tokens_after} tokens, "
                    f"{ctx.messages_removed} messages removed"
                )
            )
        elif isinstance(ctx, LoopDetectedContext):
            parent.children.append(
                _Node(f"⚠ loop detected: {ctx.summary()} ×{ctx.repetitions} → {ctx.action}")
            )
            summary.detections += 1
        elif isinstance(ctx, ConvergenceDetectedContext):
            parent.children.append(
                _Node(
                    f"⚠ answers converged: {ctx.consecutive} alike "
                    f"(similarity {ctx.similarity:.2f}) → {ctx.action}"
                )
            )
            summary.detections += 1
        elif isinstance(ctx, SuspendedContext):
            parent.children.append(_Node(f"⏸ suspended by {ctx.tool} ({ctx.kind} gate)"))
        elif isinstance(ctx, SleepContext):
            parent.children.append(_Node(f"⏾ sleeping until {ctx.wake_at.isoformat()}"))
        elif isinstance(ctx, BudgetExceededContext):
            if ctx.action == "stop":
                what = (
                    f"⛔ {ctx.scope} budget exceeded: {ctx.limit} {ctx.value:g} > "
                    f"{ctx.budget:g} → stop"
                )
                summary.budget_stops += 1
            else:
                what = f"⚠ {ctx.scope} budget warning: {ctx.limit} {ctx.value:g} of {ctx.budget:g}"
            parent.children.append(_Node(what))
        elif isinstance(ctx, RunEndContext):
            summary.status = ctx.status
            summary.duration_ns = ctx.time_ns - first_ns
            if ctx.error is not None and ctx.status != "completed":
                root.children.append(_Node(f"✗ {type(ctx.error).__name__}: {ctx.error}"))
    head = (
        f"run {str(summary.run_id)[:8]}  agent={summary.agent} model={summary.model}  "
        f"{summary.status}  turns={summary.turns}  {_ms(summary.duration_ns)}  "
        f"tokens in={summary.input_tokens} out={summary.output_tokens}  "
        f"cost {_cost(summary)}"
    )
    lines = [head]
    _draw(root.children, "", lines)
    return "\n".join(lines), summary


def _cost(summary: RunSummary) -> str:
    if summary.unpriced_calls:
        priced = f", {usd(summary.cost_usd)} priced" if summary.cost_usd else ""
        return f"unknown ({summary.unpriced_calls} unpriced calls{priced})"
    return usd(summary.cost_usd)


def _draw(nodes: list[_Node], prefix: str, out: list[str]) -> None:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        out.append(f"{prefix}{'└─ ' if last else '├─ '}{node.label}")
        _draw(node.children, prefix + ("   " if last else "│  "), out)


def summarise_runs(summaries: Iterable[RunSummary]) -> str:
    """One line of totals over many runs."""
    items = list(summaries)
    by_status: dict[str, int] = {}
    for s in items:
        by_status[s.status] = by_status.get(s.status, 0) + 1
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(by_status.items()))
    total = RunSummary(
        run_id=UUID(int=0),
        cost_usd=sum(s.cost_usd for s in items),
        unpriced_calls=sum(s.unpriced_calls for s in items),
        budget_stops=sum(s.budget_stops for s in items),
    )
    return (
        f"{len(items)} runs ({statuses}); turns {sum(s.turns for s in items)}; "
        f"tokens in {sum(s.input_tokens for s in items)} out "
        f"{sum(s.output_tokens for s in items)}; tool calls {sum(s.tool_calls for s in items)} "
        f"({sum(s.tool_errors for s in items)} errors); stream failures "
        f"{sum(s.stream_failures for s in items)}; detections {sum(s.detections for s in items)}"
        f"; cost {_cost(total)}; budget stops {total.budget_stops}"
    )


class ConsoleTreeObserver(LoopObserver):
    """Prints each run's tree to ``stream`` when the run ends.

    Events are buffered per run (and dropped at ``on_run_end``), so concurrent
    runs print whole trees, never interleaved lines.
    """

    def __init__(
        self, stream: IO[str] | None = None, *, writer: Callable[[str], None] | None = None
    ) -> None:
        self._stream = stream
        self._writer = writer
        self._runs: dict[UUID, list[EventContext]] = {}
        self._lock = threading.Lock()
        self.summaries: list[RunSummary] = []

    def _add(self, ctx: EventContext) -> None:
        with self._lock:
            self._runs.setdefault(ctx.run_id, []).append(ctx)

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Render and print the finished run."""
        with self._lock:
            events = self._runs.pop(ctx.run_id, [])
        events.append(ctx)
        text, summary = render_run(events)
        self.summaries.append(summary)
        if self._writer is not None:
            self._writer(text)
        else:
            (self._stream or sys.stdout).write(text + "\n")

    def reset(self) -> None:
        """Forget buffered runs and summaries."""
        with self._lock:
            self._runs.clear()
            self.summaries.clear()

    on_run_start = on_turn_start = on_turn_end = _add
    on_stream_start = on_stream_success = on_stream_failure = _add
    on_tool_call_received = on_tool_pre = on_tool_post = _add
    on_compaction = on_fallback = on_model_switched = _add
    on_loop_detected = on_convergence_detected = on_suspended = on_sleep = _add
    on_budget_exceeded = on_context_provider = _add
