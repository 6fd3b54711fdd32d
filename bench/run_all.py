"""Run every bench script and print one table of the project's costs.

Run: ``.venv/bin/python bench/run_all.py`` (``make bench``); ``--quick`` for a smoke run
(seconds, not minutes; what CI could run). Every ratio is against a baseline measured
in the same process, in the same run:

- dispatch floor: a plain ``for`` loop calling 3 no-op observers (``bench_dispatch``);
- raw OpenTelemetry SDK span with the same attributes (``bench_otel``);
- bare prometheus-client ``Counter.inc()`` (``bench_prometheus``);
- LangChain callback dispatch to 3 no-op handlers (``bench_stack``; needs langchain-core);
- ``opentelemetry-util-genai`` inference record (``bench_otel``; if installed);
- the default detectors on real agents' trajectories (``bench_real_trajectories``; reads
  ``../shared/data/real-trajectories/``, skips when absent): per tool call and per final
  answer against the 15 µs and 100 µs targets;
- the whole stack on a scripted 1,000-turn run with 1 ms model latency (``bench_stack``);
- pricing a model call (``genai-prices``, the cost observer) vs a bare ``Counter.inc()``
  (``bench_cost``);
- an MCP tool call through the loop vs the same call with the ``mcp`` SDK directly, on one
  connection to a local stdio server (``bench_mcp``);
- a LangGraph run and an instrumented app without the adapters (``bench_adapters``);
- OpenAI Agents SDK and pydantic-ai runs without their adapters (``bench_framework_adapters``);
- a shared-budget reservation and commit on local Redis vs a bare PING (``bench_fleet``).

Each script's own table is printed as it runs; the summary comes last.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench._util import fmt_ns, print_table

SCRIPTS = (
    "bench_dispatch",
    "bench_loop",
    "bench_detectors",
    "bench_real_trajectories",
    "bench_otel",
    "bench_prometheus",
    "bench_chunks",
    "bench_sdk_share",
    "bench_stack",
    "bench_load",
    "bench_soak",
    "bench_report",
    "bench_sse",
    "bench_cost",
    "bench_mcp",
    "bench_adapters",
    "bench_framework_adapters",
    "bench_import",
    "bench_request",
    "bench_fleet",
)


def _run(name: str, quick: bool) -> Any:
    module = importlib.import_module(f"bench.{name}")
    if name == "bench_loop" and quick:
        setattr(module, "ROUNDS", 2)  # noqa: B010 - bench_loop has no --quick of its own
        setattr(module, "RUNS_PER_ROUND", 3)  # noqa: B010
    main: Callable[..., Any] = module.main
    print(f"\n## {name}\n", flush=True)
    if inspect.signature(main).parameters:
        return main(["--quick"] if quick else [])
    return main()


Match = Callable[[Any], bool]


def _find(rows: Any, match: Match) -> Any:
    return next((r for r in rows or () if match(r)), None)


def _first(label: str) -> Match:
    return lambda r: bool(r[0] == label)


def _attached(prefix: str) -> Match:
    return lambda r: r[0].startswith(prefix) and "(attach)" in r[0]


def _named(label: str) -> Match:
    return lambda r: bool(r.name == label)


def summary(results: dict[str, Any]) -> list[list[str]]:
    """One row per headline cost: what, ours, baseline, ratio."""
    out: list[list[str]] = []

    def add(what: str, ours: str, base: str, ratio: str) -> None:
        out.append([what, ours, base, ratio])

    d = results.get("bench_dispatch")
    floor = _find(d, lambda r: r["name"] == "ObserverSet, pre-built ctx, 3 listeners")
    if floor and floor.get("baseline_ns"):
        add(
            "ObserverSet, event to 3 observers vs dispatch floor (plain for loop)",
            fmt_ns(floor["best_ns"]),
            fmt_ns(floor["baseline_ns"]),
            f"{floor['best_ns'] / floor['baseline_ns']:.2f}×",
        )
    site = _find(d, lambda r: r["name"].startswith("emit site") and r["observers"] == 3)
    if site and site.get("baseline_ns"):
        add(
            "emit site (build context + dispatch to 3) vs floor + building it",
            fmt_ns(site["best_ns"]),
            fmt_ns(site["baseline_ns"]),
            f"{site['best_ns'] / site['baseline_ns']:.2f}×",
        )
    unheard = _find(d, lambda r: r["name"].startswith("unheard"))
    if unheard:
        add("unheard hook at the emit site", fmt_ns(unheard["best_ns"]), "", "")
    o = results.get("bench_otel")
    for label, what in (
        ("TracingObserver model call (attach)", "model call → chat span"),
        ("TracingObserver tool call (attach)", "tool call → execute_tool span"),
    ):
        prefix = "raw SDK chat" if "model" in label else "raw SDK tool"
        row, base = _find(o, _first(label)), _find(o, _attached(prefix))
        if row and base:
            add(f"{what} vs raw OTel SDK span, same attributes", row[1], base[1], row[3])
    ours = _find(o, lambda r: r[0].startswith("TracingObserver + MetricsObserver"))
    genai = _find(
        o, lambda r: r[0].startswith("util-genai inference + tool record, SDK tracer + SDK")
    )
    skipped = _find(o, lambda r: r[0] == "opentelemetry-util-genai")
    if ours and genai:
        add(
            "model call + tool call traced + metered vs opentelemetry-util-genai records",
            ours[1],
            genai[1],
            genai[4].replace("ours is ", ""),
        )
    elif skipped:
        add("opentelemetry-util-genai record", "skipped", "", skipped[4])
    p = results.get("bench_prometheus")
    bare = _find(p, lambda r: r.name == "bare Counter.inc()")
    for label in (
        "observer on_tool_post (1 counter + 1 histogram)",
        "observer on_stream_success (4 histograms + 2 counters)",
    ):
        row = _find(p, _named(label))
        if row and bare:
            add(
                f"Prometheus {label.removeprefix('observer ')} vs bare Counter.inc()",
                fmt_ns(row.ns_per_op),
                fmt_ns(bare.ns_per_op),
                f"{row.ratio:.1f}×",
            )
    for row in results.get("bench_chunks") or ():
        add(
            f"per streamed chunk: {row['name']} vs the loop's own work per chunk",
            fmt_ns(row["ns_per_chunk"]),
            fmt_ns(row["baseline_ns"]),
            f"{row['ns_per_chunk'] / row['baseline_ns']:.2f}×",
        )
    share = _find(results.get("bench_sdk_share"), lambda r: True)
    if share:
        add(
            "traces + OTel metrics per turn (the peers' workload): added vs of it inside the "
            "OTel SDK",
            f"{share['added_us']:.0f} µs",
            f"{share['sdk_us']:.0f} µs",
            f"SDK {share['sdk_us'] / share['added_us'] * 100:.0f} %",
        )
    s = results.get("bench_stack")
    ours_set = _find(s, lambda r: r["name"].startswith("ObserverSet"))
    lc = _find(s, lambda r: r["name"].startswith("LangChain"))
    if ours_set and lc and "skipped" not in lc:
        add(
            "tool event built + sent to 3 no-op observers vs LangChain on_tool_end to 3 handlers",
            fmt_ns(ours_set["best_ns"]),
            fmt_ns(lc["best_ns"]),
            f"{ours_set['best_ns'] / lc['best_ns']:.2f}×",
        )
    elif lc:
        add("LangChain callback dispatch", "skipped", "", lc["skipped"])
    whole = _find(s, lambda r: "overhead_pct" in r)
    bare_run = _find(s, lambda r: r["name"].endswith("no observers"))
    if whole and bare_run:
        add(
            whole["name"].replace(", all observers + detectors", "")
            + ": all observers + detectors",
            fmt_ns(whole["best_ns"]),
            fmt_ns(bare_run["best_ns"]),
            f"+{whole['overhead_pct']:.1f} %",
        )
    per_turn = _find(s, lambda r: "bare_turn_ns" in r)
    if per_turn:
        add(
            "all observers + detectors: added time per turn",
            fmt_ns(per_turn["best_ns"]),
            fmt_ns(per_turn["bare_turn_ns"]),
            "",
        )
    lo = results.get("bench_load")
    loaded = _find(lo, lambda r: "added_p99_ms" in r)
    unloaded = _find(lo, lambda r: "p99_ms" in r and "added_p99_ms" not in r)
    if loaded and unloaded:
        add(
            loaded["name"] + ": p99 run latency",
            f"{loaded['p99_ms']:.1f} ms",
            f"{unloaded['p99_ms']:.1f} ms",
            f"+{loaded['added_p99_ms']:.1f} ms",
        )
    for row in lo or ():
        if "ratio" in row and "no exporter" not in row["name"]:
            add(row["name"] + " (mean)", f"{row['mean_ms']:.2f} ms", "", f"{row['ratio']:.2f}×")
    so = _find(results.get("bench_soak"), lambda r: True)
    if so:
        add(
            so["name"] + ": RSS start / middle / end",
            f"{so['rss_start_mib']:.1f} / {so['rss_middle_mib']:.1f} / {so['rss_end_mib']:.1f} MiB",
            "",
            "per-run state left: " + str(sum(so["left"].values())),
        )
    for row in results.get("bench_cost") or ():
        if row["name"] != "bare Counter.inc()" and not row["name"].startswith("genai_prices"):
            add(
                f"cost: {row['name']} vs bare Counter.inc()",
                fmt_ns(row["median_ns"]),
                fmt_ns(row["baseline_ns"]),
                f"{row['median_ns'] / row['baseline_ns']:.1f}×",
            )
    for row in results.get("bench_mcp") or ():
        if row["name"].startswith("SDK"):
            continue
        add(
            f"MCP round trip: {row['name']} vs SDK call_tool",
            fmt_ns(row["best_ns"]),
            fmt_ns(row["baseline_ns"]),
            f"{row['best_ns'] / row['baseline_ns']:.2f}×",
        )
    for row in results.get("bench_adapters") or ():
        if row["best_ns"] != row["baseline_ns"]:
            add(
                row["name"] + " vs bare",
                fmt_ns(row["best_ns"]),
                fmt_ns(row["baseline_ns"]),
                f"{row['best_ns'] / row['baseline_ns']:.2f}×",
            )
    framework_rows = results.get("bench_framework_adapters") or ()
    bare_runs = {r["framework"]: r for r in framework_rows if r["name"] == "bare"}
    for row in framework_rows:
        bare = bare_runs.get(row["framework"])
        if bare is None or row is bare:
            continue
        if "share_of_bare" in row:
            add(
                f"{row['framework']}: {row['name']} (a run's hooks, no framework) vs bare run",
                fmt_ns(row["best_ns"]),
                fmt_ns(bare["best_ns"]),
                f"{100 * row['share_of_bare']:.1f} %",
            )
        else:
            add(
                f"{row['framework']} run, {row['name']} vs bare (CPU)",
                fmt_ns(row["best_ns"]),
                fmt_ns(bare["best_ns"]),
                f"{row['best_ns'] / bare['best_ns']:.2f}×",
            )
    real = results.get("bench_real_trajectories")
    if real:
        add(
            "real agents' trajectories: detectors per tool call vs the 15 µs target",
            fmt_ns(real["call_ns"]),
            "15 µs",
            f"{real['call_ns'] / 15_000:.2f}×",
        )
        add(
            "real agents' trajectories: convergence per final answer vs the 100 µs target",
            fmt_ns(real["answer_ns"]),
            "100 µs",
            f"{real['answer_ns'] / 100_000:.2f}×",
        )
    imports = results.get("bench_import") or []
    if len(imports) == 2:
        ours_import, sdk_import = imports
        add(
            "`import loopobs` (fresh interpreter) vs `import opentelemetry.sdk.trace`",
            f"{ours_import['best_ms']:.0f} ms",
            f"{sdk_import['best_ms']:.0f} ms",
            f"{ours_import['ratio']:.2f}×",
        )
    for row in results.get("bench_request") or ():
        if row[0].endswith("cached vs whole"):
            add(
                f"{row[0].split(':')[0]}: 1,000-turn conversation, requests built from cached "
                "messages vs whole history",
                "",
                "",
                row[3],
            )
    fleet = results.get("bench_fleet") or []
    if fleet:
        ping = fleet[0]
        for row in fleet[1:]:
            add(
                f"shared budget per model call: {row.name}",
                fmt_ns(row.median_ns),
                fmt_ns(ping.median_ns),
                f"{row.median_ns / ping.median_ns:.2f}×",
            )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run every bench script, print the summary table, return every script's rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run (short timings)")
    parser.add_argument("--only", nargs="*", choices=SCRIPTS, help="run only these scripts")
    args = parser.parse_args(argv)
    results: dict[str, Any] = {}
    started = time.perf_counter()
    for name in args.only or SCRIPTS:
        results[name] = _run(name, args.quick)
    print(
        f"\n## Summary ({'quick' if args.quick else 'full'} run, "
        f"{time.perf_counter() - started:.0f} s, Python {sys.version.split()[0]})\n"
    )
    print_table(["cost", "ours", "baseline", "ratio"], summary(results))
    return results


if __name__ == "__main__":
    main()
