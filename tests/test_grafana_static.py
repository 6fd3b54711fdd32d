"""Offline checks of ``grafana/``: Prometheus config and alerts (promtool), dashboards (Grafana's
published schema via tsc, PromQL via promtool, names against the catalog), provisioning,
the Collector config and the compose file (Docker is not runnable here, so statically).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopobs.exporters import catalog
from tests import _grafana_schema as schema
from tests._grafana_queries import (
    ALERTS,
    DASHBOARDS,
    GRAFANA,
    alert_rules,
    catalog_series,
    dashboard_panels,
    load_dashboard,
    panel_queries,
    substitute,
)
from tests.e2e._backends import require_binary

PROMETHEUS_DIR = GRAFANA / "prometheus"
PROMETHEUS_YML = PROMETHEUS_DIR / "prometheus.yml"
ALERTS_TEST = PROMETHEUS_DIR / "alerts_test.yml"
COMPOSE = GRAFANA / "docker-compose.yml"
COLLECTOR = GRAFANA / "otel-collector.yml"
DATASOURCES = GRAFANA / "provisioning" / "datasources" / "datasources.yml"
DASHBOARD_PROVIDERS = GRAFANA / "provisioning" / "dashboards" / "dashboards.yml"
DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))
SERIES = catalog_series()
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds to every scraped series."""


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_binary("LOOPOBS_PROMTOOL_BIN", "promtool", "/usr/bin/promtool")


# -- PromQL name analysis -------------------------------------------------------------------------
_KEYWORDS = frozenset({
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "inf", "nan",
})
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^{}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
_IDENT = re.compile(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?")


def _names(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric → labels matched on it, labels used in by/on/... lists) of a PromQL expression."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    grouping: set[str] = set()
    for match in _LABEL_LIST.finditer(text):
        grouping.update(x.strip() for x in match.group(2).split(",") if x.strip())
    text = _LABEL_LIST.sub(" ", text)
    metrics: dict[str, set[str]] = {}
    for match in _SELECTOR.finditer(text):
        name = match.group(1)
        labels = set(_MATCHER.findall(match.group(2)))
        assert name, f"selector without a metric name in {expr!r}"
        metrics.setdefault(name, set()).update(labels)
    text = _SELECTOR.sub(lambda m: f" {m.group(1) or ''} ", text)
    for match in _IDENT.finditer(text):
        ident, call = match.group(1), match.group(2)
        if call or ident.lower() in _KEYWORDS:
            continue
        metrics.setdefault(ident, set())
    return metrics, grouping


def _check_names(expr: str, where: str) -> list[str]:
    """Problems with the metric and label names of ``expr`` (empty when all exist)."""
    problems = []
    metrics, grouping = _names(expr)
    if not metrics and "vector(" not in expr:
        problems.append(f"{where}: no metric found in {expr!r}")
    available: set[str] = set(TARGET_LABELS)
    for name, labels in metrics.items():
        if name not in SERIES:
            problems.append(f"{where}: {name} is not a catalog series")
            continue
        available |= SERIES[name]
        unknown = labels - SERIES[name] - TARGET_LABELS
        if unknown:
            problems.append(f"{where}: {name} has no label(s) {sorted(unknown)}")
    missing = grouping - available
    if missing and all(n in SERIES for n in metrics):
        problems.append(
            f"{where}: grouping label(s) {sorted(missing)} on none of {sorted(metrics)}")
    return problems


def test_name_analysis_finds_metrics_and_labels() -> None:
    metrics, grouping = _names(
        'sum by (le, gen_ai_request_model) (rate(x_bucket{gen_ai_request_model=~"$m", a!="b"}[5m]))'
        " / ignoring (z) group_left sum(y_total) or vector(0)"
    )
    assert metrics == {"x_bucket": {"gen_ai_request_model", "a"}, "y_total": set()}
    assert grouping == {"le", "gen_ai_request_model", "z"}
    assert _check_names("sum(rate(loopobs_runs_total{gen_ai_agent_name=~\".*\"}[1m]))", "ok") == []
    assert _check_names("rate(loopobs_tokens_total{gen_ai_agent_name=\"a\"}[1m])", "w") == [
        "w: loopobs_tokens_total has no label(s) ['gen_ai_agent_name']"
    ]
    assert _check_names("rate(loopobs_no_such_total[1m])", "w") == [
        "w: loopobs_no_such_total is not a catalog series"
    ]
    assert _check_names("sum by (loopobs_run_status) (rate(loopobs_turns_total[1m]))", "w") == [
        "w: grouping label(s) ['loopobs_run_status'] on none of ['loopobs_turns_total']"
    ]


# -- Prometheus config and alert rules ------------------------------------------------------------
def test_prometheus_config_is_valid(promtool: str, tmp_path: Path) -> None:
    shutil.copy(PROMETHEUS_YML, tmp_path / "prometheus.yml")
    shutil.copy(ALERTS, tmp_path / "alerts.yml")
    proc = _run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr
    config = _yaml(PROMETHEUS_YML)
    assert config["rule_files"] == ["alerts.yml"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    demo_targets = [t for sc in jobs["loopobs"]["static_configs"] for t in sc["targets"]]
    assert demo_targets == ["demo:9464"]


def test_prometheus_config_documents_many_workers() -> None:
    text = PROMETHEUS_YML.read_text()
    commented = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    assert "static_configs" in commented
    assert "dns_sd_configs" in commented or "file_sd_configs" in commented


def test_alert_rules_are_valid(promtool: str) -> None:
    proc = _run([promtool, "check", "rules", str(ALERTS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_alert_unit_tests_pass(promtool: str) -> None:
    proc = _run([promtool, "test", "rules", ALERTS_TEST.name], cwd=PROMETHEUS_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_alert_unit_tests_catch_a_changed_threshold(promtool: str, tmp_path: Path) -> None:
    """The unit tests are tight: moving one threshold makes them fail."""
    text = ALERTS.read_text()
    assert "> 2000" in text
    (tmp_path / "alerts.yml").write_text(text.replace("> 2000", "> 3000"))
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yml")
    proc = _run([promtool, "test", "rules", "alerts_test.yml"], cwd=tmp_path)
    assert proc.returncode != 0
    assert "LoopobsTokenBurnRateHigh" in proc.stdout + proc.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases: dict[str, set[str]] = {}
    for test in _yaml(ALERTS_TEST)["tests"]:
        for case in test.get("alert_rule_test", []):
            kind = "firing" if case.get("exp_alerts") else "quiet"
            cases.setdefault(case["alertname"], set()).add(kind)
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) >= 6
    for name in names:
        assert cases.get(name) == {"firing", "quiet"}, f"{name}: {cases.get(name)}"
    assert set(cases) == set(names)


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_rule_shape(rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["for"]
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    assert rule["annotations"]["summary"].strip()
    assert rule["annotations"]["description"].strip()
    assert _check_names(rule["expr"], rule["alert"]) == []


def test_alert_rules_cover_the_issue() -> None:
    """Runaway loop, token burn, tool errors, stream failures, fallbacks, observer errors."""
    by_metric = {
        name: [r["alert"] for r in alert_rules() if name in r["expr"]]
        for name in ("loopobs_loop_detections_total", "loopobs_tokens_total",
                     "loopobs_tool_calls_total", "loopobs_stream_failures_total",
                     "loopobs_fallbacks_total", "loopobs_observer_errors_total")
    }
    assert all(by_metric.values()), by_metric


def test_alert_test_series_use_catalog_names() -> None:
    problems = []
    for test in _yaml(ALERTS_TEST)["tests"]:
        for series in test["input_series"]:
            problems += _check_names(series["series"], test["name"])
    assert problems == []


# -- dashboards ---------------------------------------------------------------------------------
def _toolchain() -> Path:
    tsc, reason = schema.ensure_toolchain()
    if tsc is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires the Grafana schema toolchain: {reason}")
        pytest.skip(reason)
    return tsc


def test_dashboards_exist() -> None:
    assert [p.name for p in DASHBOARD_FILES] == ["loopobs-overview.json"]


@pytest.mark.slow
def test_dashboards_match_grafana_schema() -> None:
    result = schema.check_dashboards(DASHBOARD_FILES, _toolchain())
    assert result.ok, result.output


_Mutation = Callable[[dict[str, Any]], object]
_BREAKAGES: dict[str, tuple[_Mutation, str]] = {
    "unknown top-level key": (lambda d: d.update(titel="x"), "'\"titel\"' does not exist"),
    "gridPos width as text": (
        lambda d: d["panels"][1]["gridPos"].update(w="wide"), "not assignable to type 'number'"),
    "unknown variable type": (
        lambda d: d["templating"]["list"][0].update(type="nonsense"), '"nonsense"'),
    "unknown timeseries legend mode": (
        lambda d: next(p for p in d["panels"] if p["type"] == "timeseries")["options"]["legend"]
        .update(displayMode="lis"), '"lis"'),
    "unknown stat option": (
        lambda d: next(p for p in d["panels"] if p["type"] == "stat")["options"]
        .update(sparkline=True), "'\"sparkline\"' does not exist"),
    "link without title": (lambda d: d["links"][0].pop("title"), "title"),
}


@pytest.mark.slow
@pytest.mark.parametrize("breakage", list(_BREAKAGES))
def test_schema_check_rejects_broken_dashboards(breakage: str, tmp_path: Path) -> None:
    tsc = _toolchain()
    dashboard = load_dashboard(DASHBOARD_FILES[0])
    mutate, message = _BREAKAGES[breakage]
    mutate(dashboard)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(dashboard))
    result = schema.check_dashboards([broken], tsc)
    assert not result.ok
    assert message in result.output, result.output


def _all_queries() -> Iterator[Any]:
    for path in DASHBOARD_FILES:
        yield from panel_queries(path)


def test_every_panel_query_parses(promtool: str, tmp_path: Path) -> None:
    queries = list(_all_queries())
    assert len(queries) >= 25
    rules = [
        {"record": f"loopobs:panel_{q.panel_id}_{q.ref_id}", "expr": substitute(q.expr)}
        for q in queries
    ]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    proc = _run([promtool, "check", "rules", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout


def test_query_parse_check_catches_bad_promql(promtool: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yml"
    unbalanced = substitute("sum(rate(loopobs_runs_total[$__rate_interval])")
    bad = {"record": "loopobs:bad", "expr": unbalanced}
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": [bad]}]}))
    assert _run([promtool, "check", "rules", str(path)]).returncode != 0


def test_panel_queries_use_catalog_names() -> None:
    problems = [p for q in _all_queries() for p in _check_names(q.expr, q.name)]
    assert problems == []


def test_dashboard_shows_every_catalog_metric() -> None:
    exprs = " ".join(q.expr for q in _all_queries())
    missing = [spec.prometheus_name for spec in catalog.METRICS
               if not re.search(rf"\b{re.escape(spec.prometheus_name)}(_bucket|_sum|_count)?\b",
                                exprs)]
    assert missing == []


def test_model_latency_quantiles_and_exemplars() -> None:
    queries = list(_all_queries())
    latency = [q for q in queries if "gen_ai_client_operation_duration_seconds_bucket" in q.expr]
    quantiles = {re.search(r"histogram_quantile\(([\d.]+)", q.expr).group(1)  # type: ignore[union-attr]
                 for q in latency}
    assert quantiles >= {"0.5", "0.95", "0.99"}
    assert all(q.exemplar for q in latency)
    tokens = [q for q in queries if "loopobs_tokens_total" in q.expr and "by (" in q.expr]
    assert any(q.exemplar for q in tokens)
    assert any("gen_ai_request_model" in q.expr and "gen_ai_token_type" in q.expr for q in tokens)


def test_template_variables_are_used() -> None:
    for path in DASHBOARD_FILES:
        dashboard = load_dashboard(path)
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert "gen_ai_request_model" in variables["model"]["query"]
        assert "gen_ai_agent_name" in variables["agent"]["query"]
        exprs = [q.expr for q in panel_queries(path)]
        assert any('gen_ai_request_model=~"$model"' in e for e in exprs)
        assert any('gen_ai_agent_name=~"$agent"' in e for e in exprs)
        text = path.read_text()
        for name in variables:
            assert f"${name}" in text.replace("${", "$").replace("}", ""), f"${name} unused"
        for panel in dashboard_panels(dashboard):
            source = panel.get("datasource") or {}
            if source.get("type") == "prometheus":
                assert source["uid"] == "${datasource}", panel["title"]


def test_panels_are_laid_out_without_overlap() -> None:
    for path in DASHBOARD_FILES:
        dashboard = load_dashboard(path)
        taken: set[tuple[int, int]] = set()
        ids = []
        for panel in dashboard_panels(dashboard):
            ids.append(panel["id"])
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, panel["title"]
            cells = {(pos["x"] + dx, pos["y"] + dy)
                     for dx in range(pos["w"]) for dy in range(pos["h"])}
            assert not cells & taken, f"{panel['title']} overlaps another panel"
            taken |= cells
        assert len(ids) == len(set(ids))


def _datasources() -> dict[str, dict[str, Any]]:
    return {ds["type"]: ds for ds in _yaml(DATASOURCES)["datasources"]}


def test_traces_are_linked_to_jaeger() -> None:
    sources = _datasources()
    jaeger_uid = sources["jaeger"]["uid"]
    destinations = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": catalog.EXEMPLAR_TRACE_ID, "datasourceUid": jaeger_uid}]
    for path in DASHBOARD_FILES:
        dashboard = load_dashboard(path)
        panels = list(dashboard_panels(dashboard))
        traces = [p for p in panels if p["type"] == "traces"]
        assert traces
        for panel in traces:
            assert panel["datasource"] == {"type": "jaeger", "uid": jaeger_uid}
            assert all(t["datasource"]["uid"] == jaeger_uid for t in panel["targets"])
        searches = [t for p in panels for t in p.get("targets", [])
                    if t.get("queryType") == "search"]
        assert searches
        assert all(t["datasource"]["uid"] == jaeger_uid for t in searches)
        assert any("16686" in link["url"] for link in dashboard["links"])


def test_dashboard_provider_points_at_the_mounted_dashboards() -> None:
    provider = _yaml(DASHBOARD_PROVIDERS)["providers"][0]
    grafana = _yaml(COMPOSE)["services"]["grafana"]
    mounts = dict(_volume(v) for v in grafana["volumes"])
    assert mounts["./dashboards"] == provider["options"]["path"]
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (DASHBOARDS / Path(home).relative_to(provider["options"]["path"])).is_file()


# -- Collector and compose (Docker is not available here) -------------------------------------
def _volume(spec: str) -> tuple[str, str]:
    source, target = spec.split(":")[:2]
    return source, target


def _port(spec: str) -> tuple[int, int]:
    host, container = str(spec).split(":")
    return int(host), int(container)


def test_collector_pipelines_are_complete() -> None:
    config = _yaml(COLLECTOR)
    pipelines = config["service"]["pipelines"]
    assert set(pipelines) == {"traces", "metrics"}
    used: dict[str, set[str]] = {"receivers": set(), "processors": set(), "exporters": set()}
    for pipeline in pipelines.values():
        for kind, names in used.items():
            names.update(pipeline.get(kind, []))
    for kind, names in used.items():
        assert names == set(config[kind]), f"{kind}: defined {set(config[kind])}, used {names}"
    assert pipelines["traces"]["exporters"] == ["otlp/jaeger"]
    assert config["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert "prometheus" in pipelines["metrics"]["exporters"]
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["http"]["endpoint"].endswith(":4318")
    assert protocols["grpc"]["endpoint"].endswith(":4317")


def test_compose_services_and_mounts() -> None:
    compose = _yaml(COMPOSE)
    services = compose["services"]
    assert set(services) == {"jaeger", "otel-collector", "prometheus", "grafana", "demo"}
    for name, service in services.items():
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", service["image"]), f"{name}: unpinned image"
        for spec in service.get("volumes", []):
            source, _ = _volume(spec)
            assert source.startswith("."), f"{name}: {spec} is not a repo path"
            assert (GRAFANA / source).resolve().exists(), f"{name}: {source} missing"
        for spec in service.get("ports", []):
            host, container = _port(spec)
            assert 0 < host < 65536
            assert 0 < container < 65536
        for dependency in service.get("depends_on", []):
            assert dependency in services
    assert services["demo"]["image"] == "python:3.11-slim"
    assert "COLLECTOR_OTLP_ENABLED" in services["jaeger"]["environment"]
    assert _port("16686:16686") in [_port(p) for p in services["jaeger"]["ports"]]
    prom = services["prometheus"]
    mounts = dict(_volume(v) for v in prom["volumes"])
    config_in = next(a.split("=", 1)[1] for a in prom["command"] if a.startswith("--config.file="))
    assert mounts["./prometheus/prometheus.yml"] == config_in
    for rule_file in _yaml(PROMETHEUS_YML)["rule_files"]:
        assert mounts[f"./prometheus/{rule_file}"] == str(Path(config_in).parent / rule_file)
    assert "--enable-feature=exemplar-storage" in prom["command"]
    collector = services["otel-collector"]
    collector_mounts = dict(_volume(v) for v in collector["volumes"])
    assert any(a == f"--config={collector_mounts['./otel-collector.yml']}"
               for a in collector["command"])
    grafana_mounts = dict(_volume(v) for v in services["grafana"]["volumes"])
    assert grafana_mounts["./provisioning/datasources"] == "/etc/grafana/provisioning/datasources"
    assert grafana_mounts["./provisioning/dashboards"] == "/etc/grafana/provisioning/dashboards"


def test_compose_hosts_match_the_configs() -> None:
    """Every host:port the configs dial is a compose service listening there."""
    services = _yaml(COMPOSE)["services"]
    listening = {
        "demo": {9464}, "otel-collector": {4317, 4318, 8889}, "jaeger": {4317, 16686},
        "prometheus": {9090},
    }
    for service, ports in listening.items():
        exposed = {_port(p)[1] for p in services[service].get("ports", [])}
        assert exposed <= ports, f"{service} publishes {exposed}, serves {ports}"
    dialled = [t for job in _yaml(PROMETHEUS_YML)["scrape_configs"]
               for sc in job.get("static_configs", []) for t in sc["targets"]]
    dialled += [re.sub(r"^https?://", "", ds["url"]) for ds in _yaml(DATASOURCES)["datasources"]]
    dialled.append(_yaml(COLLECTOR)["exporters"]["otlp/jaeger"]["endpoint"])
    env = services["demo"]["environment"]
    dialled.append(re.sub(r"^https?://", "", env["OTEL_EXPORTER_OTLP_ENDPOINT"]))
    for target in dialled:
        host, port = target.rsplit(":", 1)
        assert host in services, target
        assert int(port) in listening[host], target


def _demo_command() -> list[str]:
    command = _yaml(COMPOSE)["services"]["demo"]["command"]
    script = command[-1] if isinstance(command, list) else command
    words = shlex.split(script.split("exec ", 1)[1])
    assert words[:2] == ["loopobs", "demo"]
    return words


def test_demo_service_runs_the_documented_cli() -> None:
    demo = _yaml(COMPOSE)["services"]["demo"]
    env = demo["environment"]
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    # Scraped directly (job loopobs), so not pushed again via the Collector (job otel-collector).
    assert env["OTEL_METRICS_EXPORTER"] == "none"
    assert "demo:9464" in PROMETHEUS_YML.read_text()
    assert _volume(demo["volumes"][0]) == ("..", "/src")
    words = _demo_command()
    assert {"--forever", "--metrics-addr", "--metrics-port"} <= set(words)
    assert words[words.index("--metrics-addr") + 1] == "0.0.0.0"
    assert words[words.index("--metrics-port") + 1] == "9464"
    helptext = _run([sys.executable, "-m", "loopobs.cli", "demo", "--help"]).stdout
    flags = [w for w in words if w.startswith("--")]
    undocumented = [
        f for f in flags if not re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", helptext)
    ]
    assert undocumented == [], helptext
