"""``import loopobs`` in a fresh interpreter, against ``import opentelemetry.sdk.trace``.

Run: ``.venv/bin/python bench/bench_import.py`` (``--quick``: 3 interpreters each, not 11).

Each figure is the best (min) and median CPU time of the import alone (measured
inside the child, so interpreter start-up is excluded; CPU time, because wall time
on a shared machine mostly measures the other processes) over fresh interpreters,
alternating the two imports. Also listed: which heavy packages the import loaded
(the exporters, the OpenTelemetry SDK, jsonschema and prometheus-client should not be).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import fmt_ratio, print_table

ROOT = Path(__file__).resolve().parents[1]
HEAVY = (
    "loopobs.exporters",
    "opentelemetry",
    "opentelemetry.sdk",
    "jsonschema",
    "prometheus_client",
    "pydantic",
)

_CHILD = """
import json, sys, time
started = time.process_time()
import {module}
elapsed = time.process_time() - started
print(json.dumps({{"s": elapsed, "loaded": [m for m in {heavy!r} if m in sys.modules]}}))
"""


def import_time(module: str) -> tuple[float, list[str]]:
    """Seconds ``import module`` takes in a fresh interpreter, and the heavy modules it loaded."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(module=module, heavy=HEAVY)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    ).stdout
    row = json.loads(out)
    return float(row["s"]), list(row["loaded"])


def main(argv: list[str] | None = None) -> list[dict[str, object]]:
    """Print and return one row per import: best, median, what it loaded."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = 3 if args.quick else 11
    modules = ("loopobs", "opentelemetry.sdk.trace")
    times: dict[str, list[float]] = {m: [] for m in modules}
    loaded: dict[str, list[str]] = {}
    for _ in range(n):
        for module in modules:
            seconds, heavy = import_time(module)
            times[module].append(seconds)
            loaded[module] = heavy
    base = min(times["opentelemetry.sdk.trace"])
    rows: list[dict[str, object]] = []
    for module in modules:
        rows.append(
            {
                "name": f"import {module}",
                "best_ms": min(times[module]) * 1e3,
                "median_ms": statistics.median(times[module]) * 1e3,
                "ratio": min(times[module]) / base,
                "loaded": loaded[module],
            }
        )
    print_table(
        ["import", "best", "median", "vs opentelemetry.sdk.trace", "loaded"],
        [
            [
                str(r["name"]),
                f"{r['best_ms']:.1f} ms",
                f"{r['median_ms']:.1f} ms",
                fmt_ratio(min(times[m]), base),
                ", ".join(loaded[m]) or "-",
            ]
            for r, m in zip(rows, modules, strict=True)
        ],
    )
    return rows


if __name__ == "__main__":
    main()
