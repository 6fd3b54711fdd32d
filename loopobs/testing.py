"""Test helpers: record what observers receive and check it against the event contract.

- :class:`RecordingObserver` records every ``(hook, context)`` in order.
- :func:`check_contract` / :func:`assert_contract` check a recorded stream against the
  contract's guarantees; :func:`spans_by_name` and :func:`metric_points` read the
  in-memory OTel exporter and reader back.

None of this needs pytest: the module imports it never, so these helpers work in scripts,
notebooks and other test runners. The pytest fixtures (``recorder``, ``tracer_provider``,
``span_exporter``, ``meter_provider``, ``metric_reader``) live in
:mod:`loopobs.pytest_plugin`, which pytest loads through the ``pytest11`` entry point.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from loopobs.contract.events import SESSION_HOOKS, EventContext, HookName
from loopobs.contract.observer import EventSink

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

__all__ = [
    "RecordingObserver",
    "assert_contract",
    "check_contract",
    "metric_points",
    "spans_by_name",
]


class RecordingObserver(EventSink):
    """Records every event it receives, in order; thread-safe.

    ``events`` is the list of ``(hook, context)`` pairs. Helpers filter by hook
    and by run.
    """

    def __init__(self) -> None:
        self.events: list[tuple[HookName, EventContext]] = []
        self._lock = threading.Lock()

    def on_event(self, ctx: EventContext) -> None:
        with self._lock:
            self.events.append((ctx.hook, ctx))

    def reset(self) -> None:
        """Forget everything recorded."""
        with self._lock:
            self.events.clear()

    def hooks(self, run_id: UUID | None = None) -> list[HookName]:
        """The hook names recorded, in order (of one run when ``run_id`` is given)."""
        return [h for h, c in self.events if run_id is None or c.run_id == run_id]

    def of(self, hook: HookName, run_id: UUID | None = None) -> list[Any]:
        """The contexts recorded for ``hook`` (of one run when ``run_id`` is given)."""
        return [c for h, c in self.events if h == hook and (run_id is None or c.run_id == run_id)]

    def for_run(self, run_id: UUID) -> list[tuple[HookName, EventContext]]:
        """The ``(hook, context)`` pairs of one run, in order."""
        return [(h, c) for h, c in self.events if c.run_id == run_id]

    def run_ids(self) -> list[UUID]:
        """The run ids seen, in order of first appearance."""
        seen: dict[UUID, None] = {}
        for _, c in self.events:
            seen.setdefault(c.run_id, None)
        return list(seen)


def spans_by_name(exporter: InMemorySpanExporter) -> dict[str, list[Any]]:
    """Finished spans grouped by name."""
    out: dict[str, list[Any]] = {}
    for span in exporter.get_finished_spans():
        out.setdefault(span.name, []).append(span)
    return out


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Collect now, and return the data points of every metric by metric name."""
    out: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


# -- the event contract, checked on a recorded stream ---------------------------------------

_TURN_SCOPED: frozenset[str] = frozenset(
    {
        "on_stream_start",
        "on_stream_success",
        "on_stream_failure",
        "on_response",
        "on_text_delta",
        "on_thinking_delta",
        "on_tool_call_received",
        "on_tool_pre",
        "on_tool_post",
        "on_fallback",
        "on_suspended",
        "on_sleep",
        "on_context_provider",
    }
)
_PARKED_STATUS = {"on_suspended": "suspended", "on_sleep": "sleeping"}


class _RunState:
    """What :func:`check_contract` knows about one run while it reads the stream."""

    __slots__ = (
        "ended",
        "last_turn",
        "open_tools",
        "parks",
        "response",
        "started",
        "stream",
        "stream_done",
        "turn",
        "turns",
    )

    def __init__(self) -> None:
        self.started = False
        self.ended = False
        self.turn: int | None = None  # the open turn
        self.last_turn: int | None = None
        self.turns = 0
        self.stream: int | None = None  # attempt of the open stream
        self.stream_done: str | None = None  # outcome of the turn's last stream
        self.response = False
        self.open_tools: dict[tuple[str, int], str] = {}
        self.parks: list[str] = []


def check_contract(events: Sequence[tuple[str, EventContext]]) -> list[str]:
    """The violations of the event contract in a recorded stream (``[]`` when it holds).

    ``events`` are ``(hook, context)`` pairs in emission order, possibly of many
    interleaved runs (as :attr:`RecordingObserver.events` holds them). Checked per
    run: one ``on_run_start``, first; one ``on_run_end``, last, and no event of
    the run after it; one ``on_turn_end`` per ``on_turn_start``, same turn, turns
    never nested and increasing; turn-scoped events (streams, deltas, responses,
    tool calls, fallbacks, parking) only inside a turn and carrying its number;
    exactly one stream success or failure per ``on_stream_start``, one stream
    open at a time, deltas only inside a stream; ``on_response`` after a
    successful stream, at most one per turn; ``on_fallback`` only after a failed
    stream; one ``on_tool_post`` per ``on_tool_pre`` paired by ``tool_call_id``
    and ``attempt``, every post before its turn's end; park events before
    ``on_turn_end``, at most one per run, and the run then ends ``suspended`` /
    ``sleeping``.
    """
    runs: dict[UUID, _RunState] = {}
    problems: list[str] = []

    sessions_seen: set[UUID] = set()
    for index, (hook, ctx) in enumerate(events):
        run_id = ctx.run_id
        if hook in SESSION_HOOKS:
            # A session's own events belong to no run; their run_id is the session's id.
            if hook != ctx.hook:
                problems.append(f"event {index} ({hook}): its context belongs to {ctx.hook!r}")
            if run_id in runs:
                problems.append(f"event {index} ({hook}): carries the id of run {run_id}")
            sessions_seen.add(run_id)
            continue
        if run_id in sessions_seen and run_id not in runs:
            problems.append(f"event {index} ({hook}): a run event carries a session's id")
        state = runs.get(run_id)
        if state is None:
            state = runs[run_id] = _RunState()

        def bad(message: str, *, _i: int = index, _h: str = hook, _r: UUID = run_id) -> None:
            problems.append(f"event {_i} ({_h}) of run {_r}: {message}")

        if hook != ctx.hook:
            bad(f"recorded under {hook!r} but its context belongs to {ctx.hook!r}")
        if state.ended:
            bad("after the run's on_run_end")
            continue
        if hook == "on_run_start":
            if state.started:
                bad("a second on_run_start")
            state.started = True
            continue
        if not state.started:
            bad("before the run's on_run_start")
            state.started = True  # report the missing start once
        turn = getattr(ctx, "turn", None)
        if hook == "on_run_end":
            if state.turn is not None:
                bad(f"turn {state.turn} is still open")
            state.ended = True
            status = getattr(ctx, "status", None)
            if state.parks and status != _PARKED_STATUS[state.parks[0]]:
                bad(f"the run parked ({state.parks[0]}) but ended with status {status!r}")
            continue
        if hook == "on_turn_start":
            if state.turn is not None:
                bad(f"turn {turn} starts inside turn {state.turn}")
            if state.last_turn is not None and turn is not None and turn <= state.last_turn:
                bad(f"turn {turn} does not follow turn {state.last_turn}")
            state.turn = turn
            state.last_turn = turn
            state.turns += 1
            state.stream = None
            state.stream_done = None
            state.response = False
            continue
        if hook == "on_turn_end":
            if state.turn is None:
                bad("no turn is open")
            elif turn != state.turn:
                bad(f"ends turn {turn} but turn {state.turn} is open")
            if state.stream is not None:
                bad(f"stream attempt {state.stream} has no success or failure")
            for (call_id, attempt), tool in state.open_tools.items():
                bad(f"tool call {call_id!r} ({tool}) attempt {attempt} has no on_tool_post")
            state.open_tools.clear()
            state.turn = None
            state.stream = None
            continue
        if hook in _TURN_SCOPED:
            if state.turn is None:
                bad("outside any turn")
            elif turn is not None and turn != state.turn:
                bad(f"carries turn {turn} inside turn {state.turn}")
        if hook == "on_context_provider":
            if state.stream is not None or state.stream_done is not None:
                bad("a context provider after the turn's model call began")
        elif hook == "on_stream_start":
            if state.stream is not None:
                bad(f"stream attempt {state.stream} is still open")
            state.stream = getattr(ctx, "attempt", 0)
            state.stream_done = None
        elif hook in ("on_stream_success", "on_stream_failure"):
            if state.stream is None:
                bad("no stream is open")
            elif getattr(ctx, "attempt", state.stream) != state.stream:
                bad(f"attempt {getattr(ctx, 'attempt', None)} ends open attempt {state.stream}")
            state.stream = None
            state.stream_done = "success" if hook == "on_stream_success" else "failure"
        elif hook in ("on_text_delta", "on_thinking_delta"):
            if state.stream is None:
                bad("a delta outside a stream")
        elif hook == "on_response":
            if state.stream_done != "success" or state.stream is not None:
                bad("not right after a successful stream")
            if state.response:
                bad("a second on_response in the turn")
            state.response = True
        elif hook == "on_fallback":
            if state.stream_done != "failure" or state.stream is not None:
                bad("not after a failed stream")
        elif hook == "on_tool_pre":
            key = (getattr(ctx, "tool_call_id", ""), getattr(ctx, "attempt", 0))
            if key in state.open_tools:
                bad(f"tool call {key[0]!r} attempt {key[1]} is already running")
            state.open_tools[key] = getattr(ctx, "tool", "")
        elif hook == "on_tool_post":
            key = (getattr(ctx, "tool_call_id", ""), getattr(ctx, "attempt", 0))
            if state.open_tools.pop(key, None) is None:
                bad(f"tool call {key[0]!r} attempt {key[1]} has no open on_tool_pre")
        elif hook in _PARKED_STATUS:
            if state.parks:
                bad(f"the run already parked ({state.parks[0]})")
            state.parks.append(hook)

    for run_id, state in runs.items():
        if not state.ended:
            problems.append(f"run {run_id}: no on_run_end")
            if state.turn is not None:
                problems.append(f"run {run_id}: turn {state.turn} has no on_turn_end")
    return problems


def assert_contract(events: Sequence[tuple[str, EventContext]]) -> None:
    """Raise ``AssertionError`` listing every violation :func:`check_contract` finds."""
    problems = check_contract(events)
    if problems:
        shown = "\n  ".join(problems[:50])
        more = f"\n  … and {len(problems) - 50} more" if len(problems) > 50 else ""
        raise AssertionError(f"{len(problems)} event contract violation(s):\n  {shown}{more}")


# An install whose entry point still names this module (metadata written before the fixtures
# moved), or a conftest with ``pytest_plugins = ["loopobs.testing"]``: when pytest is what
# imports this module, its fixtures come along. Without pytest loaded nothing is imported.
if sys.modules.get("pytest") is not None:
    from loopobs.pytest_plugin import (  # noqa: F401
        meter_provider,
        metric_reader,
        recorder,
        span_exporter,
        tracer_provider,
    )
