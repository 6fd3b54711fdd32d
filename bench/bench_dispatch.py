"""Cost per event of building a context and dispatching it through ObserverSet.

Run: ``.venv/bin/python bench/bench_dispatch.py`` (prints a table; ``--quick`` for a fast pass).

Each row is compared with a baseline measured in this process: a plain ``for`` loop calling
one method on each of N observers with a pre-built context — the floor any dispatcher sits on.

- ``ObserverSet, pre-built ctx``: what the set adds to that loop (lookup, isolation, order).
- ``emit site: build ctx + dispatch``: what a loop pays per event, as it writes it::

      if observers.listens("on_tool_pre"):
          observers.on_tool_pre(ToolPreContext(...))

  compared with the plain loop that builds the same context first (``baseline + build``).

- ``unheard hook``: the same emit site when no member listens: no context is built.

Targets: an unheard hook ≤ 100 ns at the emit site; 3 listeners ≤ 2× the baseline
plus one context construction.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

# Run as a script, bench/ is on sys.path but the repository root (home of bench._util) is not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import Timing, fmt_ns, fmt_ratio, print_table, time_stmt
from loopobs import LoopObserver, ObserverSet, ToolPreContext

__all__ = ["main"]

COUNTS = (0, 1, 3, 17)
UNHEARD_TARGET_NS = 100.0


class NoOp(LoopObserver):
    """Listens to on_tool_pre and does nothing with it."""

    def on_tool_pre(self, ctx: ToolPreContext) -> None:
        pass


class Elsewhere(LoopObserver):
    """Listens to another hook only, so on_tool_pre is unheard."""

    def on_tool_post(self, ctx: Any) -> None:
        pass


BUILD = (
    "ToolPreContext(run_id=run_id, time_ns=time_ns(), turn=0, tool='search', tool_call_id='call_1')"
)


def _namespace(observers: list[LoopObserver]) -> dict[str, object]:
    run_id = uuid.uuid4()
    return {
        "ToolPreContext": ToolPreContext,
        "run_id": run_id,
        "time_ns": time.time_ns,
        "ctx": ToolPreContext(
            run_id=run_id, time_ns=0, turn=0, tool="search", tool_call_id="call_1"
        ),
        "plain": observers,
        "observers": ObserverSet(observers),
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmark, print the table and return its rows (for bench/run_all.py)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    args = parser.parse_args(argv)
    opts: dict[str, Any] = {"repeats": 3, "target_s": 0.03} if args.quick else {}

    rows: list[dict[str, Any]] = []

    def add(t: Timing, baseline: Timing | None, observers: int | None, **extra: Any) -> None:
        rows.append(
            {
                "name": t.name,
                "observers": observers,
                "best_ns": t.best_ns,
                "median_ns": t.median_ns,
                "baseline_ns": baseline.best_ns if baseline else None,
                "ratio": t.best_ns / baseline.best_ns if baseline and baseline.best_ns else None,
                **extra,
            }
        )

    build = time_stmt("build ToolPreContext (with time.time_ns())", BUILD, _namespace([]), **opts)
    add(build, None, None)
    for n in COUNTS:
        ns = _namespace([NoOp() for _ in range(n)])
        base = time_stmt(
            f"baseline: for o in {n} observers: o.on_tool_pre(ctx)",
            "for o in plain: o.on_tool_pre(ctx)",
            ns,
            **opts,
        )
        add(base, None, n)
        add(
            time_stmt(
                f"ObserverSet, pre-built ctx, {n} listeners",
                "observers.on_tool_pre(ctx)",
                ns,
                **opts,
            ),
            base,
            n,
        )
        built = time_stmt(
            f"baseline + build: ctx = ToolPreContext(...); for o in {n}: …",
            f"c = {BUILD}\nfor o in plain: o.on_tool_pre(c)",
            ns,
            **opts,
        )
        add(built, None, n)
        site = time_stmt(
            f"emit site: build ctx + dispatch, {n} listeners",
            f"if observers.listens('on_tool_pre'): observers.on_tool_pre({BUILD})",
            ns,
            **opts,
        )
        limit = 2 * base.best_ns + build.best_ns
        add(
            site,
            built,
            n,
            target_ns=limit if n == 3 else None,
            met=site.best_ns <= limit if n == 3 else None,
        )
    unheard = time_stmt(
        "unheard hook at the emit site (3 members, none listens)",
        f"if observers.listens('on_tool_pre'): observers.on_tool_pre({BUILD})",
        _namespace([Elsewhere() for _ in range(3)]),
        **opts,
    )
    add(unheard, None, 0, target_ns=UNHEARD_TARGET_NS, met=unheard.best_ns <= UNHEARD_TARGET_NS)

    table = []
    for r in rows:
        target = ""
        if r.get("target_ns") is not None:
            target = f"≤ {fmt_ns(r['target_ns'])}: {'met' if r['met'] else 'MISSED'}"
        ratio = fmt_ratio(r["best_ns"], r["baseline_ns"]) if r["baseline_ns"] else ""
        table.append([r["name"], fmt_ns(r["best_ns"]), fmt_ns(r["median_ns"]), ratio, target])
    print(
        f"ObserverSet dispatch — Python {sys.version.split()[0]}; best and median of the "
        f"repeats, ns per event; ratio = best / best of the same-N baseline (for the emit "
        f"site: of the same-N baseline that builds the context too)"
    )
    print_table(["benchmark", "best", "median", "× baseline", "target"], table)
    return rows


if __name__ == "__main__":
    main()
