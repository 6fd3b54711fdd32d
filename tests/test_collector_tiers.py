"""The two-tier Collector configuration for fleets (``grafana/collector/``), read statically.

No Collector binary can be installed here (none is in the reachable registries), so these
check what can be checked without one: every pipeline names components that are defined,
tier 1 routes traces by trace id to tier 2, and every attribute tier 2 samples on is one
loopobs writes on the root span.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopobs.exporters import catalog

TIERS = Path(__file__).resolve().parents[1] / "grafana" / "collector"
FILES = sorted(TIERS.glob("*.yml"))


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_pipelines_name_only_defined_components(path: Path) -> None:
    config = _load(path)
    for name, pipeline in config["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind, []):
                assert component in config.get(kind, {}), f"{path.name} {name}: {component}"
    for extension in config["service"].get("extensions", []):
        assert extension in config["extensions"]


def test_tier_one_routes_traces_by_trace_id_to_tier_two() -> None:
    tier1 = _load(TIERS / "tier1-loadbalancer.yml")
    tier2 = _load(TIERS / "tier2-tail-sampling.yml")
    lb = tier1["exporters"]["loadbalancing"]
    assert lb["routing_key"] == "traceID"
    assert tier1["service"]["pipelines"]["traces"]["exporters"] == ["loadbalancing"]
    port = lb["resolver"]["dns"]["port"]
    assert tier2["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(f":{port}")
    assert "tail_sampling" in tier2["service"]["pipelines"]["traces"]["processors"]


def test_tail_sampling_reads_attributes_loopobs_writes() -> None:
    policies = _load(TIERS / "tier2-tail-sampling.yml")["processors"]["tail_sampling"]["policies"]
    keys: set[str] = set()
    for policy in policies:
        body = policy[policy["type"]]
        if "key" in body:
            keys.add(body["key"])
        for condition in body.get("span", []):
            keys.update(re.findall(r'attributes\["([^"]+)"\]', condition))
    written = {
        value for name, value in vars(catalog).items() if name.isupper() and isinstance(value, str)
    }
    assert keys, "no attribute policy"
    assert keys <= written, sorted(keys - written)
    assert {p["type"] for p in policies} >= {"status_code", "latency", "probabilistic"}
