"""A self-contained HTML report of a recorded event log (``loopobs report run.jsonl``).

One file, no network: the page inlines its CSS, script and data (a strict
Content-Security-Policy forbids every fetch), so it opens from disk, an e-mail or
a CI artefact. Per run it draws a waterfall of turns, model calls (time to first
chunk marked) and tool calls, with fallbacks, model switches, compactions,
detections, parking and budget stops as markers; across runs, a table sortable by
duration, tokens, cost and status, a status filter and totals. Runs are paged, so
a log of 10,000 runs stays responsive.

Content (prompts, answers, tool arguments and results) appears only where the
log has it, hidden behind a toggle; ``content=False`` leaves it out of the file.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

from loopobs.contract.events import EventContext
from loopobs.contract.observer import EventSink
from loopobs.report._runs import FoldedLog, RunRecord, SessionRecord, fold_log, fold_runs

__all__ = [
    "FoldedLog",
    "ReportStats",
    "RunRecord",
    "SessionRecord",
    "fold_log",
    "fold_runs",
    "render_report",
    "write_atomically",
    "write_report",
]


@dataclass(frozen=True, slots=True)
class ReportStats:
    """What :func:`write_report` wrote: runs and events read, bad lines skipped, bytes written."""

    runs: int
    events: int
    skipped: int
    bytes: int


def _asset(name: str) -> str:
    return resources.files("loopobs.report").joinpath("assets", name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    # Inside <script>, "</" could end the element and "<!--" change parsing: escape every "<"
    # (JSON keeps its meaning); U+2028/9 are escaped for old JavaScript parsers.
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_report(
    runs: Iterable[RunRecord],
    *,
    source: str = "event log",
    generated: _dt.datetime | None = None,
    sessions: Iterable[SessionRecord] = (),
) -> str:
    """The HTML page for ``runs`` and ``sessions`` (see :func:`fold_log`), as one string."""
    records = [run.to_json() for run in runs]
    when = (generated or _dt.datetime.now(_dt.timezone.utc)).isoformat(timespec="seconds")
    payload = {
        "source": source,
        "generated": when,
        "runs": records,
        "sessions": [session.to_json() for session in sessions],
        "hasContent": any(run["content"] for run in records),
    }
    data = _script_safe(
        json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    )
    page = _asset("report.html")
    # Placeholders are replaced last-to-first so inserted text is never searched again.
    head, rest = page.split("/*__CSS__*/", 1)
    middle, tail = rest.split("/*__DATA__*/", 1)
    before_js, after_js = tail.split("/*__JS__*/", 1)
    return "".join(
        (
            head,
            _asset("report.css"),
            middle,
            data,
            before_js,
            _script_safe_js(_asset("report.js")),
            after_js,
        )
    )


def _script_safe_js(code: str) -> str:
    if "</script" in code.lower():  # pragma: no cover - guards edits to report.js
        raise ValueError("report.js must not contain '</script'")
    return code


_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` whole or not at all: a new path, or a regular file replaced.

    Anything else at ``target`` (a symbolic link, FIFO, device, socket or
    directory) is refused and left as it is. The data goes to a fresh temporary
    file next to ``target`` (created exclusively), is fsynced, then renamed over
    it; a replaced file keeps its permission bits.

    Raises:
        OSError: ``target`` is not a regular file, or the write failed (nothing changed).
    """
    try:
        existing: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        kind = next((name for test, name in _KINDS if test(existing.st_mode)), "not a file")
        raise OSError(
            f"{target} is {kind}, not a regular file; the report is written only "
            "to a regular file or a new path"
        )
    mode = stat.S_IMODE(existing.st_mode) if existing is not None else 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _Collect(EventSink):
    def __init__(self) -> None:
        self.events: list[EventContext] = []

    def on_event(self, ctx: EventContext) -> None:
        self.events.append(ctx)


def write_report(
    log: str | os.PathLike[str] | IO[str],
    out: str | os.PathLike[str],
    *,
    content: bool = True,
    skip_invalid: bool = False,
) -> ReportStats:
    """Read the JSONL event log ``log`` and write its HTML report to ``out``.

    ``out`` must be a regular file (replaced) or a new path: see :func:`write_atomically`.

    Raises:
        loopobs.exporters.jsonl.ReplayError: a malformed line (unless ``skip_invalid``).
        OSError: the log cannot be read, the report written, or ``out`` is not a
            regular file.
    """
    from loopobs.exporters.jsonl import replay

    collect = _Collect()
    stats = replay(log, collect, skip_invalid=skip_invalid)
    folded = fold_log(collect.events, content=content)
    runs = folded.runs
    name = os.fspath(log) if isinstance(log, (str, os.PathLike)) else getattr(log, "name", "log")
    html = render_report(runs, source=Path(name).name, sessions=folded.sessions)
    # A lone surrogate a provider split off (kept verbatim in the log) cannot be UTF-8.
    data = html.encode("utf-8", errors="replace")
    write_atomically(Path(out), data)
    return ReportStats(runs=len(runs), events=stats.events, skipped=stats.skipped, bytes=len(data))
