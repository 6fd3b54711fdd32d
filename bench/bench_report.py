"""What the HTML report costs: building it from a large log, and opening it in Chromium.

Run: ``.venv/bin/python bench/bench_report.py [--runs 10000]``.

Two ratios, each against a baseline measured in the same process on the same log:
- build: ``write_report`` (decode, fold, render, write) / ``replay`` into a no-op
  observer (decode alone) — what the report adds over reading the log at all;
- browser: time until the page is interactive / time to load a page that only parses
  the same embedded data — what drawing the table adds over the data itself.
Chromium comes from Debian's package (``make backends``); without it only the build
figure is printed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._util import print_table
from loopobs.contract.observer import LoopObserver
from loopobs.exporters.jsonl import replay
from loopobs.report import write_report
from tests._report_logs import write_synthetic_log

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _best(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def _browser_times(report: Path, data_only: Path, repeats: int) -> tuple[float, float] | None:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        return None
    from playwright.sync_api import sync_playwright

    def load(browser: object, page_path: Path) -> float:
        page = browser.new_page()  # type: ignore[attr-defined]
        started = time.perf_counter()
        page.goto(page_path.as_uri())
        # evaluate(), not wait_for_function(): the page's CSP forbids the eval it polls with.
        while not page.evaluate("Boolean(window.loopobsReport && window.loopobsReport.ready)"):
            page.wait_for_timeout(5)
        elapsed = time.perf_counter() - started
        page.close()
        return elapsed

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            load(browser, data_only)  # warm-up
            full = min(load(browser, report) for _ in range(repeats))
            bare = min(load(browser, data_only) for _ in range(repeats))
        finally:
            browser.close()
    return full, bare


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="1,000 runs, one repeat")
    args = parser.parse_args(argv)
    runs, repeats = (1_000, 1) if args.quick else (args.runs, 3)
    with tempfile.TemporaryDirectory() as tmp:
        log, out = Path(tmp) / "big.jsonl", Path(tmp) / "big.html"
        events = write_synthetic_log(log, runs)
        decode_s = _best(lambda: replay(log, LoopObserver()), repeats)
        build_s = _best(lambda: write_report(log, out), repeats)
        size = out.stat().st_size
        html = out.read_text(encoding="utf-8")
        head, _, _tail = html.partition("<script>")
        data_only = Path(tmp) / "data-only.html"
        data_only.write_text(
            head + "<script>JSON.parse(document.getElementById('report-data').textContent);"
            "window.loopobsReport={ready:true};</script></body></html>",
            encoding="utf-8",
        )
        browser = _browser_times(out, data_only, repeats)
    rows = [
        ["log", f"{runs:,} runs, {events:,} events", ""],
        ["decode only (replay into a no-op observer)", f"{decode_s:.2f} s", "1.00×"],
        [
            "write_report (decode, fold, render, write)",
            f"{build_s:.2f} s",
            f"{build_s / decode_s:.2f}×",
        ],
        ["report size", f"{size / 1e6:.1f} MB", ""],
    ]
    result = {
        "runs": float(runs),
        "events": float(events),
        "decode_s": decode_s,
        "build_s": build_s,
        "bytes": float(size),
    }
    if browser is None:
        rows.append(["Chromium", "not installed (make backends)", ""])
    else:
        full, bare = browser
        rows.append(["Chromium: page that only parses the data", f"{bare:.2f} s", "1.00×"])
        rows.append(["Chromium: report interactive", f"{full:.2f} s", f"{full / bare:.2f}×"])
        result.update(browser_ready_s=full, browser_data_only_s=bare)
    print_table(["HTML report", "time", "ratio"], rows)
    return result


if __name__ == "__main__":
    main()
