"""The HTML report in a real browser: Debian's Chromium, driven by Playwright.

The page must load with no console errors, show the runs table and totals, sort and
filter, and open a run's waterfall on a click. Checks read the DOM (elements present),
not pixels. A 10,000-run log must become interactive; the time it takes is printed
(and measured by ``bench/bench_report.py``), never asserted.
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from loopobs.contract.events import (
    EventContext,
    RunEndContext,
    RunStartContext,
    RunStatus,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.report import fold_log, fold_runs, render_report, write_report
from tests._report_logs import write_synthetic_log
from tests.e2e._backends import require_binary
from tests.test_report import DEMO_LOG, _events

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

pytestmark = pytest.mark.e2e

# Flags for a closed network: no background fetches, no sandbox (we run as root).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DOCS_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "img" / "report.png"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    binary = require_binary("LOOPOBS_CHROMIUM_BIN", "chromium", "/usr/bin/chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - a dev dependency
        if os.environ.get("CI") == "true":
            pytest.fail("CI requires playwright (the dev extra)")
        pytest.skip("playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


class _Loaded:
    def __init__(self, page: Page, errors: list[str]) -> None:
        self.page = page
        self.errors = errors


def _open(browser: Browser, html: Path, *, width: int = 1200) -> _Loaded:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "request",
        lambda req: (
            None if req.url.startswith("file:") else errors.append(f"network request to {req.url}")
        ),
    )
    page.goto(html.as_uri())
    _poll(page, "Boolean(window.loopobsReport && window.loopobsReport.ready)")
    return _Loaded(page, errors)


def _poll(page: Page, expression: str, timeout_s: float = 60.0) -> None:
    # The page's Content-Security-Policy forbids eval, which wait_for_function's polling uses;
    # evaluate() goes through the DevTools protocol instead. A hang guard, not a timing.
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            pytest.fail(f"the page never got to: {expression}")
        page.wait_for_timeout(50)


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("report") / "demo.html"
    runs = fold_runs(_events(DEMO_LOG))
    when = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    target.write_text(render_report(runs, source="demo.jsonl", generated=when), encoding="utf-8")
    return target


def test_report_loads_sorts_filters_and_opens_a_waterfall(
    browser: Browser, demo_report: Path, tmp_path: Path
) -> None:
    loaded = _open(browser, demo_report)
    page = loaded.page
    rows = page.locator("tr.run-row")
    assert rows.count() == 15
    assert page.locator("#totals [data-total=runs] b").inner_text() == "15"
    assert page.locator("#totals [data-total=loop_detected]").count() == 1
    assert page.locator("#totals [data-total=cost] b").inner_text().startswith("$")
    assert page.locator("#detail").is_hidden()

    # Sort by duration, longest first: the first row is the slowest run.
    page.locator("#runs th[data-key=dur]").click()
    assert page.locator("#runs th[data-key=dur]").get_attribute("aria-sort") == "descending"
    first = page.locator("tr.run-row").first.get_attribute("data-id")
    slowest = max(fold_runs(_events(DEMO_LOG)), key=lambda r: r.end_ms)
    assert first == slowest.run_id

    # Filter by status, then open the run.
    page.locator("#status-filter").select_option("loop_detected")
    assert rows.count() == 1
    rows.first.click()
    detail = page.locator("#detail")
    assert detail.is_visible()
    assert "loop_detected" in page.locator("#detail-meta").inner_text()
    assert page.locator("#detail-error").inner_text().startswith("LoopDetected: ")
    assert page.locator("#waterfall svg g.bar-turn").count() == 10
    assert page.locator("#waterfall svg g.bar-chat").count() == 10
    assert page.locator("#waterfall svg g.bar-tool").count() == 10
    assert page.locator("#waterfall svg line.ttft").count() == 10
    assert page.locator("#waterfall svg g.mark").count() == 2
    assert page.locator("#turn-table tr").count() == 11  # header + 10 turns

    # Content stays hidden until asked for.
    content = page.locator("#content-list")
    assert content.is_hidden()
    page.locator("#show-content").check()
    assert content.is_visible()
    assert "query" in content.inner_text()

    shot = tmp_path / "report.png"
    page.locator("#show-content").uncheck()
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000
    # Narrower window: the waterfall is redrawn to fit.
    page.set_viewport_size({"width": 900, "height": 800})
    _poll(page, "Number(document.querySelector('#waterfall svg').getAttribute('width')) < 900")
    if os.environ.get("LOOPOBS_UPDATE_DOCS_IMAGE") == "1":  # the README's picture
        docs = _open(browser, demo_report, width=1000)
        docs.page.locator("tr.run-row", has_text="loop_detected").click()
        docs.page.evaluate("window.scrollTo(0, 0)")
        docs.page.screenshot(path=str(DOCS_IMAGE), full_page=True)
    assert loaded.errors == []


def test_content_toggle_is_disabled_without_content(browser: Browser, tmp_path: Path) -> None:
    out = tmp_path / "bare.html"
    write_report(DEMO_LOG, out, content=False)
    loaded = _open(browser, out)
    assert loaded.page.locator("#show-content").is_disabled()
    assert "no content" in loaded.page.locator("#content-note").inner_text()
    assert loaded.errors == []


def test_ten_thousand_runs_stay_interactive(
    browser: Browser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "big.jsonl"
    events = write_synthetic_log(log, 10_000)
    assert events >= 200_000
    out = tmp_path / "big.html"
    stats = write_report(log, out)
    assert stats.runs == 10_000
    assert stats.events == events
    started = time.monotonic()
    loaded = _open(browser, out)
    ready_s = time.monotonic() - started
    page = loaded.page
    assert page.locator("tr.run-row").count() == 100  # paged
    assert "of 100" in page.locator("#page-info").inner_text()
    page.locator("#next").click()
    assert "page 2 of 100" in page.locator("#page-info").inner_text()
    page.locator("#runs th[data-key=tokens]").click()
    page.locator("tr.run-row").first.click()
    page.wait_for_selector("#waterfall svg g.bar-tool")
    assert loaded.errors == []
    with capsys.disabled():
        print(
            f"\nreport of {stats.runs} runs / {stats.events} events "
            f"({stats.bytes / 1e6:.1f} MB): interactive after {ready_s:.2f} s in Chromium"
        )


def _long_run(turns: int) -> list[EventContext]:
    """One run of ``turns`` turns, each a model call and a tool call (3 bars a turn)."""
    run = uuid.uuid4()
    t = 1_700_000_000_000_000_000
    ms = 1_000_000
    events: list[EventContext] = [
        RunStartContext(run_id=run, time_ns=t, session_id=run, agent="long", model="m")
    ]
    for turn in range(turns):
        base = t + turn * 10 * ms
        call = f"c{turn}"
        events += [
            TurnStartContext(run_id=run, time_ns=base + 1, turn=turn),
            StreamStartContext(run_id=run, time_ns=base + ms, turn=turn, model="m"),
            StreamSuccessContext(
                run_id=run,
                time_ns=base + 4 * ms,
                turn=turn,
                model="m",
                input_tokens=10,
                output_tokens=2,
                time_to_first_token_ms=1.0,
            ),
            ToolPreContext(
                run_id=run, time_ns=base + 5 * ms, turn=turn, tool="t", tool_call_id=call
            ),
            ToolPostContext(
                run_id=run,
                time_ns=base + 8 * ms,
                turn=turn,
                tool="t",
                tool_call_id=call,
                result_hash=0,
                is_error=False,
                duration_ms=3.0,
            ),
            TurnEndContext(run_id=run, time_ns=base + 9 * ms, turn=turn, success=True),
        ]
    events.append(
        RunEndContext(
            run_id=run,
            time_ns=t + turns * 10 * ms,
            success=True,
            status=RunStatus.COMPLETED,
            total_turns=turns,
        )
    )
    return events


def test_a_ten_thousand_turn_run_draws_its_waterfall_in_windows(
    browser: Browser, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = fold_runs(_long_run(10_000))
    assert len(runs[0].bars) == 30_000
    out = tmp_path / "long.html"
    out.write_text(render_report(runs, source="long.jsonl"), encoding="utf-8")
    loaded = _open(browser, out)
    page = loaded.page
    started = time.monotonic()
    page.locator("tr.run-row").first.click()
    page.wait_for_selector("#waterfall svg g.bar-tool")
    opened_s = time.monotonic() - started
    assert page.locator("#waterfall svg g.bar").count() == 200  # a window, not 30,000 bars
    info = page.locator("#wf-info")
    assert info.inner_text() == "bars 1–200 of 30,000 · turns 0–66"
    assert page.locator("#wf-prev").is_disabled()
    assert page.locator("#turn-table tr").count() == 1 + 67  # the window's turns
    page.locator("#wf-next").click()
    assert info.inner_text() == "bars 201–400 of 30,000 · turns 66–133"
    assert page.locator("#waterfall svg g.bar").count() == 200
    assert page.locator("#waterfall svg line.ttft").count() >= 66
    assert not page.locator("#wf-prev").is_disabled()
    assert loaded.errors == []
    with capsys.disabled():
        print(f"\nwaterfall of a 10,000-turn run: open after {opened_s:.2f} s in Chromium")


def test_session_events_show_on_their_session(browser: Browser, tmp_path: Path) -> None:
    from tests.test_report import _session_log

    session, events = _session_log()
    out = tmp_path / "sessions.html"
    folded = fold_log(events)
    out.write_text(render_report(folded.runs, sessions=folded.sessions), encoding="utf-8")
    loaded = _open(browser, out)
    page = loaded.page
    assert page.locator("tr.run-row").count() == 1
    assert page.locator("#totals [data-total=incomplete]").count() == 0
    assert page.locator("#sessions").is_visible()
    row = page.locator("tr.session-row")
    assert row.count() == 1
    assert "reset ×1" in row.inner_text()
    page.locator("tr.run-row").first.click()
    assert page.locator("#session-events").is_visible()
    assert page.locator("#session-table tr").count() == 3
    assert str(session) in page.locator("#session-events-meta").inner_text()
    assert loaded.errors == []
