"""The demo's live terminal view: counters as runs happen, and a summary at the end."""

from __future__ import annotations

import sys
import threading
import time
from typing import IO

from loopobs.contract.events import (
    BudgetExceededContext,
    ConvergenceDetectedContext,
    LoopDetectedContext,
    RunEndContext,
    RunStartContext,
    StreamFailureContext,
    StreamSuccessContext,
    ToolPostContext,
    TurnEndContext,
)
from loopobs.contract.observer import LoopObserver

__all__ = ["LiveView"]


class LiveView(LoopObserver):
    """Counts runs, turns, tokens, spend, tool calls, detections and budget stops; draws a
    status line on a TTY.

    ``write()`` prints a block of text above the status line, so run trees and
    the live line never garble each other.
    """

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True) -> None:
        self.stream = stream or sys.stdout
        self.live = enabled and self.stream.isatty()
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.active = 0
        self.runs = 0
        self.statuses: dict[str, int] = {}
        self.turns = 0
        self.tokens_in = 0
        self.tokens_out = 0
        self.tool_calls = 0
        self.tool_errors = 0
        self.stream_failures = 0
        self.loops = 0
        self.convergences = 0
        self.spend_usd = 0.0
        self.unpriced_calls = 0
        self.budget_stops = 0
        self._last_draw = 0.0

    def on_run_start(self, ctx: RunStartContext) -> None:
        """Count the run as active."""
        with self._lock:
            self.active += 1
        self._draw()

    def on_run_end(self, ctx: RunEndContext) -> None:
        """Count the finished run by status."""
        with self._lock:
            self.active -= 1
            self.runs += 1
            self.statuses[ctx.status] = self.statuses.get(ctx.status, 0) + 1
        self._draw(force=True)

    def on_turn_end(self, ctx: TurnEndContext) -> None:
        """Count the turn."""
        with self._lock:
            self.turns += 1
        self._draw()

    def on_stream_success(self, ctx: StreamSuccessContext) -> None:
        """Add the call's tokens."""
        with self._lock:
            self.tokens_in += ctx.input_tokens
            self.tokens_out += ctx.output_tokens
            if ctx.cost_usd is None:
                self.unpriced_calls += 1
            else:
                self.spend_usd += ctx.cost_usd

    def on_stream_failure(self, ctx: StreamFailureContext) -> None:
        """Count the failed call."""
        with self._lock:
            self.stream_failures += 1

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Count the tool call."""
        with self._lock:
            self.tool_calls += 1
            self.tool_errors += ctx.is_error

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        """Count the detection."""
        with self._lock:
            self.loops += 1

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        """Count the detection."""
        with self._lock:
            self.convergences += 1

    def on_budget_exceeded(self, ctx: BudgetExceededContext) -> None:
        """Count a budget stop."""
        if ctx.action == "stop":
            with self._lock:
                self.budget_stops += 1

    def _spend(self) -> str:
        unpriced = f" (+{self.unpriced_calls} unpriced calls)" if self.unpriced_calls else ""
        return f"${self.spend_usd:.4f}{unpriced}"

    def status_line(self) -> str:
        """The one-line view of everything counted so far."""
        elapsed = time.monotonic() - self.started
        return (
            f"⏱ {elapsed:5.1f}s  runs {self.runs} (+{self.active} active)  turns {self.turns}  "
            f"tokens {self.tokens_in}/{self.tokens_out}  spend {self._spend()}  "
            f"tools {self.tool_calls} "
            f"({self.tool_errors} err)  stream failures {self.stream_failures}  "
            f"loops {self.loops}  converged {self.convergences}"
        )

    def summary(self) -> str:
        """The closing summary."""
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        return (
            f"summary: {self.runs} runs ({statuses}); {self.turns} turns; tokens "
            f"in {self.tokens_in} out {self.tokens_out}; {self.tool_calls} tool calls "
            f"({self.tool_errors} errors); {self.stream_failures} stream failures; "
            f"{self.loops} loop detections; {self.convergences} convergence detections; "
            f"spend {self._spend()}; {self.budget_stops} budget stops"
        )

    def write(self, text: str) -> None:
        """Print ``text`` above the live status line."""
        with self._lock:
            if self.live:
                self.stream.write("\r\x1b[K")
            self.stream.write(text if text.endswith("\n") else text + "\n")
        self._draw(force=True)

    def _draw(self, *, force: bool = False) -> None:
        if not self.live:
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        with self._lock:
            self.stream.write("\r\x1b[K" + self.status_line())
            self.stream.flush()

    def close(self) -> None:
        """End the live line."""
        if self.live:
            with self._lock:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
