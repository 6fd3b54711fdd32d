"""The dashboards for the newest GenAI names: generated, current, and on the catalog's series."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from loopobs.exporters import catalog
from tests._grafana_queries import (
    DASHBOARDS,
    DASHBOARDS_LATEST,
    REPO,
    catalog_series,
    panel_queries,
    substitute,
)
from tests.e2e._backends import require_binary


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "grafana_latest", REPO / "scripts" / "grafana_latest.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
VARIANTS = sorted(DASHBOARDS_LATEST.glob("*.json"))
_SERIES_NAME = re.compile(r"\b((?:gen_ai|loopobs)_[a-z0-9_]+)")


def test_every_dashboard_has_a_current_generated_variant() -> None:
    """Each dashboard's variant is exactly what the generator writes (none hand-edited)."""
    sources = sorted(DASHBOARDS.glob("*.json"))
    assert [p.name for p in VARIANTS] == [p.name for p in sources]
    for source, variant in zip(sources, VARIANTS, strict=True):
        assert variant.read_text() == GENERATOR.render(json.loads(source.read_text())), (
            f"{variant} is stale: run python scripts/grafana_latest.py"
        )
    assert GENERATOR.main(["--check"]) == 0


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.name)
def test_variant_queries_only_the_newest_names(path: Path) -> None:
    """Every series a variant queries exists with the opt-in set; the renamed ones are gone."""
    latest = catalog_series(latest=True)
    default_only = set(catalog_series()) - set(latest)
    labels = {
        label for series in (*latest.values(), *catalog_series().values()) for label in series
    }
    names = {m for q in panel_queries(path) for m in _SERIES_NAME.findall(q.expr)} - labels
    assert names
    assert names - set(latest) == set()
    assert names & default_only == set()


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.name)
def test_variant_shows_every_latest_metric(path: Path) -> None:
    """Each metric recorded with the opt-in set appears in some panel of the variant."""
    exprs = " ".join(q.expr for q in panel_queries(path))
    missing = [
        spec.prometheus_name
        for spec in catalog.METRICS_LATEST
        if not re.search(rf"\b{re.escape(spec.prometheus_name)}(_bucket|_sum|_count)?\b", exprs)
    ]
    assert missing == []


def test_variant_queries_parse(tmp_path: Path) -> None:
    """promtool accepts every query of every variant."""
    promtool = require_binary("LOOPOBS_PROMTOOL_BIN", "promtool", "/usr/bin/promtool")
    rules = [
        {"record": f"loopobs:latest_{q.panel_id}_{q.ref_id}", "expr": substitute(q.expr)}
        for path in VARIANTS
        for q in panel_queries(path)
    ]
    path = tmp_path / "latest.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "latest", "rules": rules}]}))
    proc = subprocess.run(
        [promtool, "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
