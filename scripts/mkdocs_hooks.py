"""MkDocs hooks: tables in the docs that are generated from the code, so they never go stale.

``<!-- loopobs:metrics -->`` in a page becomes the table of every metric of
``loopobs.exporters.catalog.METRICS`` (OTel name, Prometheus name, kind, unit, attributes);
``<!-- loopobs:grafana-readme -->`` becomes ``grafana/README.md``, so the kit's own README is
also the site's page of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

MARKER = "<!-- loopobs:metrics -->"
KIT_MARKER = "<!-- loopobs:grafana-readme -->"
ROOT = Path(__file__).resolve().parents[1]


def metrics_table() -> str:
    """The catalog's metrics as a Markdown table."""
    from loopobs.exporters import catalog

    rows = [
        "| OTel instrument | Prometheus name | kind | unit | attributes (labels) |",
        "|---|---|---|---|---|",
    ]
    for spec in catalog.METRICS:
        attributes = ", ".join(f"`{a}`" for a in spec.attributes) or "–"
        rows.append(
            f"| `{spec.name}` | `{spec.prometheus_name}` | {spec.kind} | "
            f"`{spec.unit}` | {attributes} |"
        )
    return "\n".join(rows)


def grafana_readme() -> str:
    """``grafana/README.md`` below its title, its links made to work from the site."""
    text = (ROOT / "grafana" / "README.md").read_text(encoding="utf-8")
    body = text.split("\n", 1)[1]
    # Its one link into docs/ is relative to grafana/; from the site it is a sibling page.
    return body.replace("](../docs/", "](")


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the markers of generated tables and included pages."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, metrics_table())
    if KIT_MARKER in markdown:
        markdown = markdown.replace(KIT_MARKER, grafana_readme())
    return markdown
