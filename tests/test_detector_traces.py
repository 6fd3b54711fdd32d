"""Labelled, realistic traces for the default detectors, and their precision and recall.

Each trace is what an agent did in one session, with the verdict a person
would give: ``loop`` (a runaway tool loop), ``converged`` (the same answer over
and over), or ``ok`` (the agent is making progress). The detectors run with
their defaults. Precision and recall are printed (``pytest -s``) and must be
perfect on this set.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

import pytest

from loopobs import ConvergenceDetector, RepetitionDetector
from tests.test_detectors import Driver

Verdict = Literal["loop", "converged", "ok"]


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any]
    result: str


@dataclass(frozen=True)
class Answer:
    text: str


class NewRun:
    """The session's next run starts here."""


Step = Call | Answer | NewRun


@dataclass(frozen=True)
class Trace:
    name: str
    expected: Verdict
    steps: tuple[Step, ...]


APP_PY = "def total(xs):\n    return sum(xs) + 1\n"
FAILURE = "FAILED tests/test_app.py::test_total - assert 7 == 6"


def _coding_agent_rereading() -> Trace:
    steps: list[Step] = [Call("list_dir", {"path": "src"}, "app.py\nutil.py")]
    for _ in range(4):  # reads, runs the tests, fails, never edits
        steps += [
            Call("read_file", {"path": "src/app.py"}, APP_PY),
            Call("run_tests", {"target": "tests/test_app.py"}, FAILURE),
            Call("grep", {"pattern": "def total", "path": "src"}, "src/app.py:1"),
        ]
    return Trace("coding agent re-reading one file", "loop", tuple(steps))


def _coding_agent_progressing() -> Trace:
    versions = [APP_PY, "def total(xs):\n    return sum(xs)\n"]
    return Trace(
        "coding agent editing and re-reading",
        "ok",
        (
            Call("list_dir", {"path": "src"}, "app.py\nutil.py"),
            Call("read_file", {"path": "src/app.py"}, versions[0]),
            Call("run_tests", {"target": "tests/test_app.py"}, FAILURE),
            Call("read_file", {"path": "tests/test_app.py"}, "def test_total(): ..."),
            Call("edit_file", {"path": "src/app.py", "old": "+ 1", "new": ""}, "edited"),
            Call("read_file", {"path": "src/app.py"}, versions[1]),
            Call("run_tests", {"target": "tests/test_app.py"}, "1 passed"),
            Call("run_tests", {"target": "tests"}, "14 passed"),
            Answer("Fixed the off-by-one in total(); all 14 tests pass."),
        ),
    )


def _search_agent_paging() -> Trace:
    steps: list[Step] = [
        Call(
            "search",
            {"query": "otel genai semconv", "page": page},
            f"results {10 * page + 1}-{10 * page + 10}: ...",
        )
        for page in range(8)
    ]
    # "more results" with the same arguments, the list changing under it
    steps += [
        Call("search_more", {"cursor": "abc"}, f"{n} new results since last call")
        for n in (5, 3, 8, 2, 6)
    ]
    steps.append(Answer("The GenAI conventions name spans 'chat {model}' and 'execute_tool'."))
    return Trace("search agent paging through changing results", "ok", tuple(steps))


def _search_agent_stuck() -> Trace:
    steps: list[Step] = []
    for i in range(6):  # the same query, the same results, a different note each time
        steps += [
            Call("search", {"query": "loopobs  pricing", "limit": 10}, "no results"),
            Call("think", {"note": f"maybe try again ({i})"}, "ok"),
        ]
    return Trace("search agent repeating a fruitless query", "loop", tuple(steps))


def _polling_agent_progressing() -> Trace:
    steps: list[Step] = [
        Call("job_status", {"job_id": "build-7"}, f'{{"state":"running","progress":{p}}}')
        for p in range(0, 100, 8)
    ]
    steps += [
        Call("job_status", {"job_id": "build-7"}, '{"state":"done","progress":100}'),
        Answer("The build finished."),
    ]
    return Trace("polling agent watching a job progress", "ok", tuple(steps))


def _polling_agent_stuck() -> Trace:
    steps: list[Step] = [
        Call("job_status", {"job_id": "build-8"}, '{"state":"queued"}') for _ in range(12)
    ]
    return Trace("polling agent on a job stuck in the queue", "loop", tuple(steps))


def _polling_with_blips() -> Trace:
    # The state flips now and then: each change is progress and resets the count.
    states = ["queued", "queued", "running", "running", "queued", "running", "done"]
    steps: list[Step] = [Call("job_status", {"job_id": "b9"}, f'{{"state":"{s}"}}') for s in states]
    return Trace("polling agent seeing the state change", "ok", tuple(steps))


def _oscillation() -> Trace:
    steps: list[Step] = [Call("read_file", {"path": "README.md"}, "# loopobs")]
    for _ in range(4):
        steps += [
            Call("open_tab", {"url": "https://example.com/a"}, "page A"),
            Call("open_tab", {"url": "https://example.com/b"}, "page B"),
        ]
    return Trace("A→B oscillation between two pages", "loop", tuple(steps))


def _three_step_cycle() -> Trace:
    steps: list[Step] = []
    for _ in range(3):
        steps += [
            Call("git_status", {}, "modified: src/app.py"),
            Call("git_diff", {"path": "src/app.py"}, "-    return sum(xs) + 1"),
            Call("git_checkout", {"path": "src/app.py"}, "Updated 1 path"),
        ]
    return Trace("three-step cycle: status, diff, checkout", "loop", tuple(steps))


def _same_result_different_calls() -> Trace:
    steps: list[Step] = [
        Call("grep", {"pattern": p, "path": "src"}, "no matches")
        for p in ("TODO", "FIXME", "XXX", "HACK", "deprecated", "print(")
    ]
    steps.append(Answer("No leftover markers in src/."))
    return Trace("different greps, all without matches", "ok", tuple(steps))


def _rephrasing_answer() -> Trace:
    return Trace(
        "agent rephrasing the same final answer",
        "converged",
        (
            Answer("The capital of Australia is Canberra."),
            NewRun(),
            Answer("the capital of Australia is Canberra!"),
            NewRun(),
            Answer("Canberra is the capital of Australia."),
        ),
    )


def _evolving_answers() -> Trace:
    return Trace(
        "answers that build on each other",
        "ok",
        (
            Answer("Step 1: install the package with pip install loopobs."),
            NewRun(),
            Answer("Step 2: attach a PrometheusObserver and scrape /metrics on port 9464."),
            NewRun(),
            Answer("Step 3: import the Grafana dashboard from grafana/dashboards."),
            NewRun(),
            Answer("All three steps are done; the dashboard shows token rates per model."),
        ),
    )


def _long_answer_with_a_changed_figure() -> Trace:
    body = " ".join(f"finding{i}" for i in range(30))
    return Trace(
        "long reports differing in their figures",
        "ok",
        (
            Answer(f"Report: {body}. Latency p95 is 120 ms, errors 0.1 %, cost 3 USD."),
            NewRun(),
            Answer(f"Report: {body}. Latency p95 is 95 ms, errors 0.4 %, cost 7 USD."),
            NewRun(),
            Answer(f"Report: {body}. Latency p95 is 88 ms, errors 0.2 %, cost 9 USD."),
        ),
    )


TRACES: tuple[Trace, ...] = (
    _coding_agent_rereading(),
    _coding_agent_progressing(),
    _search_agent_paging(),
    _search_agent_stuck(),
    _polling_agent_progressing(),
    _polling_agent_stuck(),
    _polling_with_blips(),
    _oscillation(),
    _three_step_cycle(),
    _same_result_different_calls(),
    _rephrasing_answer(),
    _evolving_answers(),
    _long_answer_with_a_changed_figure(),
)


def verdict(trace: Trace) -> tuple[Verdict, list[str]]:
    """Play ``trace`` through the default detectors: the verdict and what fired."""
    driver = Driver(RepetitionDetector(), ConvergenceDetector())
    session = uuid.uuid4()
    driver.start_run(session)
    for step in trace.steps:
        if isinstance(step, Call):
            driver.call(step.tool, step.args, step.result)
        elif isinstance(step, Answer):
            driver.answer(step.text)
        else:
            driver.end_run()
            driver.start_run(session)
    driver.end_run()
    loops = driver.recorder.of("on_loop_detected")
    converged = driver.recorder.of("on_convergence_detected")
    fired = [f"{e.action} {e.pattern} ×{e.repetitions}" for e in loops]
    fired += [f"converged ×{e.consecutive} ({e.similarity:.2f})" for e in converged]
    if loops:
        return "loop", fired
    if converged:
        return "converged", fired
    return "ok", fired


@pytest.mark.parametrize("trace", TRACES, ids=[t.name for t in TRACES])
def test_trace_verdict(trace: Trace) -> None:
    """Each labelled trace gets its expected verdict."""
    got, fired = verdict(trace)
    assert got == trace.expected, fired


def test_precision_and_recall() -> None:
    """Over the whole labelled set: precision and recall of the detections, printed."""
    tp = fp = fn = tn = 0
    rows = []
    for trace in TRACES:
        got, fired = verdict(trace)
        positive, detected = trace.expected != "ok", got != "ok"
        if positive and detected and got == trace.expected:
            tp += 1
        elif detected:
            fp += 1
            fn += positive
        elif positive:
            fn += 1
        else:
            tn += 1
        rows.append(f"  {trace.name:<48} expected {trace.expected:<9} got {got:<9} {fired}")
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    print("\ndetector traces:\n" + "\n".join(rows))
    print(f"precision {precision:.2f}  recall {recall:.2f}  (tp {tp}, fp {fp}, fn {fn}, tn {tn})")
    assert (tp, fp, fn) == (6, 0, 0)
    assert tn == 7
    assert precision == recall == 1.0
