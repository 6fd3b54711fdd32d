"""The default detectors on trajectories that real agents wrote: quality and cost.

Run: ``.venv/bin/python bench/bench_real_trajectories.py`` (``--quick``: fewer timing
repeats; ``--path FILE`` or ``LOOPOBS_REAL_TRAJECTORIES=FILE`` for another set, e.g. the
held-out one). The data is third-party and never copied into the repository: it is read
from ``../shared/data/real-trajectories/dev.jsonl`` beside the repository, and the
script says so and skips when it is absent.

*Quality*, as the set's README says it is judged: each trajectory is fed in order
through the public event contract (``tests/detection_corpus/harness.play``: hand-emitted
events into an ``ObserverSet``) into fresh default detectors, ending at the first stop
as ``AgentLoop`` would end the run. **warn** = any detection, **stop** = a detection
with action ``stop``; precision and recall over the ``runaway`` records; the productive
runs warned and stopped, by id; latency in ops (the detection's op − ``loop_start`` + 1,
both 1-based); and, per signal, how many productive runs it touched.

*Cost*: CPU time (``time.process_time``, best of the repeats) per tool call through the
repetition detector's two hooks, and per final answer through the convergence
detector's ``on_response``, over every call and answer of the set, with the contexts
built beforehand as the loop builds them (the raw result hash included). Each
trajectory goes through the whole of it, detections and all. Targets: ≤ 15 µs per
tool call, ≤ 100 µs per final answer. Parsed command lines and masked results' keys are
remembered process-wide (bounded), so the repeats (and the judging before them) see them
again, as a long-lived process sees the commands its runs share; the per-call figure with
those caches cleared before each repeat (every line and result new) is printed as well, and
so is the per-answer figure with the process-wide word hashes cleared.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shlex
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/ too

from loopobs.contract.events import ResponseContext, ToolCallReceivedContext, ToolPostContext
from loopobs.contract.hashing import result_hash
from loopobs.detectors import COMPILED, ConvergenceDetector, RepetitionDetector, clear_caches
from tests.detection_corpus.harness import Outcome, Trace, play

ENV_VAR = "LOOPOBS_REAL_TRAJECTORIES"
DEFAULT_PATH = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "real-trajectories" / "dev.jsonl"
)
CALL_TARGET_NS = 15_000.0
ANSWER_TARGET_NS = 100_000.0
STEP_GAP_S = 2.0
"""The records carry no times: one op every 2 s, each call 0.1 s (never a polling pace)."""


@dataclass(frozen=True)
class Record:
    """One labelled real trajectory."""

    id: str
    runaway: bool
    loop_start: int | None
    borderline: bool
    ops: tuple[dict[str, Any], ...]


def data_path(given: str | None = None) -> Path:
    """The set to read: ``--path``, else the environment variable, else the dev set."""
    return Path(given or os.environ.get(ENV_VAR) or DEFAULT_PATH)


def load(path: Path) -> list[Record]:
    """Every record of ``path`` (JSON lines, the README's schema)."""
    records = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                records.append(
                    Record(
                        r["id"],
                        r["label"] == "runaway",
                        r.get("loop_start"),
                        bool(r.get("borderline")),
                        tuple(r["ops"]),
                    )
                )
    return records


def as_trace(record: Record) -> Trace:
    """The record in the corpus player's step format: op i is step i - 1."""
    steps: list[dict[str, Any]] = []
    for i, op in enumerate(record.ops):
        t = i * STEP_GAP_S
        if op["op"] == "call":
            steps.append(
                {
                    "call": op["tool"],
                    "args": op.get("args") or {},
                    "result": op.get("result") or "",
                    "t": t,
                    "duration": 0.1,
                }
            )
        else:
            steps.append({"answer": op.get("text") or "", "t": t})
    return Trace(
        record.id, "real", "loop" if record.runaway else "ok", tuple(steps), record.loop_start
    )


@dataclass
class Quality:
    """The figures of one pass over the set."""

    warn_p: float
    warn_r: float
    stop_p: float
    stop_r: float
    runaways: int
    productive: int
    productive_warned: list[str] = field(default_factory=list)
    productive_stopped: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    latencies: list[int] = field(default_factory=list)
    stop_latencies: list[int] = field(default_factory=list)


def _ratio(num: int, den: int) -> float:
    return num / den if den else 1.0


def judge(records: Sequence[Record]) -> tuple[Quality, list[Outcome]]:
    """Play every record through fresh default detectors; the figures and the outcomes."""
    outcomes = [play(as_trace(r)) for r in records]
    tp = fp = stp = sfp = 0
    runaways = sum(r.runaway for r in records)
    q = Quality(0, 0, 0, 0, runaways, len(records) - runaways)
    for r, o in zip(records, outcomes, strict=True):
        if o.detections:
            if r.runaway:
                tp += 1
                if r.loop_start is not None:
                    q.latencies.append(o.detections[0][0] + 1 - r.loop_start + 1)
            else:
                fp += 1
                q.productive_warned.append(r.id)
        elif r.runaway:
            q.missed.append(r.id)
        if o.first_stop is not None:
            if r.runaway:
                stp += 1
                if r.loop_start is not None:
                    q.stop_latencies.append(o.first_stop + 1 - r.loop_start + 1)
            else:
                sfp += 1
                q.productive_stopped.append(r.id)
    q.warn_p, q.warn_r = _ratio(tp, tp + fp), _ratio(tp, runaways)
    q.stop_p, q.stop_r = _ratio(stp, stp + sfp), _ratio(stp, runaways)
    return q, outcomes


_Op = dict[str, Any]


def _command_op(op: _Op) -> bool:
    return op["op"] == "call" and isinstance((op.get("args") or {}).get("command"), str)


def _renamed(tool: str) -> Any:
    def respell(op: _Op) -> _Op:
        if not _command_op(op) or op["tool"] not in ("bash", "python"):
            return op
        args = {k: v for k, v in op["args"].items() if k != "program"}
        return {**op, "tool": tool, "args": args}

    return respell


def _cmd_argument(op: _Op) -> _Op:
    if not _command_op(op) or op["tool"] not in ("bash", "python"):
        return op
    args = {k: v for k, v in op["args"].items() if k not in ("program", "command")}
    return {**op, "tool": "shell", "args": {"cmd": op["args"]["command"], **args}}


def _wrapped(wrap: Any) -> Any:
    def respell(op: _Op) -> _Op:
        if not _command_op(op) or op["tool"] not in ("bash", "python"):
            return op
        return {**op, "args": {**op["args"], "command": wrap(op["args"]["command"])}}

    return respell


_SAYINGS: Final = (
    "Run the command",
    "Check what this prints",
    "Try it once more",
    "See whether the change worked",
    "Look at the output again",
)


def _resent(tool: str, added: Any) -> Any:
    """Shell calls sent to the tool ``tool``, the line beside the arguments
    ``added(n)`` gives the ``n``-th call (counted per spelling, so every replay is the same)."""

    def respell(op: _Op) -> _Op:
        if not _command_op(op) or op["tool"] not in ("bash", "python"):
            return op
        args = {"command": op["args"]["command"], **added(next(calls))}
        return {**op, "tool": tool, "args": args}

    calls = itertools.count()
    return respell


def _narrated(tool: str, **extra: str) -> Any:
    """Shell calls as Claude Code (``Bash``) and Gemini CLI (``run_shell_command``) send
    them: beside the line, a ``description`` of why it runs, worded anew each call (a
    re-run line is said otherwise), and ``extra`` arguments (a working directory)."""
    return _resent(tool, lambda n: {"description": _SAYINGS[n % len(_SAYINGS)], **extra})


def _rising_timeout() -> Any:
    """Shell calls as OpenHands sends them, each with another ``timeout`` (as an agent gives
    a hung command more time: 30 s, 60 s … 240 s, then again)."""
    return _resent("execute_bash", lambda n: {"timeout": 30 * (1 + n % 8)})


def _double_quoted(command: str) -> str:
    """``bash -lc "…"``: the line in double quotes, its backslashes and quotes escaped (a
    heredoc inside stays the script's)."""
    return 'bash -lc "' + command.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _editor_renamed(op: _Op) -> _Op:
    if op["op"] != "call" or not op["tool"].startswith("str_replace_editor"):
        return op
    return {**op, "tool": op["tool"].replace("str_replace_editor", "fs", 1)}


_NOT_FOUND = re.compile(r"No replacement was performed, old_str `(.*?)` did not appear", re.DOTALL)
_NOT_UNIQUE = re.compile(
    r"No replacement was performed\. Multiple occurrences of old_str `(.*?)`", re.DOTALL
)


def _as_claude_code(op: _Op) -> _Op:
    """An OpenHands editor call as Claude Code sends it: ``Edit`` (``file_path``,
    ``old_string``, ``new_string``), ``Read`` (``file_path``, ``offset``, ``limit``) and
    ``Write`` (``file_path``, ``content``), refusals worded as its own (in the text only:
    a log replayed without ``is_error``)."""
    if op["op"] != "call" or not op["tool"].startswith("str_replace_editor"):
        return op
    args, result = op["args"], op.get("result") or ""
    sub = args.get("command")
    path = args.get("path")
    if sub == "view":
        new: dict[str, Any] = {"file_path": path}
        span = args.get("view_range")
        if isinstance(span, list) and len(span) == 2 and all(isinstance(n, int) for n in span):
            new.update(offset=span[0], limit=max(1, span[1] - span[0] + 1))
        return {**op, "tool": "Read", "args": new}
    if sub == "create":
        return {
            **op,
            "tool": "Write",
            "args": {"file_path": path, "content": args.get("file_text")},
        }
    if sub not in ("str_replace", "insert"):
        return op
    new = {
        "file_path": path,
        # Claude Code has no insert: the new line replaces nothing.
        "old_string": "" if sub == "insert" else args.get("old_str"),
        "new_string": args.get("new_str"),
    }
    missing, twice = _NOT_FOUND.search(result), _NOT_UNIQUE.search(result)
    if missing is not None:
        result = (
            "<tool_use_error>String to replace not found in file.\n"
            f"String: {missing.group(1)}</tool_use_error>"
        )
    elif twice is not None:
        result = (
            "<tool_use_error>Found 2 matches of the string to replace, but replace_all is "
            f"false.\nString: {twice.group(1)}</tool_use_error>"
        )
    return {**op, "tool": "Edit", "args": new, "result": result}


_RETURNCODE = re.compile(r"<returncode>(\d+)</returncode>\n<output>\n(.*)</output>\s*$", re.DOTALL)


def _exit_code_as(fmt: str) -> Any:
    """Results in mini-SWE-agent's ``<returncode>`` wrapping printed as another harness
    prints a command's exit code and output (``fmt``: ``{rc}`` and ``{out}``)."""

    def respell(op: _Op) -> _Op:
        m = _RETURNCODE.match(op.get("result") or "") if op["op"] == "call" else None
        if m is None:
            return op
        return {**op, "result": fmt.format(rc=int(m.group(1)), out=m.group(2))}

    return respell


SPELLINGS: dict[str, Any] = {
    "shell tool named execute_bash": _renamed("execute_bash"),
    "shell tool named terminal": _renamed("terminal"),
    "shell tool named mytool (known by its arguments)": _renamed("mytool"),
    "the line in a cmd argument of a shell tool": _cmd_argument,
    "every line as bash -lc '…' (Codex-style)": _wrapped(lambda c: "bash -lc " + shlex.quote(c)),
    'every line as bash -lc "…" (double quotes)': _wrapped(_double_quoted),
    "every line after cd /testbed &&": _wrapped(lambda c: "cd /testbed && " + c),
    "every line under timeout 60": _wrapped(lambda c: "timeout 60 " + c),
    "shell calls as Claude Code sends them (Bash, a description worded anew each call)": (
        _narrated("Bash")
    ),
    "shell calls as Gemini CLI sends them (run_shell_command, description, directory)": (
        _narrated("run_shell_command", directory="/testbed")
    ),
    "shell calls as OpenHands sends them (execute_bash, a timeout that changes each call)": (
        _rising_timeout()
    ),
    "editor named fs (known by its arguments)": _editor_renamed,
    "editor calls as Claude Code sends them (Edit, Read, Write)": _as_claude_code,
    "exit codes as OpenHands prints them": _exit_code_as(
        "{out}\n[The command completed with exit code {rc}.]"
    ),
    "exit codes as Codex prints them": _exit_code_as(
        "Exit code: {rc}\nWall time: 0.2 seconds\nOutput:\n{out}"
    ),
}
"""Other spellings of the same calls and results, as other agents, frameworks and
harnesses send them: a rule that holds on the behaviour, not on these records' names and
formats, gives the same figures."""


def respelled(records: Sequence[Record], spelling: Any) -> list[Record]:
    """``records`` with every op passed through ``spelling`` (one of :data:`SPELLINGS`)."""
    return [replace(r, ops=tuple(spelling(op) for op in r.ops)) for r in records]


def collect_signals(record: Record) -> list[tuple[str, str]]:
    """(signal, action) of each detection on ``record``, in order, until the first stop."""
    from loopobs.contract.events import ConvergenceDetectedContext, LoopDetectedContext
    from loopobs.contract.observer import LoopObserver

    class Signals(LoopObserver):
        name = "bench.signals"

        def __init__(self) -> None:
            self.seen: list[tuple[str, str]] = []

        def on_loop_detected(self, ctx: LoopDetectedContext) -> None:
            self.seen.append((ctx.signal or "loop", ctx.action))

        def on_convergence_detected(self, ctx: ConvergenceDetectedContext) -> None:
            self.seen.append((f"convergence:{ctx.signal or 'same_answer'}", ctx.action))

    from tests.detection_corpus.harness import default_detectors

    listener = Signals()
    play(as_trace(record), [listener, *default_detectors()])
    return listener.seen


# -- cost ------------------------------------------------------------------------------------

_Calls = list[tuple[ToolCallReceivedContext, ToolPostContext]]


def _contexts(records: Sequence[Record]) -> tuple[list[_Calls], list[list[ResponseContext]]]:
    calls: list[_Calls] = []
    answers: list[list[ResponseContext]] = []
    for r in records:
        run = uuid.uuid4()
        mine: _Calls = []
        said: list[ResponseContext] = []
        for i, op in enumerate(r.ops):
            t = int(i * STEP_GAP_S * 1e9)
            if op["op"] == "call":
                text = op.get("result") or ""
                call_id = f"call_{i}"
                mine.append(
                    (
                        ToolCallReceivedContext(
                            run_id=run,
                            time_ns=t,
                            turn=0,
                            tool=op["tool"],
                            tool_call_id=call_id,
                            input=op.get("args") or {},
                        ),
                        ToolPostContext(
                            run_id=run,
                            time_ns=t + 100_000_000,
                            turn=0,
                            tool=op["tool"],
                            tool_call_id=call_id,
                            result_hash=result_hash(text),
                            result=text,
                            duration_ms=100.0,
                            outcome="output",
                        ),
                    )
                )
            else:
                said.append(
                    ResponseContext(run_id=run, time_ns=t, turn=0, text=op.get("text") or "")
                )
        calls.append(mine)
        answers.append(said)
    return calls, answers


def feed_calls(detectors: Sequence[Any], calls: Sequence[_Calls]) -> int:
    """CPU ns to feed each session of ``calls`` to its detector (one per session, in order:
    ``on_tool_call_received`` then ``on_tool_post`` for each call)."""
    start = time.process_time_ns()
    for detector, session in zip(detectors, calls, strict=True):
        received, post = detector.on_tool_call_received, detector.on_tool_post
        for pre, done in session:
            received(pre)
            post(done)
    return time.process_time_ns() - start


def time_calls(
    calls: Sequence[_Calls],
    repeats: int,
    samples: list[float] | None = None,
    first_sight: bool = False,
) -> float:
    """Best CPU ns per tool call over the whole set, fresh detectors each repeat (each
    repeat's figure appended to ``samples``, to show the noise). ``first_sight``: the
    process-wide caches (parsed command lines and their effects, masked results' keys:
    :func:`loopobs.detectors.clear_caches`) are cleared before
    each repeat, so every line is parsed and every result masked as if never seen."""
    n = sum(len(c) for c in calls)
    best = float("inf")
    for _ in range(repeats):
        detectors = [RepetitionDetector() for _ in calls]
        if first_sight:
            clear_caches()
        elapsed = feed_calls(detectors, calls)
        best = min(best, elapsed)
        if samples is not None and n:
            samples.append(elapsed / n)
    return best / n if n else 0.0


def time_answers(
    answers: Sequence[list[ResponseContext]],
    repeats: int,
    samples: list[float] | None = None,
    first_sight: bool = False,
) -> float:
    """Best CPU ns per final answer over the whole set, fresh detectors each repeat (each
    repeat's figure appended to ``samples``). ``first_sight``: the process-wide word hashes
    are cleared before each repeat, so every answer's vocabulary is hashed anew."""
    n = sum(len(a) for a in answers)
    best = float("inf")
    for _ in range(repeats):
        detectors = [ConvergenceDetector() for _ in answers]
        if first_sight:
            clear_caches()
        start = time.process_time_ns()
        for detector, session in zip(detectors, answers, strict=True):
            respond = detector.on_response
            for ctx in session:
                respond(ctx)
        elapsed = time.process_time_ns() - start
        best = min(best, elapsed)
        if samples is not None and n:
            samples.append(elapsed / n)
    return best / n if n else 0.0


# -- report ----------------------------------------------------------------------------------


def _pct(values: Sequence[int]) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"median {statistics.median(ordered):g}, p90 {p90}, max {ordered[-1]}"


def _spread(samples: Sequence[float]) -> str:
    """The repeats' median and worst, in µs: how noisy the machine was."""
    if not samples:
        return "no repeats"
    return (
        f"median {statistics.median(samples) / 1000:.1f}, "
        f"worst {max(samples) / 1000:.1f} of {len(samples)} repeats"
    )


def main(argv: Sequence[str] | None = None) -> dict[str, Any] | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing repeats")
    parser.add_argument("--path", help=f"a JSONL set (default: ${ENV_VAR} or {DEFAULT_PATH})")
    parser.add_argument("--verbose", action="store_true", help="every detection of every run")
    args = parser.parse_args(argv)
    path = data_path(args.path)
    if not path.is_file():
        print(
            f"skipped: no real trajectories at {path} (set {ENV_VAR} or --path to a "
            f"JSONL set; the data is third-party and is not in the repository)"
        )
        return None
    records = load(path)
    q, outcomes = judge(records)
    print(
        f"{path.name}: {len(records)} real trajectories, {q.runaways} runaway, "
        f"{q.productive} productive\n"
    )
    print("| | warn P | warn R | stop P | stop R | productive warned / stopped |")
    print("|---|---:|---:|---:|---:|---:|")
    print(
        f"| default detectors | {q.warn_p:.2f} | {q.warn_r:.2f} | {q.stop_p:.2f} | "
        f"{q.stop_r:.2f} | {len(q.productive_warned)} / {len(q.productive_stopped)} "
        f"of {q.productive} |\n"
    )
    print(f"productive runs warned: {', '.join(q.productive_warned) or 'none'}")
    print(f"productive runs stopped: {', '.join(q.productive_stopped) or 'none'}")
    print(f"runaways missed: {', '.join(q.missed) or 'none'}")
    print(f"latency to warn, ops from loop_start: {_pct(q.latencies)}")
    print(f"latency to stop, ops from loop_start: {_pct(q.stop_latencies)}\n")

    per_signal: dict[str, list[set[str]]] = {}
    for r in records:
        for signal, action in collect_signals(r):
            sets = per_signal.setdefault(signal, [set(), set(), set(), set()])
            base = 2 if r.runaway else 0
            sets[base].add(r.id)
            if action == "stop":
                sets[base + 1].add(r.id)
    print(
        "| signal | productive warned | productive stopped | runaways warned | runaways stopped |"
    )
    print("|---|---:|---:|---:|---:|")
    for signal, sets in sorted(per_signal.items()):
        print(f"| {signal} | " + " | ".join(str(len(s)) for s in sets) + " |")
    print(
        "\nthe same calls spelled as other agents send them (tools renamed, lines wrapped, "
        "exit codes printed otherwise):\n"
    )
    print("| spelling | warn P | warn R | stop P | stop R | productive warned / stopped |")
    print("|---|---:|---:|---:|---:|---:|")
    as_is = (q.warn_p, q.warn_r, q.stop_p, q.stop_r, q.productive_warned, q.productive_stopped)
    unchanged = []
    for name, spelling in SPELLINGS.items():
        v, _ = judge(respelled(records, spelling))
        figures = (
            v.warn_p,
            v.warn_r,
            v.stop_p,
            v.stop_r,
            v.productive_warned,
            v.productive_stopped,
        )
        if figures == as_is:
            unchanged.append(name)
        print(
            f"| {name} | {v.warn_p:.2f} | {v.warn_r:.2f} | {v.stop_p:.2f} | {v.stop_r:.2f} | "
            f"{len(v.productive_warned)} / {len(v.productive_stopped)} |"
        )
    print(f"\nspellings judged as the records are: {len(unchanged)} of {len(SPELLINGS)}")
    if args.verbose:
        for r, o in zip(records, outcomes, strict=True):
            print(f"\n{'RUNAWAY' if r.runaway else 'ok     '} {r.id} loop_start={r.loop_start}")
            for step, kind, action, reason in o.detections:
                print(f"    op {step + 1} {kind} {action}: {reason[:160]}")

    calls, answers = _contexts(records)
    repeats = 3 if args.quick else 15
    call_samples: list[float] = []
    answer_samples: list[float] = []
    call_ns = time_calls(calls, repeats, call_samples)
    first_ns = time_calls(calls, repeats, first_sight=True)
    answer_ns = time_answers(answers, repeats, answer_samples)
    first_answer_ns = time_answers(answers, repeats, first_sight=True)
    n_calls = sum(len(c) for c in calls)
    n_answers = sum(len(a) for a in answers)
    sizes = sorted(
        len(op.get("result") or "") for r in records for op in r.ops if op["op"] == "call"
    )
    print(
        f"\ncost (CPU time, best of {repeats}; results median {statistics.median(sizes):g} "
        f"chars, max {sizes[-1]}; detectors "
        + (
            "compiled with mypyc):"
            if COMPILED
            else "interpreted, make bench-compiled for compiled):"
        )
    )
    print(
        f"  per tool call:    {call_ns / 1000:.1f} µs over {n_calls} calls, every line and "
        f"result seen before (target ≤ {CALL_TARGET_NS / 1000:.0f} µs; {_spread(call_samples)})"
    )
    print(
        f"  per tool call, every command line and result seen for the first time "
        f"(process-wide caches cleared): {first_ns / 1000:.1f} µs "
        f"({'within' if first_ns <= CALL_TARGET_NS else 'over'} the "
        f"{CALL_TARGET_NS / 1000:.0f} µs target)"
    )
    print(
        f"  per final answer: {answer_ns / 1000:.1f} µs over {n_answers} answers "
        f"(target ≤ {ANSWER_TARGET_NS / 1000:.0f} µs; {_spread(answer_samples)})"
    )
    print(
        f"  per final answer, every word hashed anew (process-wide word hashes cleared): "
        f"{first_answer_ns / 1000:.1f} µs"
    )
    return {
        "warn_precision": q.warn_p,
        "warn_recall": q.warn_r,
        "stop_precision": q.stop_p,
        "stop_recall": q.stop_r,
        "productive_warned": q.productive_warned,
        "productive_stopped": q.productive_stopped,
        "call_ns": call_ns,
        "first_sight_call_ns": first_ns,
        "answer_ns": answer_ns,
        "first_sight_answer_ns": first_answer_ns,
        "signals": {k: [len(s) for s in v] for k, v in per_signal.items()},
        "spellings_unchanged": unchanged,
        "counts": Counter(r.runaway for r in records),
    }


if __name__ == "__main__":
    main(sys.argv[1:])
