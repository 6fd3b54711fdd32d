"""Fold a recorded event log into the compact per-run records the HTML report draws.

The fold reads events only (never live state), so a report of a log is the same
whatever process recorded it. Times are milliseconds from the run's first event;
a run whose log stops before ``on_run_end`` (the recorder crashed, the process was
killed) is closed at its last recorded event and marked ``incomplete``. Session
events (``on_backpressure``, ``on_session_reset``: their ``run_id`` is the
session's id) are no run: they are folded into a :class:`SessionRecord`, which
the page shows with the session's runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from loopobs.contract.events import SESSION_HOOKS, EventContext

__all__ = ["FoldedLog", "RunRecord", "SessionRecord", "fold_log", "fold_runs"]

# Token order in every ``tok`` array: input, output, cache read, cache write, reasoning.
_TOKEN_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_write_input_tokens",
    "reasoning_output_tokens",
)

# Hooks drawn as markers on the timeline, with the label each gets.
_MARKERS = {
    "on_fallback": "fallback",
    "on_model_switched": "model switch",
    "on_compaction": "compaction",
    "on_loop_detected": "loop detected",
    "on_convergence_detected": "convergence",
    "on_suspended": "parked",
    "on_sleep": "sleeping",
    "on_budget_exceeded": "budget",
}

_MAX_CONTENT = 4_000  # characters of one content value kept in the report
_MAX_SESSION_EVENTS = 200  # session events kept per session (all are counted)


def _field(ctx: EventContext, *names: str, default: Any = None) -> Any:
    """The first of ``names`` the context has: tolerates renamed fields of older logs."""
    for name in names:
        value = getattr(ctx, name, None)
        if value is not None:
            return value
    return default


def _error_text(error: Any) -> str | None:
    if error is None:
        return None
    message = str(error)
    kind = type(error).__name__
    return f"{kind}: {message}" if message else kind


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CONTENT else f"{text[:_MAX_CONTENT]}… ({len(text)} chars)"


def _content(value: Any) -> str:
    if isinstance(value, str):
        return _clip(value)
    try:
        return _clip(json.dumps(value, ensure_ascii=False, sort_keys=True, default=str))
    except (TypeError, ValueError):
        return _clip(repr(value))


@dataclass
class RunRecord:
    """One run as the report draws it (times in ms from the run's first event)."""

    run_id: str
    t0_ns: int
    session: str = ""
    agent: str = ""
    model: str = ""
    status: str = "incomplete"
    error: str | None = None
    end_ms: float = 0.0
    turns: int = 0
    tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    cost: float | None = None
    tool_calls: int = 0
    tool_errors: int = 0
    # Bars: [kind, label, start_ms, end_ms, turn, status, detail]
    #   kind: "turn" | "chat" | "tool"; status: "ok" | "error" | "open"
    bars: list[list[Any]] = field(default_factory=list)
    # Chat bars' time to first chunk, by bar index.
    ttft: dict[int, float] = field(default_factory=dict)
    # Markers: [label, at_ms, text]
    marks: list[list[Any]] = field(default_factory=list)
    # Per turn: turn -> [tokens..., cost or None]
    turn_totals: dict[int, list[Any]] = field(default_factory=dict)
    # Content, only when the log has it and the report includes it: [label, text]
    content: list[list[str]] = field(default_factory=list)
    _open: dict[tuple[Any, ...], int] = field(default_factory=dict, repr=False)
    _last_ns: int = 0

    def at(self, ctx: EventContext) -> float:
        """Milliseconds from the run's first event to ``ctx``; remembers the latest event seen."""
        self._last_ns = max(self._last_ns, ctx.time_ns)
        return round((ctx.time_ns - self.t0_ns) / 1e6, 3)

    def to_json(self) -> dict[str, Any]:
        """The record as the page's script reads it (short keys keep large reports small)."""
        return {
            "id": self.run_id,
            "t0": self.t0_ns // 1_000_000,
            "session": self.session,
            "agent": self.agent,
            "model": self.model,
            "status": self.status,
            "error": self.error,
            "dur": self.end_ms,
            "turns": self.turns,
            "tok": self.tokens,
            "cost": self.cost,
            "tools": self.tool_calls,
            "toolErr": self.tool_errors,
            "bars": self.bars,
            "ttft": {str(k): v for k, v in self.ttft.items()},
            "marks": self.marks,
            "turnTot": {str(k): v for k, v in sorted(self.turn_totals.items())},
            "content": self.content,
        }


@dataclass
class SessionRecord:
    """One session's own events (backpressure, resets), as the report shows them.

    ``events``: ``[time_ms, kind, text]`` (epoch milliseconds), the first
    :data:`_MAX_SESSION_EVENTS`; ``counts`` counts every one by kind.
    """

    session_id: str
    events: list[list[Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The record as the page's script reads it."""
        return {"id": self.session_id, "events": self.events, "counts": self.counts}


@dataclass(frozen=True, slots=True)
class FoldedLog:
    """A log folded for the report: its runs and the sessions that have events of their own."""

    runs: list[RunRecord]
    sessions: list[SessionRecord]


def _session_event(ctx: Any) -> tuple[str, str]:
    if ctx.hook == "on_session_reset":
        return "reset", f"epoch {ctx.epoch}, {ctx.discarded} discarded"
    return (
        f"{ctx.queue} {ctx.outcome}",
        f"{ctx.queue} queue {ctx.outcome} (capacity {ctx.capacity}, policy {ctx.policy})",
    )


class _Fold:
    def __init__(self, *, content: bool) -> None:
        self.content = content
        self.runs: dict[Any, RunRecord] = {}
        self.sessions: dict[Any, SessionRecord] = {}

    def add(self, ctx: EventContext) -> None:
        if ctx.hook in SESSION_HOOKS:
            self._add_session_event(ctx)
            return
        run = self.runs.get(ctx.run_id)
        if run is None:
            run = self.runs[ctx.run_id] = RunRecord(run_id=str(ctx.run_id), t0_ns=ctx.time_ns)
        at = run.at(ctx)
        handler = getattr(self, f"_{ctx.hook}", None)
        if handler is not None:
            handler(run, ctx, at)
        label = _MARKERS.get(ctx.hook)
        if label is not None:
            run.marks.append([label, at, self._mark_text(ctx)])

    def _add_session_event(self, ctx: EventContext) -> None:
        record = self.sessions.get(ctx.run_id)
        if record is None:
            record = self.sessions[ctx.run_id] = SessionRecord(session_id=str(ctx.run_id))
        kind, text = _session_event(ctx)
        record.counts[kind] = record.counts.get(kind, 0) + 1
        if len(record.events) < _MAX_SESSION_EVENTS:
            record.events.append([ctx.time_ns // 1_000_000, kind, text])

    # -- run and turn ------------------------------------------------------------------------
    def _on_run_start(self, run: RunRecord, ctx: Any, at: float) -> None:
        run.agent, run.model = ctx.agent, ctx.model
        run.session = str(ctx.session_id) if ctx.session_id is not None else ""
        instructions: str = getattr(ctx, "instructions", "")
        if self.content and instructions:
            run.content.append(["instructions", _content(instructions)])

    def _on_run_end(self, run: RunRecord, ctx: Any, at: float) -> None:
        run.status = str(ctx.status)
        run.error = _error_text(ctx.error)
        run.end_ms = at
        cost = _field(ctx, "cost_usd")
        if cost is not None:
            run.cost = float(cost)

    def _on_turn_start(self, run: RunRecord, ctx: Any, at: float) -> None:
        run.turns += 1
        run._open[("turn", ctx.turn)] = len(run.bars)
        run.bars.append(["turn", f"turn {ctx.turn}", at, None, ctx.turn, "open", None])
        if self.content and ctx.query:
            run.content.append([f"turn {ctx.turn} · query", _content(ctx.query)])

    def _on_turn_end(self, run: RunRecord, ctx: Any, at: float) -> None:
        self._close(run, ("turn", ctx.turn), at, ctx.error)

    # -- model calls ---------------------------------------------------------------------------
    def _on_stream_start(self, run: RunRecord, ctx: Any, at: float) -> None:
        run._open[("chat", ctx.turn, ctx.attempt)] = len(run.bars)
        label = f"chat {ctx.model}" + (f" ({ctx.provider})" if ctx.provider else "")
        run.bars.append(["chat", label, at, None, ctx.turn, "open", None])

    def _on_stream_success(self, run: RunRecord, ctx: Any, at: float) -> None:
        index = self._close(run, ("chat", ctx.turn, ctx.attempt), at, None)
        tokens = [int(_field(ctx, name, default=0)) for name in _TOKEN_FIELDS]
        if index is not None:
            if ctx.time_to_first_token_ms is not None:
                run.ttft[index] = round(float(ctx.time_to_first_token_ms), 3)
            run.bars[index][6] = "tokens " + " / ".join(str(t) for t in tokens[:2])
        for i, value in enumerate(tokens):
            run.tokens[i] += value
        totals = run.turn_totals.setdefault(ctx.turn, [0, 0, 0, 0, 0, None])
        for i, value in enumerate(tokens):
            totals[i] += value
        cost = _field(ctx, "cost_usd")
        if cost is not None:
            totals[5] = (totals[5] or 0.0) + float(cost)
            run.cost = (run.cost or 0.0) + float(cost)  # the run's own total replaces it at the end

    def _on_stream_failure(self, run: RunRecord, ctx: Any, at: float) -> None:
        self._close(run, ("chat", ctx.turn, ctx.attempt), at, ctx.error)

    def _on_response(self, run: RunRecord, ctx: Any, at: float) -> None:
        if self.content and ctx.text:
            run.content.append([f"turn {ctx.turn} · answer", _content(ctx.text)])

    def _on_loop_detected(self, run: RunRecord, ctx: Any, at: float) -> None:
        if self.content:  # the pattern quotes the calls' arguments
            run.content.append([f"loop detected ({ctx.action})", _content(ctx.pattern)])

    # -- tools ---------------------------------------------------------------------------------
    def _on_tool_call_received(self, run: RunRecord, ctx: Any, at: float) -> None:
        if self.content:
            run.content.append([f"turn {ctx.turn} · {ctx.tool} arguments", _content(ctx.input)])

    def _on_tool_pre(self, run: RunRecord, ctx: Any, at: float) -> None:
        call_id = ctx.tool_call_id
        run._open[("tool", call_id, ctx.attempt)] = len(run.bars)
        attempt = f" (attempt {ctx.attempt + 1})" if ctx.attempt else ""
        run.bars.append(["tool", f"{ctx.tool}{attempt}", at, None, ctx.turn, "open", None])
        run.tool_calls += 1

    def _on_tool_post(self, run: RunRecord, ctx: Any, at: float) -> None:
        call_id = ctx.tool_call_id
        error = ctx.error if ctx.error is not None else ("error" if ctx.is_error else None)
        index = self._close(run, ("tool", call_id, ctx.attempt), at, error)
        if ctx.is_error:
            run.tool_errors += 1
        if index is not None and ctx.outcome not in ("output", "error"):
            run.bars[index][6] = f"outcome {ctx.outcome}"
        if self.content and getattr(ctx, "result", None):
            run.content.append([f"turn {ctx.turn} · {ctx.tool} result", _content(ctx.result)])

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def _close(run: RunRecord, key: tuple[Any, ...], at: float, error: Any) -> int | None:
        index = run._open.pop(key, None)
        if index is None:
            return None
        bar = run.bars[index]
        bar[3] = at
        bar[5] = "error" if error is not None else "ok"
        if error is not None and not isinstance(error, str):
            bar[6] = _error_text(error)
        return index

    @staticmethod
    def _mark_text(ctx: Any) -> str:
        hook = ctx.hook
        if hook in ("on_fallback", "on_model_switched"):
            return f"{ctx.from_model} → {ctx.to_model}"
        if hook == "on_compaction":
            return f"{ctx.tokens_before} → {ctx.tokens_after} tokens ({ctx.reason})"
        if hook == "on_loop_detected":
            return f"{ctx.action}: {ctx.summary()} ×{ctx.repetitions}"
        if hook == "on_convergence_detected":
            return f"{ctx.action}: similarity {ctx.similarity:.2f} ×{ctx.consecutive}"
        if hook == "on_suspended":
            return f"{ctx.tool} waits for {ctx.kind}: {ctx.reason}"
        if hook == "on_sleep":
            return f"{ctx.tool} sleeps until {ctx.wake_at.isoformat()}"
        fields: Mapping[str, Any] = {
            name: getattr(ctx, name)
            for name in ("limit", "value", "budget", "action")
            if hasattr(ctx, name)
        }
        return ", ".join(f"{k} {v}" for k, v in fields.items())

    def finish(self) -> list[RunRecord]:
        for run in self.runs.values():
            last = round((run._last_ns - run.t0_ns) / 1e6, 3)
            if run.status == "incomplete":
                run.end_ms = last
                run.error = run.error or "the log ends before this run did (incomplete)"
            for bar in run.bars:  # spans the log never closed end where the run ended
                if bar[3] is None:
                    bar[3] = run.end_ms
                    bar[5] = "open"
            run._open.clear()
        return list(self.runs.values())


def fold_log(events: Iterable[EventContext], *, content: bool = True) -> FoldedLog:
    """``events`` folded: each run into a :class:`RunRecord` (in log order), and each
    session with events of its own into a :class:`SessionRecord`.

    ``content=False`` leaves prompts, answers, tool arguments and results out even
    where the log has them.
    """
    fold = _Fold(content=content)
    for ctx in events:
        fold.add(ctx)
    return FoldedLog(fold.finish(), list(fold.sessions.values()))


def fold_runs(events: Iterable[EventContext], *, content: bool = True) -> list[RunRecord]:
    """The runs of ``events`` (in log order), each folded into one :class:`RunRecord`
    (session events are left out: see :func:`fold_log`)."""
    return fold_log(events, content=content).runs
