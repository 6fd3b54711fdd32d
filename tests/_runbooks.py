"""``docs/runbooks.md`` as the HTML page Prometheus serves for the alerts' ``runbook_url``.

Each alert's ``runbook_url`` is ``{{ $externalURL }}/consoles/loopobs-runbooks.html#<alert>``:
Prometheus serves ``grafana/prometheus/consoles/`` (``--web.console.templates``), so the link
works wherever Prometheus runs, with no other server. The page is rendered from the Markdown
source by :func:`render`, which handles the subset the runbooks use (headings, paragraphs,
bullet lists, ``code`` and ``**bold**``); every ``##`` heading becomes an anchor named like
GitHub's (the lower-cased alert name). Console pages are Go templates, so the source must not
contain ``{{``.

Run ``python -m tests._runbooks`` after editing ``docs/runbooks.md``;
``tests/test_grafana_static.py`` fails while the committed page is stale.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

__all__ = ["CONSOLE_PAGE", "RUNBOOKS", "anchor", "render", "sections"]

REPO = Path(__file__).resolve().parent.parent
RUNBOOKS = REPO / "docs" / "runbooks.md"
CONSOLE_PAGE = REPO / "grafana" / "prometheus" / "consoles" / "loopobs-runbooks.html"

_STYLE = (
    "body{font-family:sans-serif;max-width:52em;margin:2em auto;padding:0 1em;line-height:1.45}"
    "h2{border-top:1px solid #ccc;padding-top:1em}code{background:#f3f3f3;padding:0 .2em}"
)


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, spaces to ``-``, punctuation dropped."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


def sections(markdown: str) -> list[str]:
    """The ``##`` headings of ``markdown``, in order."""
    return [line[3:].strip() for line in markdown.splitlines() if line.startswith("## ")]


def _inline(text: str) -> str:
    parts = re.split(r"(`[^`]*`)", text)
    out = []
    for part in parts:
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
        else:
            escaped = html.escape(part)
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped))
    return "".join(out)


def render(markdown: str) -> str:
    """The HTML page for ``markdown`` (the runbooks' Markdown subset)."""
    if "{{" in markdown:
        raise ValueError("'{{' would be a Go template action in a Prometheus console page")
    body: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []

    def flush() -> None:
        if paragraph:
            body.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()
        if items:
            body.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for raw in markdown.splitlines():
        line = raw.rstrip()
        if not line:
            flush()
        elif line.startswith("#"):
            flush()
            level = len(line) - len(line.lstrip("#"))
            text = line[level:].strip()
            ident = f' id="{anchor(text)}"' if level == 2 else ""
            body.append(f"<h{level}{ident}>{_inline(text)}</h{level}>")
        elif line.startswith("- "):
            if paragraph:
                flush()
            items.append(line[2:].strip())
        elif items and line.startswith("  "):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            paragraph.append(line.strip())
    flush()
    title = next(
        (line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), "Runbooks"
    )
    return (
        "<!DOCTYPE html>\n<!-- Generated from docs/runbooks.md by `python -m tests._runbooks`;"
        " do not edit. -->\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head>\n<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def main() -> int:
    """Write the console page from the Markdown source."""
    CONSOLE_PAGE.parent.mkdir(parents=True, exist_ok=True)
    CONSOLE_PAGE.write_text(render(RUNBOOKS.read_text()))
    print(f"wrote {CONSOLE_PAGE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
