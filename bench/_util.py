"""Shared timing helpers for the bench scripts: best-of-N timeit, ratios, a plain table.

Method (as in ``shared/reference/perf-baselines.md``): the loop count is calibrated so one
repeat takes about ``target_s``; one untimed warm-up repeat, then ``repeats`` timed ones.
The garbage collector stays enabled. We report the best (min) and the median per-operation
time; read *min* as "what the code costs" and *median* as "what you will see". Differences
under ~15 % are noise on a shared machine, so compare ratios measured in one process.
"""

from __future__ import annotations

import gc
import statistics
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Timing", "fmt_ns", "fmt_ratio", "print_table", "time_callable", "time_stmt"]


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-operation time of one benchmark, in nanoseconds."""

    name: str
    best_ns: float
    median_ns: float
    loops: int


def _measure(name: str, timer: timeit.Timer, repeats: int, target_s: float) -> Timing:
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= target_s / 8 or number >= 1 << 30:
            break
        number *= 2 if elapsed > target_s / 80 else 10
    number = max(1, int(number * target_s / max(elapsed, 1e-9)))
    timer.timeit(number)  # warm-up, untimed
    per_op = [timer.timeit(number) / number * 1e9 for _ in range(repeats)]
    return Timing(name, min(per_op), statistics.median(per_op), number)


def time_stmt(
    name: str,
    stmt: str,
    namespace: dict[str, object],
    *,
    repeats: int = 7,
    target_s: float = 0.1,
) -> Timing:
    """Time a statement (no call overhead of its own) run with ``namespace`` as globals."""
    timer = timeit.Timer(stmt, setup="gc.enable()", globals={"gc": gc, **namespace})
    return _measure(name, timer, repeats, target_s)


def time_callable(
    name: str, fn: Callable[[], object], *, repeats: int = 7, target_s: float = 0.1
) -> Timing:
    """Time ``fn()``; the figure includes one Python call (about 15-20 ns)."""
    return time_stmt(name, "fn()", {"fn": fn}, repeats=repeats, target_s=target_s)


def fmt_ns(ns: float) -> str:
    """A duration in ns, µs, ms or s, three significant figures or so."""
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.2f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e9:.2f} s"


def fmt_ratio(value: float, baseline: float) -> str:
    """``value / baseline`` as ``1.23×`` (``n/a`` without a positive baseline)."""
    if baseline <= 0:
        return "n/a"
    return f"{value / baseline:.2f}×"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    """A Markdown table, columns padded to their widest cell."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
