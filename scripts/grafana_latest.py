"""Generate the dashboards for ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.

Every dashboard in ``grafana/dashboards/`` gets a variant in ``grafana/dashboards-latest/``
that queries the newest GenAI metric names instead of the v1.41 ones: the inference
duration and chunk timings are renamed, the per-call token histogram (one series per
``gen_ai.token.type``) becomes the per-type histograms, and a row of panels shows what only
the newest conventions record (the per-type token counters, model and tool calls per run).
Names come from the catalog, so a rename there reaches both variants.

Run ``python scripts/grafana_latest.py`` after changing a dashboard; ``--check`` exits 1
when a committed variant differs from what this script generates (CI runs the check
through ``tests/test_grafana_latest.py``).
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

from loopobs.exporters import catalog as c

REPO = Path(__file__).resolve().parent.parent
SOURCE = REPO / "grafana" / "dashboards"
TARGET = REPO / "grafana" / "dashboards-latest"

RENAMED = {
    c.OPERATION_DURATION.prometheus_name: c.INFERENCE_DURATION.prometheus_name,
    c.TIME_TO_FIRST_CHUNK.prometheus_name: c.INFERENCE_TIME_TO_FIRST_CHUNK.prometheus_name,
    c.TIME_PER_OUTPUT_CHUNK.prometheus_name: c.INFERENCE_TIME_PER_OUTPUT_CHUNK.prometheus_name,
}
"""Metrics renamed one to one (same kind, unit and labels)."""

TOKEN_HISTOGRAMS = {
    c.TOKEN_INPUT: c.INFERENCE_OPERATION_INPUT_TOKENS.prometheus_name,
    c.TOKEN_OUTPUT: c.INFERENCE_OPERATION_OUTPUT_TOKENS.prometheus_name,
}
"""``gen_ai.client.token.usage`` by token type → the newer per-type histogram."""

_TOKEN_TYPE = c.prometheus_label(c.GEN_AI_TOKEN_TYPE)


def _rename(expr: str) -> str:
    for old, new in RENAMED.items():
        expr = re.sub(rf"\b{re.escape(old)}(?=_bucket|_sum|_count|\b)", new, expr)
    return expr


def _without_token_type(expr: str) -> str:
    """``expr`` with ``gen_ai_token_type`` dropped from its groupings and selectors."""
    expr = re.sub(rf",\s*{_TOKEN_TYPE}\b|\b{_TOKEN_TYPE}\s*,\s*", "", expr)
    return re.sub(rf"{_TOKEN_TYPE}\s*=~?\s*\"[^\"]*\"\s*,?", "", expr)


def _token_targets(target: dict[str, Any]) -> list[dict[str, Any]]:
    """One target per token type in place of a ``gen_ai.client.token.usage`` target."""
    old = c.TOKEN_USAGE.prometheus_name
    out = []
    for kind, name in TOKEN_HISTOGRAMS.items():
        split = copy.deepcopy(target)
        split["refId"] = f"{target['refId']}_{kind}"
        split["expr"] = re.sub(
            rf"\b{old}(?=_bucket|_sum|_count)", name, _without_token_type(target["expr"])
        )
        legend = split.get("legendFormat", "")
        split["legendFormat"] = legend.replace("{{" + _TOKEN_TYPE + "}}", kind)
        out.append(split)
    return out


def _panel(
    panel_id: int,
    title: str,
    description: str,
    unit: str,
    y: int,
    x: int,
    targets: list[tuple[str, str]],
    template: dict[str, Any],
) -> dict[str, Any]:
    panel = copy.deepcopy(template)
    panel.update(
        id=panel_id, title=title, description=description, gridPos={"h": 8, "w": 12, "x": x, "y": y}
    )
    panel["fieldConfig"]["defaults"]["unit"] = unit
    base = template["targets"][0]
    panel["targets"] = [
        {
            **copy.deepcopy(base),
            "refId": chr(ord("A") + i),
            "expr": expr,
            "legendFormat": legend,
            "exemplar": False,
        }
        for i, (expr, legend) in enumerate(targets)
    ]
    return panel


def _latest_row(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Panels of what only the newest conventions record, below every existing panel."""
    panels = dashboard["panels"]
    template = next(p for p in panels if p.get("type") == "timeseries" and p.get("targets"))
    row_template = next(p for p in panels if p.get("type") == "row")
    y = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    next_id = max(p["id"] for p in panels) + 1
    row = copy.deepcopy(row_template)
    row.update(
        id=next_id, title="GenAI latest conventions", gridPos={"h": 1, "w": 24, "x": 0, "y": y}
    )
    counters = (
        c.INFERENCE_INPUT_TOKENS,
        c.INFERENCE_OUTPUT_TOKENS,
        c.INFERENCE_CACHE_READ_TOKENS,
        c.INFERENCE_CACHE_WRITE_TOKENS,
        c.INFERENCE_REASONING_TOKENS,
    )
    model = c.prometheus_label(c.GEN_AI_REQUEST_MODEL)
    agent = c.prometheus_label(c.GEN_AI_AGENT_NAME)
    tokens = _panel(
        next_id + 1,
        "Token rate by type (inference usage counters)",
        "gen_ai.client.inference.usage.* counters: tokens per second by model and type.",
        "short",
        y + 1,
        0,
        [
            (
                f'sum by ({model}) (rate({spec.prometheus_name}{{{model}=~"$model"}}'
                f"[$__rate_interval]))",
                "{{" + model + "}} " + spec.name.removeprefix("gen_ai.client.inference.usage."),
            )
            for spec in counters
        ],
        template,
    )
    calls = _panel(
        next_id + 2,
        "Model and tool calls per run p95",
        "gen_ai.invoke_agent.inference_calls and gen_ai.invoke_agent.tool_calls.",
        "short",
        y + 1,
        12,
        [
            (
                f"histogram_quantile(0.95, sum by (le, {agent}) (rate({spec.prometheus_name}_bucket"
                f'{{{agent}=~"$agent"}}[$__rate_interval])))',
                "{{" + agent + "}} " + label,
            )
            for spec, label in (
                (c.AGENT_INFERENCE_CALLS, "model calls"),
                (c.AGENT_TOOL_CALLS, "tool calls"),
            )
        ],
        template,
    )
    return [row, tokens, calls]


def latest_variant(dashboard: dict[str, Any]) -> dict[str, Any]:
    """The dashboard with every query on the newest GenAI metric names."""
    out = copy.deepcopy(dashboard)
    out["uid"] = f"{dashboard['uid']}-latest"[:40]
    out["title"] = f"{dashboard['title']} (GenAI latest conventions)"
    out["tags"] = [*dashboard.get("tags", []), "gen_ai_latest_experimental"]
    for panel in out["panels"]:
        targets = []
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            if re.search(rf"\b{c.TOKEN_USAGE.prometheus_name}_", expr):
                targets.extend(_token_targets(target))
                continue
            if expr:
                target["expr"] = _rename(expr)
            targets.append(target)
        if "targets" in panel:
            panel["targets"] = targets
        if isinstance(panel.get("description"), str):
            panel["description"] = panel["description"].replace(
                c.TOKEN_USAGE.name, "gen_ai.client.inference.operation.*_tokens"
            )
    out["panels"].extend(_latest_row(out))
    return out


def render(dashboard: dict[str, Any]) -> str:
    """The JSON text written for ``dashboard`` (stable, so the check can compare text)."""
    return json.dumps(latest_variant(dashboard), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write (or with ``--check``, compare) every variant; 1 when a check fails."""
    check = "--check" in argv
    stale = []
    TARGET.mkdir(exist_ok=True)
    for source in sorted(SOURCE.glob("*.json")):
        text = render(json.loads(source.read_text()))
        target = TARGET / source.name
        if check:
            if not target.is_file() or target.read_text() != text:
                stale.append(target.name)
        else:
            target.write_text(text)
    if stale:
        print(f"stale: {', '.join(stale)}; run python scripts/grafana_latest.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
