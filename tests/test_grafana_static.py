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
from tests import _runbooks as runbooks
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
TARGET_LABELS = frozenset({"job", "instance"})
"""Labels Prometheus adds to every scraped series."""
RECORDED = frozenset(
    rule["record"]
    for group in yaml.safe_load(ALERTS.read_text())["groups"]
    for rule in group["rules"]
    if "record" in rule
)
"""Series the rules file records (the user-set alert thresholds), without labels."""
SERIES = {**catalog_series(), "up": frozenset(), **{name: frozenset() for name in RECORDED}}
"""Every series a query may use: the catalog's, Prometheus' own ``up``, and the recorded ones."""
FAILED_STATUSES = "failed|loop_detected|max_turns|budget_exceeded"
DASHBOARD_UID = "loopobs-overview"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _run(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_binary("LOOPOBS_PROMTOOL_BIN", "promtool", "/usr/bin/promtool")


# -- PromQL name analysis -------------------------------------------------------------------------
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "unless",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "inf",
        "nan",
    }
)
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
            f"{where}: grouping label(s) {sorted(missing)} on none of {sorted(metrics)}"
        )
    return problems


def test_name_analysis_finds_metrics_and_labels() -> None:
    metrics, grouping = _names(
        'sum by (le, gen_ai_request_model) (rate(x_bucket{gen_ai_request_model=~"$m", a!="b"}[5m]))'
        " / ignoring (z) group_left sum(y_total) or vector(0)"
    )
    assert metrics == {"x_bucket": {"gen_ai_request_model", "a"}, "y_total": set()}
    assert grouping == {"le", "gen_ai_request_model", "z"}
    assert _check_names('sum(rate(loopobs_runs_total{gen_ai_agent_name=~".*"}[1m]))', "ok") == []
    assert _check_names('rate(loopobs_fallbacks_total{gen_ai_agent_name="a"}[1m])', "w") == [
        "w: loopobs_fallbacks_total has no label(s) ['gen_ai_agent_name']"
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
    assert f"SUCCESS: {len(alert_rules()) + len(RECORDED)} rules found" in proc.stdout


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


def _seconds(duration: str) -> int:
    value, unit = int(duration[:-1]), duration[-1]
    return value * {"s": 1, "m": 60, "h": 3600}[unit]


def test_every_alert_is_tested_firing_quiet_and_resolving() -> None:
    """Each alert has a case where it fires, one where it stays quiet, and one test in which it
    fires and later, in the same series, is quiet again (resolves)."""
    cases: dict[str, set[str]] = {}
    for test in _yaml(ALERTS_TEST)["tests"]:
        fired_at: dict[str, int] = {}
        for case in sorted(test.get("alert_rule_test", []), key=lambda c: _seconds(c["eval_time"])):
            name, at = case["alertname"], _seconds(case["eval_time"])
            kinds = cases.setdefault(name, set())
            if case.get("exp_alerts"):
                kinds.add("firing")
                fired_at.setdefault(name, at)
            else:
                kinds.add("resolving" if name in fired_at else "quiet")
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) >= 15
    for name in names:
        assert cases.get(name) == {"firing", "quiet", "resolving"}, f"{name}: {cases.get(name)}"
    assert set(cases) == set(names)


def test_token_alert_tests_carry_cache_and_reasoning_series() -> None:
    """The token tests feed cache and reasoning series, so a sum over every token type (which
    counts them twice) fails them."""
    token_types: set[str] = set()
    for test in _yaml(ALERTS_TEST)["tests"]:
        for series in test["input_series"]:
            found = re.search(r'gen_ai_token_type="(\w+)"', series["series"])
            if series["series"].startswith("loopobs_tokens_total") and found:
                token_types.add(found.group(1))
    assert token_types == {"input", "output", "cache_read", "cache_write", "reasoning"}


def test_token_totals_add_input_and_output_only(promtool: str, tmp_path: Path) -> None:
    """Summing every token type double-counts: the alert unit tests catch the old expression."""
    text = ALERTS.read_text()
    assert 'rate(loopobs_tokens_total{gen_ai_token_type=~"input|output"}[5m])' in text
    (tmp_path / "alerts.yml").write_text(
        text.replace(
            'rate(loopobs_tokens_total{gen_ai_token_type=~"input|output"}[5m])',
            "rate(loopobs_tokens_total[5m])",
        )
    )
    shutil.copy(ALERTS_TEST, tmp_path / "alerts_test.yml")
    proc = _run([promtool, "test", "rules", "alerts_test.yml"], cwd=tmp_path)
    assert proc.returncode != 0
    assert "LoopobsTokenBurnRateHigh" in proc.stdout + proc.stderr


def _sums_token_types(expr: str) -> bool:
    """Whether ``expr`` adds up loopobs_tokens_total across token types."""
    if "loopobs_tokens_total" not in expr:
        return False
    for selector in re.findall(r"loopobs_tokens_total\{([^}]*)\}", expr) or [""]:
        if "gen_ai_token_type" in selector:
            continue
        grouping = re.findall(r"\bby\s*\(([^)]*)\)", expr)
        if not any("gen_ai_token_type" in g for g in grouping):
            return True
    return False


def test_no_query_sums_every_token_type() -> None:
    queries = [(q.name, q.expr) for q in _all_queries()]
    queries += [(r["alert"], r["expr"]) for r in alert_rules()]
    assert [name for name, expr in queries if _sums_token_types(expr)] == []
    assert _sums_token_types("sum(rate(loopobs_tokens_total[5m]))")
    assert _sums_token_types(
        'sum by (gen_ai_request_model) (rate(loopobs_tokens_total{a="b"}[5m]))'
    )
    assert not _sums_token_types(
        'sum(rate(loopobs_tokens_total{gen_ai_token_type=~"input|output"}[5m]))'
    )
    assert not _sums_token_types("sum by (gen_ai_token_type) (rate(loopobs_tokens_total[5m]))")


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_rule_shape(rule: dict[str, Any]) -> None:
    assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["for"]
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url", "dashboard_url"}
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    assert annotations["runbook_url"] == (
        "{{ $externalURL }}/consoles/loopobs-runbooks.html#" + runbooks.anchor(rule["alert"])
    )
    assert annotations["dashboard_url"].startswith(f"http://localhost:3000/d/{DASHBOARD_UID}/")
    assert _check_names(rule["expr"], rule["alert"]) == []


def test_dashboard_urls_only_fill_variables_the_dashboard_has() -> None:
    variables = {v["name"] for v in load_dashboard(DASHBOARD_FILES[0])["templating"]["list"]}
    for rule in alert_rules():
        url = rule["annotations"]["dashboard_url"]
        filled = re.findall(r"[?&]var-(\w+)=\{\{ \$labels\.(\w+) \}\}", url)
        assert {name for name, _ in filled} <= variables, rule["alert"]
        grouped = _names(rule["expr"])[1]
        if not re.search(r"\bby\s*\(", rule["expr"]):
            continue  # no aggregation: the series keep all their labels
        for _, label in filled:
            assert label in grouped, f"{rule['alert']}: {label} is not kept by the expression"


def test_severities_page_for_symptoms_and_missing_telemetry() -> None:
    severity = {r["alert"]: r["labels"]["severity"] for r in alert_rules()}
    critical = {name for name, level in severity.items() if level == "critical"}
    assert critical == {
        "LoopobsFailedRunRatioHigh",
        "LoopobsRunsStuck",
        "LoopobsMetricsTargetDown",
        "LoopobsMetricsTargetAbsent",
        "LoopobsCollectorDown",
        "LoopobsCollectorAbsent",
    }
    assert set(severity.values()) == {"critical", "warning", "info"}


def test_per_worker_alerts_keep_job_and_instance() -> None:
    """Ratios and quantiles are grouped per worker, so one bad worker is not averaged away."""
    per_worker = [
        "LoopobsFailedRunRatioHigh",
        "LoopobsRunsStuck",
        "LoopobsModelCallLatencyHigh",
        "LoopobsTimeToFirstTokenHigh",
        "LoopobsStreamFailureRateHigh",
        "LoopobsToolErrorRatioHigh",
        "LoopobsObserverErrors",
        "LoopobsLabelOverflow",
    ]
    rules = {r["alert"]: r for r in alert_rules()}
    for name in per_worker:
        groupings = re.findall(r"\b(?:by|on)\s*\(([^)]*)\)", rules[name]["expr"])
        assert groupings, name
        for grouping in groupings:
            labels = {x.strip() for x in grouping.split(",") if x.strip()}
            assert labels == set() or {"job", "instance"} <= labels, f"{name}: by ({grouping})"


def test_failed_run_ratio_counts_every_failing_status() -> None:
    rule = next(r for r in alert_rules() if r["alert"] == "LoopobsFailedRunRatioHigh")
    assert f'loopobs_run_status=~"{FAILED_STATUSES}"' in rule["expr"]
    assert "increase(loopobs_runs_total[15m])) >= 20" in rule["expr"]  # the volume floor


def test_latency_alerts_compare_against_recorded_thresholds() -> None:
    rules = {r["alert"]: r["expr"] for r in alert_rules()}
    expected = {"loopobs:threshold_model_call_p95_seconds", "loopobs:threshold_ttft_p95_seconds"}
    assert expected == RECORDED
    assert "loopobs:threshold_model_call_p95_seconds" in rules["LoopobsModelCallLatencyHigh"]
    assert "loopobs:threshold_ttft_p95_seconds" in rules["LoopobsTimeToFirstTokenHigh"]
    drawn = " ".join(q.expr for q in _all_queries())
    assert all(name in drawn for name in RECORDED)


# -- runbooks -----------------------------------------------------------------------------------
def test_every_alert_has_a_runbook_section() -> None:
    text = runbooks.RUNBOOKS.read_text()
    sections = runbooks.sections(text)
    assert sections == sorted(set(sections), key=sections.index)  # no duplicates
    assert set(sections) == {r["alert"] for r in alert_rules()}
    for body in re.split(r"^## ", text, flags=re.M)[1:]:
        name = body.splitlines()[0]
        for part in ("**What it means.**", "**What to look at.**", "**What to do.**"):
            assert part in body, f"{name}: no {part}"


def test_runbook_console_page_is_up_to_date() -> None:
    page = runbooks.CONSOLE_PAGE.read_text()
    assert page == runbooks.render(runbooks.RUNBOOKS.read_text()), (
        "run `python -m tests._runbooks` after editing docs/runbooks.md"
    )
    for rule in alert_rules():
        assert f'id="{runbooks.anchor(rule["alert"])}"' in page


def test_runbook_renderer() -> None:
    page = runbooks.render(
        "# T\n\n## Alert One\n\nSome `a<b` and **bold**\ntext.\n\n- one\n  more\n- two\n"
    )
    assert '<h2 id="alert-one">Alert One</h2>' in page
    assert "<p>Some <code>a&lt;b</code> and <strong>bold</strong> text.</p>" in page
    assert "<ul><li>one more</li><li>two</li></ul>" in page
    with pytest.raises(ValueError, match="Go template"):
        runbooks.render("## A\n\n{{ $labels }}\n")


def test_alert_rules_cover_the_issue() -> None:
    """Causes (runaway loop, token burn, tool errors, stream failures, fallbacks, observer
    errors), symptoms (failed runs, latency, first token, stuck runs) and the scrape itself."""
    by_metric = {
        name: [r["alert"] for r in alert_rules() if name in r["expr"]]
        for name in (
            "loopobs_loop_detections_total",
            "loopobs_tokens_total",
            "loopobs_tool_calls_total",
            "loopobs_stream_failures_total",
            "loopobs_fallbacks_total",
            "loopobs_observer_errors_total",
            "loopobs_runs_total",
            "loopobs_runs_active",
            "gen_ai_client_operation_duration_seconds_bucket",
            "gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
        )
    }
    assert all(by_metric.values()), by_metric
    exprs = [r["expr"] for r in alert_rules()]
    for job in ("loopobs", "otel-collector"):
        assert any(f'up{{job=~"{job}.*"}} == 0' in e for e in exprs), job
        assert any(f'absent(up{{job=~"{job}.*"}})' in e for e in exprs), job


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
        lambda d: d["panels"][1]["gridPos"].update(w="wide"),
        "not assignable to type 'number'",
    ),
    "unknown variable type": (
        lambda d: d["templating"]["list"][0].update(type="nonsense"),
        '"nonsense"',
    ),
    "unknown timeseries legend mode": (
        lambda d: next(p for p in d["panels"] if p["type"] == "timeseries")["options"][
            "legend"
        ].update(displayMode="lis"),
        '"lis"',
    ),
    "unknown stat option": (
        lambda d: next(p for p in d["panels"] if p["type"] == "stat")["options"].update(
            sparkline=True
        ),
        "'\"sparkline\"' does not exist",
    ),
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
    missing = [
        spec.prometheus_name
        for spec in catalog.METRICS
        if not re.search(rf"\b{re.escape(spec.prometheus_name)}(_bucket|_sum|_count)?\b", exprs)
    ]
    assert missing == []


def test_model_latency_quantiles_and_exemplars() -> None:
    queries = list(_all_queries())
    latency = [q for q in queries if "gen_ai_client_operation_duration_seconds_bucket" in q.expr]
    quantiles = {
        re.search(r"histogram_quantile\(([\d.]+)", q.expr).group(1)  # type: ignore[union-attr]
        for q in latency
    }
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
        assert variables["traces_datasource"]["type"] == "datasource"
        assert variables["traces_datasource"]["query"] == "jaeger"
        assert variables["job"]["query"] == "label_values(loopobs_runs_active, job)"
        assert 'job=~"$job"' in variables["instance"]["query"]
        for name, label in (
            ("agent", "gen_ai_agent_name"),
            ("provider", "gen_ai_provider_name"),
            ("model", "gen_ai_request_model"),
            ("tool", "gen_ai_tool_name"),
        ):
            query = variables[name]["query"]
            assert query.endswith(f", {label})"), query
            assert 'job=~"$job", instance=~"$instance"' in query, query
        assert 'gen_ai_provider_name=~"$provider"' in variables["model"]["query"]
        exprs = [q.expr for q in panel_queries(path)]
        assert any('gen_ai_request_model=~"$model"' in e for e in exprs)
        assert any('gen_ai_provider_name=~"$provider"' in e for e in exprs)
        assert any('gen_ai_agent_name=~"$agent"' in e for e in exprs)
        # the agent filter reaches the token, tool-call and stream-failure counters
        for metric in (
            "loopobs_tokens_total",
            "loopobs_tool_calls_total",
            "loopobs_stream_failures_total",
        ):
            uses = [e for e in exprs if metric in e]
            assert uses, metric
            assert all(
                re.search(metric + r'\{[^}]*gen_ai_agent_name=~"\$agent"', e) for e in uses
            ), metric
        text = path.read_text()
        for name in variables:
            assert f"${name}" in text.replace("${", "$").replace("}", ""), f"${name} unused"
        for panel in dashboard_panels(dashboard):
            source = panel.get("datasource") or {}
            if source.get("type") == "prometheus":
                assert source["uid"] == "${datasource}", panel["title"]


def test_every_query_selects_job_and_instance() -> None:
    """Every selector of a scraped series filters on $job and $instance (one worker at a time)."""
    missing = []
    for q in _all_queries():
        for name, matchers in re.findall(r"([a-zA-Z_:][\w:]*)\{([^{}]*)\}", q.expr):
            if name in RECORDED:
                continue
            if 'job=~"$job"' not in matchers or 'instance=~"$instance"' not in matchers:
                missing.append(f"{q.name}: {name}")
        bare = [
            m
            for m in re.findall(r"(?<![\w:])([a-z_][\w:]*)(?![\w:{(])", q.expr)
            if m in SERIES and m not in RECORDED
        ]
        missing += [f"{q.name}: {m} without a selector" for m in bare]
    assert missing == []


def test_stat_panels_use_instant_queries() -> None:
    for path in DASHBOARD_FILES:
        for panel in dashboard_panels(load_dashboard(path)):
            if panel["type"] != "stat":
                continue
            for target in panel["targets"]:
                assert target["instant"] is True, panel["title"]
                assert target["range"] is False, panel["title"]
            assert panel["options"]["graphMode"] == "none", panel["title"]


def test_every_metric_panel_has_a_unit() -> None:
    allowed = {"short", "opm", "reqps", "s", "percentunit", "currencyUSD"}
    for path in DASHBOARD_FILES:
        for panel in dashboard_panels(load_dashboard(path)):
            if panel["type"] not in {"stat", "timeseries"}:
                continue
            unit = panel["fieldConfig"]["defaults"].get("unit", "")
            assert unit in allowed or unit.startswith("count:tokens"), (panel["title"], unit)
            assert panel.get("description", "").strip(), panel["title"]


def test_empty_cases_never_add_an_unlabelled_series_beside_real_ones() -> None:
    """``sum by (…)(…) or vector(0)`` always adds a {} 0 series next to the real ones; a grouped
    query fills its empty case with ``or on ()`` (only when nothing matched) or per group."""
    grouped_with_zero = []
    for q in _all_queries():
        if re.search(r"\bby\s*\(", q.expr):
            assert not re.search(r"\bor\s+vector\(", q.expr), q.name
            if "vector(0)" in q.expr:
                assert re.search(r"\bor on \(\) label_replace\(vector\(0\)", q.expr), q.name
                grouped_with_zero.append(q.panel_title)
    assert set(grouped_with_zero) == {
        "Observer errors",
        "Label values folded into _other",
        "Shared budget store latency p95",
    }


def test_dashboard_has_the_operator_panels() -> None:
    panels = {p["title"]: p for p in dashboard_panels(load_dashboard(DASHBOARD_FILES[0]))}
    exprs = {
        title: " ".join(t.get("expr", "") for t in p.get("targets", []))
        for title, p in panels.items()
    }
    assert "gen_ai_client_operation_duration_seconds_count" in exprs["Model-call rate by model"]
    assert 'error_type!=""' in exprs["Model-call error ratio by model"]
    assert 'gen_ai_token_type="cache_read"' in exprs["Cache-hit ratio"]
    assert 'gen_ai_token_type="input"' in exprs["Cache-hit ratio"]
    assert "loopobs:threshold_ttft_p95_seconds" in exprs["Time to first token p50 / p95"]
    for title in ("Failed-run ratio", "Failed-run ratio by agent"):
        assert f'loopobs_run_status=~"{FAILED_STATUSES}"' in exprs[title], title
    assert 'loopobs_run_status="loop_detected"' in exprs["Loops stopped"]
    assert "up{" in exprs["Targets down"]
    assert "up{" in exprs["Scrape targets"]
    assert "loopobs_cost_usd_total" in exprs["Spend / hour"]
    assert 'loopobs_budget_action="stop"' in exprs["Budgets hit"]
    assert (
        "sum by (gen_ai_agent_name) (rate(loopobs_run_cost_usd_sum" in exprs["Spend rate by agent"]
    )
    for title in ("Spend / hour", "Spend rate by model", "Spend rate by agent"):
        assert panels[title]["fieldConfig"]["defaults"]["unit"] == "currencyUSD", title
    ttft = panels["Time to first token p50 / p95"]["fieldConfig"]["overrides"][0]
    assert ttft["matcher"]["options"] == "p95 alert threshold"


def test_panels_are_laid_out_without_overlap() -> None:
    for path in DASHBOARD_FILES:
        dashboard = load_dashboard(path)
        taken: set[tuple[int, int]] = set()
        ids = []
        for panel in dashboard_panels(dashboard):
            ids.append(panel["id"])
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, panel["title"]
            cells = {
                (pos["x"] + dx, pos["y"] + dy) for dx in range(pos["w"]) for dy in range(pos["h"])
            }
            assert not cells & taken, f"{panel['title']} overlaps another panel"
            taken |= cells
        assert len(ids) == len(set(ids))


def _datasources() -> dict[str, dict[str, Any]]:
    return {ds["type"]: ds for ds in _yaml(DATASOURCES)["datasources"]}


def test_traces_come_from_the_trace_data_source_variable() -> None:
    """No hard-coded Jaeger uid or URL: trace panels and links use ``${traces_datasource}``,
    whose default is the provisioned Jaeger data source."""
    sources = _datasources()
    jaeger_uid = sources["jaeger"]["uid"]
    destinations = sources["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert destinations == [{"name": catalog.EXEMPLAR_TRACE_ID, "datasourceUid": jaeger_uid}]
    traces_source = {"type": "jaeger", "uid": "${traces_datasource}"}
    for path in DASHBOARD_FILES:
        dashboard = load_dashboard(path)
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["traces_datasource"]["current"]["value"] == jaeger_uid
        panels = list(dashboard_panels(dashboard))
        traces = [p for p in panels if p["type"] == "traces"]
        assert traces
        for panel in traces:
            assert panel["datasource"] == traces_source
            assert all(t["datasource"] == traces_source for t in panel["targets"])
        searches = [
            t for p in panels for t in p.get("targets", []) if t.get("queryType") == "search"
        ]
        assert searches
        assert all(t["datasource"] == traces_source for t in searches)
        assert all("${traces_datasource}" in link["url"] for link in dashboard["links"])
        text = path.read_text()
        assert "localhost" not in text
        assert "16686" not in text
        assert '"uid": "jaeger"' not in text


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
    # runbook_url: the runbooks page served as a console at Prometheus' external URL
    consoles_in = next(
        a.split("=", 1)[1] for a in prom["command"] if a.startswith("--web.console.templates=")
    )
    assert mounts["./prometheus/consoles"] == consoles_in
    assert (GRAFANA / "prometheus" / "consoles" / runbooks.CONSOLE_PAGE.name).is_file()
    assert "--web.external-url=http://localhost:9090" in prom["command"]
    collector = services["otel-collector"]
    collector_mounts = dict(_volume(v) for v in collector["volumes"])
    assert any(
        a == f"--config={collector_mounts['./otel-collector.yml']}" for a in collector["command"]
    )
    grafana_mounts = dict(_volume(v) for v in services["grafana"]["volumes"])
    assert grafana_mounts["./provisioning/datasources"] == "/etc/grafana/provisioning/datasources"
    assert grafana_mounts["./provisioning/dashboards"] == "/etc/grafana/provisioning/dashboards"


def test_compose_hosts_match_the_configs() -> None:
    """Every host:port the configs dial is a compose service listening there."""
    services = _yaml(COMPOSE)["services"]
    listening = {
        "demo": {9464},
        "otel-collector": {4317, 4318, 8888, 8889},
        "jaeger": {4317, 16686},
        "prometheus": {9090},
    }
    for service, ports in listening.items():
        exposed = {_port(p)[1] for p in services[service].get("ports", [])}
        assert exposed <= ports, f"{service} publishes {exposed}, serves {ports}"
    dialled = [
        t
        for job in _yaml(PROMETHEUS_YML)["scrape_configs"]
        for sc in job.get("static_configs", [])
        for t in sc["targets"]
    ]
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


def test_collector_exposes_and_prometheus_scrapes_its_own_metrics() -> None:
    reader = _yaml(COLLECTOR)["service"]["telemetry"]["metrics"]["readers"][0]
    exporter = reader["pull"]["exporter"]["prometheus"]
    assert (exporter["host"], exporter["port"]) == ("0.0.0.0", 8888)
    jobs = {job["job_name"]: job for job in _yaml(PROMETHEUS_YML)["scrape_configs"]}
    static = jobs["otel-collector-telemetry"]["static_configs"]
    targets = [t for sc in static for t in sc["targets"]]
    assert targets == ["otel-collector:8888"]
    # the meta alerts' job matchers cover every configured job
    assert all(re.fullmatch(r"loopobs.*|otel-collector.*", name) for name in jobs)
