"""The PromQL in ``grafana/``: panel targets and alert rules, with Grafana's variables filled in.

Shared by ``tests/test_grafana_static.py`` (parse with promtool, names against the
catalog) and ``tests/e2e/test_dashboards_prometheus.py`` (evaluate on a real Prometheus).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from loopobs.exporters import catalog

__all__ = [
    "ALERTS",
    "DASHBOARDS",
    "DASHBOARDS_LATEST",
    "GRAFANA",
    "PanelQuery",
    "alert_rules",
    "catalog_series",
    "dashboard_panels",
    "load_dashboard",
    "panel_queries",
    "substitute",
]

REPO = Path(__file__).resolve().parent.parent
GRAFANA = REPO / "grafana"
DASHBOARDS = GRAFANA / "dashboards"
DASHBOARDS_LATEST = GRAFANA / "dashboards-latest"
"""The generated variants for the newest GenAI names (``scripts/grafana_latest.py``)."""
ALERTS = GRAFANA / "prometheus" / "alerts.yml"

_DEFAULT_VALUES = {
    # Grafana's interval variables, as a few scrapes' worth of time.
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


@dataclass(frozen=True, slots=True)
class PanelQuery:
    """One Prometheus target of one panel."""

    dashboard: str
    panel_id: int
    panel_title: str
    ref_id: str
    expr: str
    exemplar: bool

    @property
    def name(self) -> str:
        """``dashboard#panel/ref`` for messages."""
        return f"{self.dashboard}#{self.panel_id}/{self.ref_id} ({self.panel_title})"


def load_dashboard(path: Path) -> dict[str, Any]:
    """The dashboard JSON at ``path``."""
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def dashboard_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows' nested panels included (rows themselves too)."""
    for panel in dashboard.get("panels", []):
        yield panel
        if panel.get("type") == "row":
            yield from panel.get("panels", [])


def _is_prometheus(ref: Any, dashboard: Mapping[str, Any]) -> bool:
    if not isinstance(ref, Mapping):
        return False
    if ref.get("type") == "prometheus":
        return True
    uid = str(ref.get("uid", ""))
    variables = {v.get("name"): v for v in dashboard.get("templating", {}).get("list", [])}
    match = _VARIABLE.fullmatch(uid)
    if match:
        var = variables.get(next(g for g in match.groups() if g))
        return (
            var is not None
            and var.get("type") == "datasource"
            and (var.get("query") == "prometheus")
        )
    return False


def panel_queries(path: Path) -> list[PanelQuery]:
    """The Prometheus targets of every panel of the dashboard at ``path``."""
    dashboard = load_dashboard(path)
    found = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            source = target.get("datasource", panel.get("datasource"))
            if "expr" in target and _is_prometheus(source, dashboard):
                found.append(
                    PanelQuery(
                        path.name,
                        int(panel["id"]),
                        str(panel.get("title", "")),
                        str(target.get("refId", "")),
                        str(target["expr"]),
                        bool(target.get("exemplar", False)),
                    )
                )
    return found


def substitute(expr: str, values: Mapping[str, str] | None = None, default: str = ".*") -> str:
    """``expr`` with Grafana's variables filled: intervals by durations, others by ``default``.

    ``values`` overrides per variable name (without the ``$``).
    """
    table = {**_DEFAULT_VALUES, **(values or {})}

    def fill(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        return table.get(name, default)

    return _VARIABLE.sub(fill, expr)


def alert_rules(path: Path = ALERTS) -> list[dict[str, Any]]:
    """Every alerting rule of the rules file at ``path``."""
    loaded = yaml.safe_load(path.read_text())
    return [rule for group in loaded["groups"] for rule in group["rules"] if "alert" in rule]


def catalog_series(latest: bool = False) -> dict[str, frozenset[str]]:
    """Each Prometheus series name the catalog's metrics produce, with its label names.

    Histograms give ``_bucket`` (plus ``le``), ``_sum`` and ``_count``; counters their
    ``_total`` name; the up-down counter a gauge of its own name. ``latest``: the metrics
    of ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``.
    """
    series: dict[str, frozenset[str]] = {}
    for spec in catalog.metrics_for(latest):
        labels = frozenset(spec.prometheus_labels)
        if spec.kind == "histogram":
            series[f"{spec.prometheus_name}_bucket"] = labels | {"le"}
            series[f"{spec.prometheus_name}_sum"] = labels
            series[f"{spec.prometheus_name}_count"] = labels
        else:
            series[spec.prometheus_name] = labels
    return series
