"""The detectors: quality on the labelled corpus, cost per tool call, memory per session.

Run: ``.venv/bin/python bench/bench_detectors.py`` (``--quick`` for fewer repeats and a
100,000-call memory run instead of 1,000,000).

*Quality*: every trace of ``tests/data/detection_corpus.jsonl`` (built by
``tests/detection_corpus/generate.py``) is played through fresh default detectors
(told the agents' workspace as ``path_roots``); printed are warn and stop precision
and recall and the latency to the first warning, in looping steps. The same for
traces drawn with another seed (``--seed``), held out while tuning.

*Cost*: a 1,000-call session (the calls of the corpus's long healthy sessions; and
the first 1,000 calls of the whole corpus, each trace cut at its first stop as the
loop would end it, so warnings and stops included) goes through the
repetition detector's two hooks, ``on_tool_call_received`` and ``on_tool_post``,
with contexts built beforehand as the loop builds them (the raw result hash
included). Each row is the CPU time per call (``time.process_time``, best of
15 sessions, measured in turns with the baseline, so other processes on a shared
machine count as little as they can), and its ratio to the baseline fingerprint
``blake2b(json.dumps(args, sort_keys=True))`` of the same calls' arguments, measured
in the same process; and, where git can show it, the previous detector (commit
``4a00e26``: a 50-call window, no normalisation) on the same calls. The target is
≤ 10 µs per call.

*Memory*: one session through many calls; the sizes of its state at checkpoints
(bounded by ``memory`` and ``2 × max_period``, whatever the count) and the RSS.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import statistics
import subprocess
import sys
import time
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests/ too

from loopobs import ConvergenceDetector, RepetitionDetector, ResponseContext
from loopobs.contract.events import ToolCallReceivedContext, ToolPostContext
from loopobs.contract.hashing import result_hash
from loopobs.detectors import Normaliser
from tests.detection_corpus import generate
from tests.detection_corpus.harness import WORKSPACE, Scores, Trace, evaluate, load

TARGET_NS = 10_000.0
PREVIOUS = "4a00e26"
"""The commit whose detector (50-call window, no normalisation) the cost rows compare with."""

_Calls = list[tuple[ToolCallReceivedContext, ToolPostContext]]


@dataclass(frozen=True)
class Row:
    """One benchmark result."""

    name: str
    ns_per_op: float
    baseline_ns: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """``ns_per_op`` over the baseline of the same calls."""
        return None if self.baseline_ns is None else self.ns_per_op / self.baseline_ns


# -- quality -------------------------------------------------------------------------------


def quality(traces: Sequence[Trace], label: str) -> tuple[Scores, list[str]]:
    """Scores on ``traces`` and printable lines per class."""
    scores, outcomes = evaluate(traces)
    by_class: dict[str, list[int]] = {}
    for o in outcomes:
        right = (o.trace.label == "ok") != bool(o.detections)
        by_class.setdefault(f"{o.trace.label:9} {o.trace.cls}", []).append(int(right))
    lines = [
        f"{label}: {len(traces)} traces",
        f"  warn precision {scores.warn_precision:.3f}  recall {scores.warn_recall:.3f}   "
        f"stop precision {scores.stop_precision:.3f}  recall {scores.stop_recall:.3f}   "
        f"median latency to warn {scores.median_latency:g} looping steps "
        f"(p90 {_p90(scores.latencies)})",
        f"  {scores.counts}",
    ]
    lines += [f"    {cls:32} {sum(v)}/{len(v)} right" for cls, v in sorted(by_class.items())]
    return scores, lines


def _p90(values: Sequence[int]) -> str:
    if not values:
        return "n/a"
    return f"{sorted(values)[int(0.9 * (len(values) - 1))]}"


# -- cost ----------------------------------------------------------------------------------


def session_calls(traces: Sequence[Trace], limit: int = 1000) -> _Calls:
    """The first ``limit`` tool calls of ``traces`` as one session's contexts."""
    run = uuid.uuid4()
    out: _Calls = []
    for trace in traces:
        for step in trace.steps:
            if "call" not in step or len(out) == limit:
                continue
            i, t = len(out), int(step["t"] * 1e9)
            out.append(
                (
                    ToolCallReceivedContext(
                        run_id=run,
                        time_ns=t,
                        turn=0,
                        tool=step["call"],
                        tool_call_id=f"c{i}",
                        input=step["args"],
                    ),
                    ToolPostContext(
                        run_id=run,
                        time_ns=t,
                        turn=0,
                        tool=step["call"],
                        tool_call_id=f"c{i}",
                        result_hash=result_hash(step["result"]),
                        result=step["result"],
                        is_error=bool(step.get("error")),
                        duration_ms=step["duration"] * 1000.0,
                    ),
                )
            )
    return out


def cpu_ns_per_call(fn: Callable[[], object], calls: int, repeats: int) -> float:
    """Best CPU time of ``fn`` (one whole session) over ``repeats``, per call."""
    return cpu_ns_interleaved([fn], calls, repeats)[0]


def cpu_ns_interleaved(
    fns: Sequence[Callable[[], object]], calls: int, repeats: int
) -> list[float]:
    """Best CPU time per call of each of ``fns``, measured in turns (one session of each per
    round), so the baseline and the detectors see the same load on a shared machine."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - start)
    return [b / calls * 1e9 for b in best]


def run_session(calls: _Calls) -> Callable[[], object]:
    """One session through a fresh detector, as the loop would feed it."""

    def one() -> None:
        det = RepetitionDetector(normaliser=Normaliser(path_roots=(WORKSPACE,)))
        received, post = det.on_tool_call_received, det.on_tool_post
        for r, p in calls:
            received(r)
            post(p)

    return one


def fingerprint(calls: _Calls) -> Callable[[], object]:
    """The baseline: the common tool-args fingerprint, json.dumps(sort_keys) + blake2b."""

    def one() -> None:
        for r, _ in calls:
            hashlib.blake2b(json.dumps(r.input, sort_keys=True).encode(), digest_size=8).digest()

    return one


def previous_detector() -> Callable[[], Any] | None:
    """The repetition detector as of :data:`PREVIOUS`, loaded from git (``None`` without git)."""
    root = Path(__file__).resolve().parents[1]
    sources = {}
    for name in ("hashing", "detectors"):
        try:
            sources[name] = subprocess.run(
                ["git", "show", f"{PREVIOUS}:loopobs/core/{name}.py"],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
                timeout=30,
            ).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    modules = {}
    for name in ("hashing", "detectors"):
        module = types.ModuleType(f"_previous_{name}")
        sys.modules[module.__name__] = module
        # Its own hashing module, and the event field renamed since (call_id).
        code = (
            sources[name]
            .replace("from loopobs.contract.hashing import", "from _previous_hashing import")
            .replace("ctx.call_id", "ctx.tool_call_id")
        )
        exec(compile(code, f"{PREVIOUS}:{name}.py", "exec"), module.__dict__)
        modules[name] = module
    factory: Callable[[], Any] = modules["detectors"].RepetitionDetector
    return factory


def run_previous(factory: Callable[[], Any], calls: _Calls) -> Callable[[], object]:
    """One session through the previous detector."""

    def one() -> None:
        det = factory()
        received, post = det.on_tool_call_received, det.on_tool_post
        for r, p in calls:
            received(r)
            post(p)

    return one


def cost_rows(traces: Sequence[Trace], repeats: int) -> list[Row]:
    rows = []
    previous = previous_detector()
    healthy = [
        t
        for t in traces
        if t.cls == "long_sessions" and "coding" not in t.name and "healthy" in t.name
    ]
    # The corpus as the loop would run it: each trace ends at its first stop.
    _, outcomes = evaluate(traces)
    played = [
        Trace(
            o.trace.name,
            o.trace.cls,
            o.trace.label,
            o.trace.steps[: (o.first_stop + 1) if o.first_stop is not None else None],
        )
        for o in outcomes
    ]
    for name, calls, note in (
        ("1,000-call healthy session", session_calls(healthy), "no detection"),
        ("1,000-call corpus stream", session_calls(played), "runaways until their stop"),
    ):
        fns = [fingerprint(calls), run_session(calls)]
        if previous is not None:
            fns.append(run_previous(previous, calls))
        base, ns, *old = cpu_ns_interleaved(fns, len(calls), repeats)
        rows.append(Row(f"baseline fingerprint, {name}", base, base))
        if old:
            rows.append(Row(f"previous detector ({PREVIOUS}), {name}", old[0], base))
        rows.append(Row(f"repetition detector, {name}", ns, base, note))
    return rows


def answer_rows(repeats: int) -> list[Row]:
    rows = []
    for words in (50, 500):
        run = uuid.uuid4()
        texts = [
            " ".join(f"word{(i + j) % (words * 2)}" for j in range(words)) + "." for i in range(2)
        ]
        ctxs = [ResponseContext(run_id=run, time_ns=i, turn=0, text=t) for i, t in enumerate(texts)]

        def one(ctxs: list[ResponseContext] = ctxs) -> None:
            det = ConvergenceDetector()
            for _ in range(50):
                det.on_response(ctxs[0])
                det.on_response(ctxs[1])

        rows.append(
            Row(
                f"final answer, {words} words",
                cpu_ns_per_call(one, 100, repeats),
                note="sketch + compare with the last 6",
            )
        )
    return rows


# -- memory --------------------------------------------------------------------------------


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory_rows(total: int) -> list[Row]:
    """One session through ``total`` distinct-ish calls: state sizes at checkpoints."""
    det = RepetitionDetector()
    run = uuid.uuid4()
    rows = []
    done = 0
    for checkpoint in sorted({1_000, 10_000, total // 10, total}):
        for i in range(done, checkpoint):
            det.on_tool_call_received(
                ToolCallReceivedContext(
                    run_id=run,
                    time_ns=i,
                    turn=0,
                    tool="read_file",
                    tool_call_id=f"c{i}",
                    input={"path": f"src/file_{i % 5003}.py"},
                )
            )
            det.on_tool_post(
                ToolPostContext(
                    run_id=run,
                    time_ns=i,
                    turn=0,
                    tool="read_file",
                    tool_call_id=f"c{i}",
                    result=f"content {i % 7}",
                )
            )
        done = checkpoint
        [state] = det._sessions.values()
        sizes = (
            f"ops {len(state.ops)}, calls {len(state.calls)}, same {len(state.same)}, "
            f"written {len(state.written)}, ring {len(state.ring)}, "
            f"pending {sum(len(p) for p in det._pending.values())}"
        )
        rows.append(
            Row(f"memory after {checkpoint:,} calls: RSS {_rss_kib():,} KiB", 0.0, note=sizes)
        )
    return rows


def print_table(rows: list[Row]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'benchmark':<{width}}  {'CPU ns/op':>9}  {'× baseline':>10}  note")
    for r in rows:
        ns = f"{r.ns_per_op:9,.0f}" if r.ns_per_op else f"{'':>9}"
        ratio = f"{r.ratio:10.2f}" if r.ratio is not None else f"{'':>10}"
        print(f"{r.name:<{width}}  {ns}  {ratio}  {r.note}")
    for r in rows:
        if r.name.startswith("repetition detector, 1,000-call"):
            verdict = "meets" if r.ns_per_op <= TARGET_NS else "misses"
            print(
                f"{r.name}: {r.ns_per_op / 1000:.2f} µs per call "
                f"({r.ratio:.2f}× the fingerprint), {verdict} the "
                f"{TARGET_NS / 1000:.0f} µs target"
            )


def main(argv: list[str] | None = None) -> list[Row]:
    """Print the quality figures and the cost table; return the cost rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--seed", type=int, default=2021, help="seed of the held-out traces")
    args = parser.parse_args(argv)
    traces = load()
    for label, sample in (
        ("corpus", traces),
        (f"held out (seed {args.seed})", generate.build(seed=args.seed)),
    ):
        for line in quality(sample, label)[1]:
            print(line)
    print()
    repeats = 3 if args.quick else 15
    # The corpus and the outcomes above are the bench's own data: frozen out of the
    # garbage collector, so a collection during a timed session scans what the session
    # allocated, not the bench's fixtures.
    gc.collect()
    gc.freeze()
    rows = cost_rows(traces, repeats) + answer_rows(repeats)
    rows += memory_rows(100_000 if args.quick else 1_000_000)
    print_table(rows)
    medians = [r.ns_per_op for r in rows if r.name.startswith("repetition")]
    print(f"\nmedian of the session rows: {statistics.median(medians) / 1000:.2f} µs per call")
    return rows


if __name__ == "__main__":
    main()
