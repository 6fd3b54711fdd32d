"""MkDocs hooks: tables in the docs that are generated from the code, so they never go stale.

``<!-- loopobs:metrics -->`` in a page becomes the table of every metric of
``loopobs.exporters.catalog.METRICS`` (OTel name, Prometheus name, kind, unit, attributes).
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- loopobs:metrics -->"


def metrics_table() -> str:
    """The catalog's metrics as a Markdown table."""
    from loopobs.exporters import catalog

    rows = ["| OTel instrument | Prometheus name | kind | unit | attributes (labels) |",
            "|---|---|---|---|---|"]
    for spec in catalog.METRICS:
        attributes = ", ".join(f"`{a}`" for a in spec.attributes) or "–"
        rows.append(f"| `{spec.name}` | `{spec.prometheus_name}` | {spec.kind} | "
                    f"`{spec.unit}` | {attributes} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the markers of generated tables."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, metrics_table())
    return markdown
