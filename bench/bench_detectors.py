"""Cost of the repetition and convergence detectors, against bare hashing in this process.

Run: ``.venv/bin/python bench/bench_detectors.py`` (``--quick`` for fewer repeats
and a 100,000-call memory run instead of 1,000,000).

A *tool call* row times what the detector adds to one call: the
``on_tool_call_received`` hook (canonical JSON of the arguments, BLAKE2b, the
pattern label), the result hash (``result_hash`` of the result text, which the
loop computes once for ``ToolPostContext`` anyway) and the ``on_tool_post`` hook
(window update and checks). Contexts are built beforehand, as the loop builds
them for every observer. Rows give the median ns per call over several repeats
and the ratio to the baseline fingerprint ``blake2b(json.dumps(args,
sort_keys=True))`` of the same arguments, measured in the same run. The target
is ≤ 5 µs per tool call on 200-byte arguments. The memory rows run one session
through many calls and report the resident set size and the detector's state.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import timeit
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loopobs import ConvergenceDetector, RepetitionDetector, ResponseContext
from loopobs.core.events import ToolCallReceivedContext, ToolPostContext
from loopobs.core.hashing import result_hash

TARGET_NS = 5_000.0


@dataclass(frozen=True)
class Row:
    """One benchmark result."""

    name: str
    ns_per_op: float
    baseline_ns: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        """``ns_per_op`` over the baseline fingerprint of the same arguments."""
        return None if self.baseline_ns is None else self.ns_per_op / self.baseline_ns


def measure(fn: Callable[[], object], number: int, repeats: int) -> float:
    """Median ns per call of ``fn`` over ``repeats`` runs of ``number`` calls."""
    for _ in range(200):
        fn()
    times = timeit.repeat(fn, number=number, repeat=repeats)
    return statistics.median(times) / number * 1e9


def arguments(size: int, i: int) -> dict[str, Any]:
    """Tool arguments of about ``size`` bytes as JSON, distinct per ``i``."""
    base: dict[str, Any] = {
        "path": f"/home/user/project/src/module_{i}/file_name.py",
        "start_line": 120 + i,
        "end_line": 180,
        "encoding": "utf-8",
        "follow_symlinks": True,
    }
    pad = size - len(json.dumps(base)) - len(', "pattern": ""')
    base["pattern"] = ("def \\w+\\(self, ctx\\) " * (size // 20 + 1))[: max(pad, 0)]
    return base


def _calls(size: int, distinct: int, *, changing: bool) -> list[tuple[Any, Any, str]]:
    run = uuid.uuid4()
    out = []
    for i in range(distinct):
        args = arguments(size, 0 if changing else i)
        text = (f"result {i} " + "x" * size)[:size]
        out.append((
            ToolCallReceivedContext(run_id=run, time_ns=i, turn=0, tool="read_file",
                                    tool_call_id=f"c{i}", input=args),
            ToolPostContext(run_id=run, time_ns=i, turn=0, tool="read_file",
                            tool_call_id=f"c{i}", result_hash=result_hash(text)),
            text,
        ))
    return out


def tool_call_fn(
    detector: RepetitionDetector, calls: list[tuple[Any, Any, str]], *, hash_result: bool = True
) -> Callable[[], object]:
    """One tool call per invocation, cycling through ``calls``."""
    received, post, n = detector.on_tool_call_received, detector.on_tool_post, len(calls)
    state = [0]

    def one() -> None:
        i = state[0]
        state[0] = i + 1 if i + 1 < n else 0
        recv_ctx, post_ctx, text = calls[i]
        received(recv_ctx)
        if hash_result:
            result_hash(text)
        post(post_ctx)

    return one


def answer_fn(detector: ConvergenceDetector, ctxs: list[ResponseContext]) -> Callable[[], object]:
    """One final answer per invocation, alternating between ``ctxs``."""
    state = [0]

    def one() -> None:
        state[0] ^= 1
        detector.on_response(ctxs[state[0]])

    return one


def fingerprint(args: dict[str, Any]) -> Callable[[], object]:
    """The baseline: the common tool-args fingerprint, json.dumps(sort_keys) + blake2b."""
    return lambda: hashlib.blake2b(
        json.dumps(args, sort_keys=True).encode(), digest_size=8
    ).digest()


def tool_rows(number: int, repeats: int) -> list[Row]:
    rows = []
    for size, label in ((200, "200 B"), (10_240, "10 KB")):
        base = measure(fingerprint(arguments(size, 1)), number, repeats)
        rows.append(Row(f"baseline fingerprint, {label} args", base, base))
        cases: list[tuple[str, list[tuple[Any, Any, str]], str]] = [
            ("distinct calls", _calls(size, 997, changing=False), "window churns, no detection"),
            ("one call repeated", _calls(size, 1, changing=False), "warn at 3, stop at 10, repeat"),
            ("polling, result changes", _calls(size, 997, changing=True),
             "progress reset each call"),
        ]
        for name, calls, note in cases:
            ns = measure(tool_call_fn(RepetitionDetector(), calls), number, repeats)
            rows.append(Row(f"tool call, {label} args+result, {name}", ns, base, note))
        calls = _calls(size, 997, changing=False)
        ns = measure(tool_call_fn(RepetitionDetector(), calls, hash_result=False), number, repeats)
        rows.append(Row(f"hooks only (result hash given), {label}", ns, base))
    return rows


def answer_rows(number: int, repeats: int) -> list[Row]:
    rows = []
    for words in (50, 500):
        run = uuid.uuid4()
        texts = [" ".join(f"word{(i + j) % (words * 2)}" for j in range(words)) + "."
                 for i in range(2)]
        ctxs = [ResponseContext(run_id=run, time_ns=i, turn=0, text=t)
                for i, t in enumerate(texts)]
        ns = measure(answer_fn(ConvergenceDetector(), ctxs), max(number // 20, 100), repeats)
        rows.append(Row(f"final answer, {words} words", ns, note="sketch + compare"))
    return rows


def _rss_kib() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def memory_rows(total: int) -> list[Row]:
    """One session through ``total`` calls: RSS and state sizes at checkpoints."""
    det = RepetitionDetector()
    calls = _calls(200, 5_003, changing=False)
    one = tool_call_fn(det, calls)
    rows = []
    done = 0
    for checkpoint in sorted({10_000, total // 10, total}):
        for _ in range(checkpoint - done):
            one()
        done = checkpoint
        [state] = det._sessions.values()
        sizes = (f"window {len(state.window)}, counts {len(state.counts)}, "
                 f"warned {len(state.warned)}, latest {len(state.latest)}, "
                 f"pending {sum(len(p) for p in det._pending.values())}")
        rows.append(Row(f"memory after {checkpoint:,} calls: RSS {_rss_kib():,} KiB",
                        0.0, note=sizes))
    return rows


def print_table(rows: list[Row]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'benchmark':<{width}}  {'ns/op':>9}  {'× baseline':>10}  note")
    for r in rows:
        ns = f"{r.ns_per_op:9,.0f}" if r.ns_per_op else f"{'':>9}"
        ratio = f"{r.ratio:10.2f}" if r.ratio is not None else f"{'':>10}"
        print(f"{r.name:<{width}}  {ns}  {ratio}  {r.note}")
    typical = next(r for r in rows if r.name == "tool call, 200 B args+result, distinct calls")
    verdict = "meets" if typical.ns_per_op <= TARGET_NS else "misses"
    print(f"\n200 B tool call: {typical.ns_per_op / 1000:.2f} µs, {verdict} the "
          f"{TARGET_NS / 1000:.0f} µs target")


def main(argv: list[str] | None = None) -> list[Row]:
    """Run every benchmark, print the table, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    args = parser.parse_args(argv)
    number, repeats = (2_000, 3) if args.quick else (20_000, 7)
    rows = tool_rows(number, repeats) + answer_rows(number, repeats)
    rows += memory_rows(100_000 if args.quick else 1_000_000)
    print_table(rows)
    return rows


if __name__ == "__main__":
    main()
