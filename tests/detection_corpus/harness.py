"""The labelled detection corpus: its trace format, a player, and the quality figures.

A trace is one session of an agent, as events with times: tool calls (arguments,
result, duration, error, annotations), final answers, new runs (with the user's
question) and compactions. Its label is what a person would say: ``loop`` (a
runaway tool loop), ``converged`` (the same answer over and over) or ``ok``
(productive work). A runaway trace also says at which step the looping begins,
so the latency of a detection can be counted in looping steps.

:func:`play` feeds a trace through the detectors, as a loop would: hand-emitted
events into an ``ObserverSet``, stopping where a detector says ``stop``.
:func:`score` turns the outcomes into precision, recall and latency.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loopobs.contract.events import (
    CompactionContext,
    ConvergenceDetectedContext,
    LoopDetectedContext,
    ResponseContext,
    RunEndContext,
    RunStartContext,
    ToolAnnotations,
    ToolCallReceivedContext,
    ToolPostContext,
    TurnStartContext,
)
from loopobs.contract.hashing import result_hash
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.detectors import ConvergenceDetector, Normaliser, RepetitionDetector

Label = Literal["loop", "converged", "ok"]

CORPUS_PATH = Path(__file__).resolve().parent.parent / "data" / "detection_corpus.jsonl"
WORKSPACE = "/workspace/repo"
"""The agents' working directory in every trace; the detectors are told (``path_roots``)."""


@dataclass(frozen=True)
class Trace:
    """One labelled session: ``steps`` are JSON objects (see :func:`play`)."""

    name: str
    cls: str
    label: Label
    steps: tuple[dict[str, Any], ...]
    loop_start: int | None = None

    def to_json(self) -> str:
        """One JSON line."""
        return json.dumps(
            {
                "name": self.name,
                "class": self.cls,
                "label": self.label,
                "loop_start": self.loop_start,
                "steps": list(self.steps),
            },
            ensure_ascii=False,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, line: str) -> Trace:
        """The trace of one JSON line."""
        data = json.loads(line)
        return cls(
            data["name"], data["class"], data["label"], tuple(data["steps"]), data["loop_start"]
        )


def load(path: Path = CORPUS_PATH) -> list[Trace]:
    """Every trace of the corpus file."""
    with path.open(encoding="utf-8") as f:
        return [Trace.from_json(line) for line in f if line.strip()]


def default_detectors() -> list[LoopObserver]:
    """The detectors as a user would set them up: defaults, told the agents' workspace."""
    return [
        RepetitionDetector(normaliser=Normaliser(path_roots=(WORKSPACE,))),
        ConvergenceDetector(),
    ]


@dataclass
class Outcome:
    """What the detectors did on one trace."""

    trace: Trace
    detections: list[tuple[int, str, str, str]] = field(default_factory=list)
    """(step index, kind ``loop``/``converged``, action, reason)."""

    @property
    def first_warn(self) -> int | None:
        """The step of the first detection of any action."""
        return self.detections[0][0] if self.detections else None

    @property
    def first_stop(self) -> int | None:
        """The step of the first stop."""
        return next((d[0] for d in self.detections if d[2] in ("stop", "ask_user")), None)

    @property
    def kinds(self) -> set[str]:
        """The kinds of detections made."""
        return {d[1] for d in self.detections}


class _Collector(LoopObserver):
    name = "corpus.collector"

    def __init__(self) -> None:
        self.events: list[LoopDetectedContext | ConvergenceDetectedContext] = []

    def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
        self.events.append(ctx)

    def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
        self.events.append(ctx)


def play(trace: Trace, detectors: Sequence[LoopObserver] | None = None) -> Outcome:
    """Feed ``trace`` to ``detectors`` (fresh defaults if none); stop at the first stop.

    Steps: ``{"call": tool, "args", "result", "t", "duration", "error", "annotations"}``,
    ``{"answer": text, "t"}``, ``{"run": question, "t"}`` (a new run of the session)
    and ``{"compaction": true, "t"}``. ``t`` is seconds since the session began.
    """
    collector = _Collector()
    observers = ObserverSet(
        [collector, *(detectors if detectors is not None else default_detectors())], strict=True
    )
    session = uuid.uuid4()
    outcome = Outcome(trace)
    run = uuid.uuid4()
    observers.on_run_start(RunStartContext(run_id=run, time_ns=0, session_id=session))
    turn = 0
    for index, step in enumerate(trace.steps):
        t = int(step.get("t", index) * 1e9)
        before = len(collector.events)
        if "call" in step:
            call_id = f"call_{index}"
            raw = step.get("annotations")
            observers.on_tool_call_received(
                ToolCallReceivedContext(
                    run_id=run,
                    time_ns=t,
                    turn=turn,
                    tool=step["call"],
                    tool_call_id=call_id,
                    input=step.get("args", {}),
                    annotations=ToolAnnotations(**raw) if raw else None,
                )
            )
            text = step.get("result", "")
            duration = float(step.get("duration", 0.1))
            observers.on_tool_post(
                ToolPostContext(
                    run_id=run,
                    time_ns=t + int(duration * 1e9),
                    turn=turn,
                    tool=step["call"],
                    tool_call_id=call_id,
                    result_hash=result_hash(text),
                    result=text,
                    is_error=bool(step.get("error", False)),
                    duration_ms=duration * 1000.0,
                    outcome="error" if step.get("error") else "output",
                )
            )
        elif "answer" in step:
            observers.on_response(
                ResponseContext(run_id=run, time_ns=t, turn=turn, text=step["answer"])
            )
        elif "run" in step:
            observers.on_run_end(RunEndContext(run_id=run, time_ns=t, success=True))
            run = uuid.uuid4()
            turn += 1
            observers.on_run_start(RunStartContext(run_id=run, time_ns=t, session_id=session))
            observers.on_turn_start(
                TurnStartContext(run_id=run, time_ns=t, turn=turn, query=step["run"])
            )
        elif "compaction" in step:
            observers.on_compaction(
                CompactionContext(
                    run_id=run,
                    time_ns=t,
                    tokens_before=10_000,
                    tokens_after=2_000,
                    tokens_saved=8_000,
                )
            )
        stopped = False
        for event in collector.events[before:]:
            kind = "loop" if isinstance(event, LoopDetectedContext) else "converged"
            outcome.detections.append((index, kind, event.action, event.reason))
            stopped = stopped or event.action in ("stop", "ask_user")
        if stopped:
            break
    observers.on_run_end(RunEndContext(run_id=run, time_ns=0, success=True))
    return outcome


@dataclass(frozen=True)
class Scores:
    """Quality of the detections over a corpus."""

    warn_precision: float
    warn_recall: float
    stop_precision: float
    stop_recall: float
    median_latency: float
    latencies: tuple[int, ...]
    counts: dict[str, int]


def _ratio(num: int, den: int) -> float:
    return num / den if den else 1.0


def score(outcomes: Iterable[Outcome]) -> Scores:
    """Precision and recall of warnings (any detection) and of stops, and warn latency.

    A detection on a runaway trace counts only if it is of the trace's kind (a loop
    for ``loop``, a convergence for ``converged``). Latency is counted in looping
    steps: from the trace's ``loop_start`` to the first detection, both included.
    """
    tp = fp = fn = stop_tp = stop_fp = stop_fn = 0
    latencies: list[int] = []
    for o in outcomes:
        positive = o.trace.label != "ok"
        right = positive and o.trace.label in o.kinds
        if o.detections:
            if right:
                tp += 1
            else:
                fp += 1
                fn += positive
        elif positive:
            fn += 1
        if o.first_stop is not None:
            if right:
                stop_tp += 1
            else:
                stop_fp += 1
                stop_fn += positive
        elif positive:
            stop_fn += 1
        if right and o.first_warn is not None and o.trace.loop_start is not None:
            latencies.append(max(1, o.first_warn - o.trace.loop_start + 1))
    return Scores(
        warn_precision=_ratio(tp, tp + fp),
        warn_recall=_ratio(tp, tp + fn),
        stop_precision=_ratio(stop_tp, stop_tp + stop_fp),
        stop_recall=_ratio(stop_tp, stop_tp + stop_fn),
        median_latency=statistics.median(latencies) if latencies else 0.0,
        latencies=tuple(latencies),
        counts={
            "tp": tp,
            "fp": fp,
            "fn": fn,
            "stop_tp": stop_tp,
            "stop_fp": stop_fp,
            "stop_fn": stop_fn,
        },
    )


def evaluate(
    traces: Iterable[Trace],
    make_detectors: Callable[[], Sequence[LoopObserver]] = default_detectors,
) -> tuple[Scores, list[Outcome]]:
    """Play every trace with fresh detectors; the scores and each outcome."""
    outcomes = [play(t, make_detectors()) for t in traces]
    return score(outcomes), outcomes
