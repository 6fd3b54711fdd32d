"""PrometheusObserver: exact figures after scripted runs, bounded labels, exemplars, errors."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from loopobs import (
    LoopObserver,
    ObserverSet,
    RunEndContext,
    RunStartContext,
    RunStatus,
    ToolPostContext,
    TurnEndContext,
    Usage,
)
from loopobs.contract import trace_links
from loopobs.exporters import PrometheusObserver
from loopobs.exporters import catalog as c
from tests import _prom_events as ev

AG = {"gen_ai_agent_name": ev.AGENT}
NO_AGENT = {"gen_ai_agent_name": ""}
"""The agent label of events from a run whose start the observer did not see."""
M2 = {"gen_ai_provider_name": ev.PROVIDER, "gen_ai_request_model": "m2"}
CHAT_M2 = {"gen_ai_operation_name": "chat", **M2}


# Labels a test may leave out: constants of one metric (operation name, tool type) and the
# response model (it equals the request model in these scripts), and the run's model on
# the agent duration. Every other label left out must be absent ("").
_WILDCARDS = frozenset({"gen_ai_operation_name", "gen_ai_tool_type", "gen_ai_response_model"})
_AGENT_WILDCARDS = _WILDCARDS | {"gen_ai_request_model"}


def value(obs: PrometheusObserver, name: str, **labels: str) -> float | None:
    """The sample ``name`` with ``labels`` (see ``_WILDCARDS``); None when there is none."""
    loose = _AGENT_WILDCARDS if name.startswith("gen_ai_invoke_agent") else _WILDCARDS
    found = [
        s.value
        for fam in obs.registry.collect()
        for s in fam.samples
        if s.name == name
        and all(s.labels.get(k) == v for k, v in labels.items())
        and all(v == "" for k, v in s.labels.items() if k not in labels and k not in loose)
    ]
    return sum(found) if found else None


def series(obs: PrometheusObserver, sample_name: str) -> list[dict[str, str]]:
    """The label sets of every sample called ``sample_name``."""
    return [
        dict(s.labels)
        for fam in obs.registry.collect()
        for s in fam.samples
        if s.name == sample_name
    ]


@pytest.fixture
def obs() -> PrometheusObserver:
    return PrometheusObserver(CollectorRegistry())


def assert_run_figures(obs: PrometheusObserver, n: int) -> None:
    """Every metric equals ``n`` times the scripted run's figures."""
    tok = "loopobs_tokens_total"
    assert value(obs, tok, **M2, **AG, gen_ai_token_type="input") == n * ev.INPUT_TOKENS
    assert value(obs, tok, **M2, **AG, gen_ai_token_type="output") == n * ev.OUTPUT_TOKENS
    assert value(obs, tok, **M2, **AG, gen_ai_token_type="cache_read") == n * ev.CACHE_READ_TOKENS
    assert value(obs, tok, **M2, **AG, gen_ai_token_type="reasoning") == n * ev.REASONING_TOKENS
    # zero: not recorded
    assert value(obs, tok, **M2, **AG, gen_ai_token_type="cache_write") is None
    assert (
        sum(
            value(obs, tok, **M2, **AG, gen_ai_token_type=t) or 0
            for t in ("input", "output", "cache_read", "cache_write", "reasoning")
        )
        == n * ev.TOKENS_PER_RUN
    )

    use = "gen_ai_client_token_usage"
    for typ, total in (("input", ev.INPUT_TOKENS), ("output", ev.OUTPUT_TOKENS)):
        assert value(obs, f"{use}_count", **CHAT_M2, gen_ai_token_type=typ) == 2 * n
        assert value(obs, f"{use}_sum", **CHAT_M2, gen_ai_token_type=typ) == n * total
    # 100 input tokens fall in le=256, 200 too; 20 and 40 output tokens in le=64
    assert value(obs, f"{use}_bucket", **CHAT_M2, gen_ai_token_type="input", le="64.0") == 0
    assert value(obs, f"{use}_bucket", **CHAT_M2, gen_ai_token_type="input", le="256.0") == 2 * n
    assert value(obs, f"{use}_bucket", **CHAT_M2, gen_ai_token_type="output", le="16.0") == 0
    assert value(obs, f"{use}_bucket", **CHAT_M2, gen_ai_token_type="output", le="64.0") == 2 * n

    dur = "gen_ai_client_operation_duration_seconds"
    assert value(obs, f"{dur}_count", **CHAT_M2, error_type="") == 2 * n
    assert value(obs, f"{dur}_sum", **CHAT_M2, error_type="") == pytest.approx(1.2 * n)
    assert value(obs, f"{dur}_bucket", **CHAT_M2, error_type="", le="0.64") == n  # 0.4 s only
    m1_failed = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": ev.PROVIDER,
        "gen_ai_request_model": "m1",
        "error_type": "RateLimited",
    }
    assert value(obs, f"{dur}_count", **m1_failed) == n
    assert value(obs, f"{dur}_sum", **m1_failed) == pytest.approx(0.05 * n)
    ttfc = "gen_ai_client_operation_time_to_first_chunk_seconds"
    assert value(obs, f"{ttfc}_count", **CHAT_M2) == n
    assert value(obs, f"{ttfc}_sum", **CHAT_M2) == pytest.approx(0.12 * n)

    tool = "gen_ai_execute_tool_duration_seconds"
    assert value(obs, f"{tool}_count", **AG, gen_ai_tool_name="search", error_type="") == n
    assert value(obs, f"{tool}_sum", **AG, gen_ai_tool_name="search", error_type="") == (
        pytest.approx(0.05 * n)
    )
    fetch_err = {**AG, "gen_ai_tool_name": "fetch", "error_type": "ToolExecutionError"}
    assert value(obs, f"{tool}_count", **fetch_err) == n
    calls = "loopobs_tool_calls_total"
    assert value(obs, calls, **AG, gen_ai_tool_name="search", loopobs_tool_outcome="output") == n
    assert value(obs, calls, **AG, gen_ai_tool_name="fetch", loopobs_tool_outcome="error") == n

    agent = "gen_ai_invoke_agent_duration_seconds"
    assert value(obs, f"{agent}_count", **AG, error_type="") == n
    assert value(obs, f"{agent}_sum", **AG, error_type="") == pytest.approx(1.5 * n)
    assert value(obs, "loopobs_runs_total", **AG, loopobs_run_status="completed") == n
    assert value(obs, "loopobs_runs_active", **AG) == 0
    assert value(obs, "loopobs_turns_total", **AG) == 2 * n

    assert (
        value(
            obs,
            "loopobs_stream_failures_total",
            **AG,
            gen_ai_provider_name=ev.PROVIDER,
            gen_ai_request_model="m1",
            error_type="RateLimited",
        )
        == n
    )
    moved = {"loopobs_model_from": "m1", "loopobs_model_to": "m2"}
    assert value(obs, "loopobs_fallbacks_total", **moved) == n
    assert value(obs, "loopobs_model_switches_total", **moved) == n
    assert value(obs, "loopobs_compactions_total", loopobs_compaction_reason="threshold") == n
    assert (
        value(obs, "loopobs_compaction_tokens_saved_total", loopobs_compaction_reason="threshold")
        == n * ev.TOKENS_SAVED
    )
    assert (
        value(
            obs,
            "loopobs_loop_detections_total",
            gen_ai_tool_name="search",
            loopobs_detection_action="warn",
        )
        == n
    )
    assert value(obs, "loopobs_convergence_detections_total", loopobs_detection_action="warn") == n
    assert series(obs, "loopobs_label_overflow_total") == []
    assert obs.open_runs == 0


def test_one_run_records_the_scripted_figures(obs: PrometheusObserver) -> None:
    """Every catalog metric the run touches equals the scripted figure exactly."""
    ev.emit_run(obs)
    assert_run_figures(obs, 1)


def test_runs_active_counts_open_runs_and_agent_state_is_released(
    obs: PrometheusObserver,
) -> None:
    """``loopobs_runs_active`` is 1 inside a run and 0 after; no per-run state stays behind."""
    inside: list[tuple[float | None, int]] = []
    ev.emit_run(
        obs,
        before_end=lambda: inside.append((value(obs, "loopobs_runs_active", **AG), obs.open_runs)),
    )
    assert inside == [(1.0, 1)]
    assert value(obs, "loopobs_runs_active", **AG) == 0
    assert obs.open_runs == 0


def test_hundred_concurrent_runs_sum_exactly(obs: PrometheusObserver) -> None:
    """100 runs on 100 threads, all open at once, then all ended: exact sums, no state left."""
    n = 100
    all_open = threading.Barrier(n + 1)
    checked = threading.Barrier(n + 1)

    def hold() -> None:
        all_open.wait(timeout=30)
        checked.wait(timeout=30)

    with ThreadPoolExecutor(max_workers=n) as pool:
        futures = [pool.submit(ev.emit_run, obs, before_end=hold) for _ in range(n)]
        all_open.wait(timeout=30)
        assert value(obs, "loopobs_runs_active", **AG) == n
        assert obs.open_runs == n
        checked.wait(timeout=30)
        run_ids = {f.result() for f in futures}
    assert len(run_ids) == n
    assert_run_figures(obs, n)


def test_default_registry_is_private() -> None:
    """Without a registry the observer makes its own and never touches the global one."""
    a, b = PrometheusObserver(), PrometheusObserver()
    assert a.registry is not REGISTRY
    assert a.registry is not b.registry
    ev.emit_run(a)
    assert REGISTRY.get_sample_value("loopobs_turns_total", AG) is None
    assert b.registry.get_sample_value("loopobs_turns_total", AG) is None
    assert a.registry.get_sample_value("loopobs_turns_total", AG) == 2


def test_names_units_and_buckets_come_from_the_catalog(obs: PrometheusObserver) -> None:
    """Each catalog metric is registered under its OTel→Prometheus name, labels and buckets."""
    families = {fam.name: fam for fam in obs.registry.collect()}
    for spec in c.METRICS:
        family = spec.prometheus_name.removesuffix("_total")
        assert family in families, spec.name
        assert families[family].unit == spec.prometheus_unit
    expected = {
        "gen_ai_client_token_usage_bucket",
        "gen_ai_client_operation_duration_seconds_bucket",
        "loopobs_tokens_total",
        "loopobs_tool_calls_total",
        "loopobs_loop_detections_total",
        "loopobs_runs_active",
    }
    ev.emit_run(obs)
    names = {s.name for fam in obs.registry.collect() for s in fam.samples}
    assert expected <= names
    for spec in c.METRICS:
        sample = spec.prometheus_name + ("_bucket" if spec.kind == "histogram" else "")
        for labels in series(obs, sample):
            assert set(labels) - {"le"} == set(spec.prometheus_labels), spec.name
    token_les = {lab["le"] for lab in series(obs, "gen_ai_client_token_usage_bucket")}
    go_floats = {floatToGoString(b) for b in c.TOKEN_BUCKETS}  # type: ignore[no-untyped-call]
    assert token_les == go_floats | {"+Inf"}


class RaisesOnTurnEnd(LoopObserver):
    def on_turn_end(self, ctx: TurnEndContext) -> None:
        raise RuntimeError("observer bug")


def test_observer_errors_from_the_set_stay_monotonic(obs: PrometheusObserver) -> None:
    """Failures counted by the ObserverSet show up; resetting the set never lowers them."""
    observers = ObserverSet([RaisesOnTurnEnd(), obs])
    errors = {"loopobs_observer_name": "RaisesOnTurnEnd", "loopobs_observer_hook": "on_turn_end"}
    assert value(obs, "loopobs_observer_errors_total", **errors) is None
    ev.emit_run(observers)
    assert value(obs, "loopobs_observer_errors_total", **errors) == 2
    assert value(obs, "loopobs_turns_total", **AG) == 2  # the failing observer did not stop us
    observers.reset()
    assert value(obs, "loopobs_observer_errors_total", **errors) == 2
    ev.emit_run(observers)
    assert value(obs, "loopobs_observer_errors_total", **errors) == 4
    observers.remove(obs)
    assert value(obs, "loopobs_observer_errors_total", **errors) == 4


def test_ten_thousand_tool_names_stay_bounded() -> None:
    """A model inventing 10,000 tool names creates at most max_label_values + 1 series."""
    limit = 50
    obs = PrometheusObserver(max_label_values=limit)
    rid = uuid.uuid4()
    for i in range(10_000):
        obs.on_tool_post(
            ToolPostContext(
                run_id=rid,
                time_ns=i,
                tool_call_id=f"c{i}",
                turn=0,
                tool=f"tool-{i}",
                duration_ms=1.0,
            )
        )
    calls = series(obs, "loopobs_tool_calls_total")
    durations = series(obs, "gen_ai_execute_tool_duration_seconds_count")
    assert len({s["gen_ai_tool_name"] for s in calls}) == limit + 1
    assert len(calls) == (limit + 1) * 4  # each tool's four outcomes start at zero
    assert len(durations) == limit + 1
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name=c.OVERFLOW_VALUE,
            loopobs_tool_outcome="output",
            **NO_AGENT,
        )
        == 10_000 - limit
    )
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="tool-0",
            loopobs_tool_outcome="output",
            **NO_AGENT,
        )
        == 1
    )
    assert (
        value(obs, "loopobs_label_overflow_total", loopobs_label="gen_ai_tool_name")
        == 10_000 - limit
    )
    assert obs.label_bounds["gen_ai_tool_name"].admitted == {f"tool-{i}" for i in range(limit)}
    # an admitted name keeps its own series after the limit is reached
    obs.on_tool_post(
        ToolPostContext(
            run_id=rid, time_ns=0, tool_call_id="x", turn=0, tool="tool-3", duration_ms=1.0
        )
    )
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="tool-3",
            loopobs_tool_outcome="output",
            **NO_AGENT,
        )
        == 2
    )


def test_each_label_name_has_its_own_bound() -> None:
    """Each label name admits its own first values; each overflow is counted per label."""
    obs = PrometheusObserver(max_label_values=1)
    ev.emit_run(obs)  # models m1 then m2, tools search then fetch, outcomes output then error
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="search",
            loopobs_tool_outcome="output",
            **AG,
        )
        == 1
    )
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="_other",
            loopobs_tool_outcome="_other",
            **AG,
        )
        == 1
    )
    assert value(obs, "loopobs_label_overflow_total", loopobs_label="gen_ai_tool_name") == 1
    assert value(obs, "loopobs_label_overflow_total", loopobs_label="loopobs_tool_outcome") == 1
    # from/to are separate label names: m1 and m2 each take their own slot
    assert (
        value(obs, "loopobs_fallbacks_total", loopobs_model_from="m1", loopobs_model_to="m2") == 1
    )
    # m1 took the request_model slot; m2's successful calls fold into _other (at the
    # start of each call, for its chunk timings, and at its success)
    assert (
        value(
            obs,
            "loopobs_tokens_total",
            gen_ai_provider_name=ev.PROVIDER,
            gen_ai_request_model="_other",
            gen_ai_token_type="input",
            **AG,
        )
        == ev.INPUT_TOKENS
    )
    assert value(obs, "loopobs_label_overflow_total", loopobs_label="gen_ai_request_model") == 4
    assert value(obs, "loopobs_label_overflow_total", loopobs_label="loopobs_model_to") is None


def test_max_label_values_must_be_positive() -> None:
    """A limit below 1 is refused."""
    with pytest.raises(ValueError, match="max_label_values"):
        PrometheusObserver(max_label_values=0)


def test_repeated_label_sets_reuse_cached_children(
    obs: PrometheusObserver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first event, the same labels never go through ``.labels()`` again."""
    ev.emit_run(obs)
    calls: list[Any] = []
    metric = obs._families[c.TOOL_CALLS.name].metric
    original = metric.labels

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(metric, "labels", counting)
    ev.emit_run(obs)
    assert calls == []
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="search",
            loopobs_tool_outcome="output",
            **AG,
        )
        == 2
    )


def exemplars(obs: PrometheusObserver) -> dict[str, list[dict[str, str]]]:
    """Exemplar labels by sample name, read back through the OpenMetrics parser."""
    text = openmetrics_latest(obs.registry).decode()  # type: ignore[no-untyped-call]
    out: dict[str, list[dict[str, str]]] = {}
    for fam in text_string_to_metric_families(text):  # type: ignore[no-untyped-call]
        for s in fam.samples:
            if s.exemplar is not None:
                out.setdefault(s.name, []).append(dict(s.exemplar.labels))
    return out


def test_exemplars_carry_the_runs_trace_id(obs: PrometheusObserver) -> None:
    """Token and duration samples of a traced run carry its trace and span id."""
    rid = uuid.uuid4()
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    trace_links.publish(rid, trace_id, span_id)
    try:
        ev.emit_run(obs, run_id=rid)
    finally:
        trace_links.withdraw(rid)
    found = exemplars(obs)
    link = {"trace_id": trace_id, "span_id": span_id}
    for name in (
        "gen_ai_client_token_usage_bucket",
        "gen_ai_client_operation_duration_seconds_bucket",
        "gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
        "gen_ai_execute_tool_duration_seconds_bucket",
        "gen_ai_invoke_agent_duration_seconds_bucket",
        "loopobs_tokens_total",
    ):
        assert found.get(name), name
        assert all(ex == link for ex in found[name]), name
    assert "loopobs_turns_total" not in found  # counts carry none


def test_no_exemplars_when_untraced_or_disabled() -> None:
    """An untraced run, or ``exemplars=False``, exports no exemplar."""
    untraced = PrometheusObserver()
    ev.emit_run(untraced)
    assert exemplars(untraced) == {}
    rid = uuid.uuid4()
    trace_links.publish(rid, "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    try:
        disabled = PrometheusObserver(exemplars=False)
        ev.emit_run(disabled, run_id=rid)
    finally:
        trace_links.withdraw(rid)
    assert exemplars(disabled) == {}


def test_failed_run_and_run_joined_halfway(obs: PrometheusObserver) -> None:
    """A failed run gets error_type; a run whose start was missed does not drive active < 0."""
    from loopobs import MaxTurnsExceeded

    rid = uuid.uuid4()
    obs.on_run_start(RunStartContext(run_id=rid, time_ns=0, session_id=rid, agent="a"))
    obs.on_run_end(
        RunEndContext(
            run_id=rid,
            time_ns=1,
            success=False,
            status=RunStatus.FAILED,
            error=MaxTurnsExceeded("too many"),
            duration_ms=2000.0,
        )
    )
    assert (
        value(
            obs,
            "gen_ai_invoke_agent_duration_seconds_count",
            gen_ai_agent_name="a",
            error_type="MaxTurnsExceeded",
        )
        == 1
    )
    assert value(obs, "loopobs_runs_total", gen_ai_agent_name="a", loopobs_run_status="failed") == 1
    stray = uuid.uuid4()
    obs.on_turn_end(TurnEndContext(run_id=stray, time_ns=2, turn=0, success=True))
    obs.on_run_end(RunEndContext(run_id=stray, time_ns=3, success=True, duration_ms=10.0))
    assert value(obs, "loopobs_turns_total", gen_ai_agent_name="") == 1
    assert (
        value(obs, "loopobs_runs_total", gen_ai_agent_name="", loopobs_run_status="completed") == 1
    )
    assert value(obs, "loopobs_runs_active", gen_ai_agent_name="a") == 0
    assert series(obs, "loopobs_runs_active") == [{"gen_ai_agent_name": "a"}]
    assert obs.open_runs == 0


async def test_hundred_concurrent_agent_loop_runs(obs: PrometheusObserver) -> None:
    """100 AgentLoop runs on separate sessions at once: counters equal the runs' usage sums."""
    import asyncio

    # A thread per concurrent sync tool call: with the default 32, a starved machine (other
    # tests on the other core) leaves calls with no free thread, and they fail at once.
    loop = ev.make_loop(obs, sync_tool_workers=100)
    results = await asyncio.gather(*(loop.run(f"q{i}") for i in range(100)))
    assert {r.status.value for r in results} == {"completed"}
    assert len({r.session.id for r in results}) == 100
    used_in = sum(r.usage.input_tokens for r in results)
    used_out = sum(r.usage.output_tokens for r in results)
    assert (used_in, used_out) == (100 * sum(ev.LOOP_INPUT), 100 * sum(ev.LOOP_OUTPUT))
    m1 = {"gen_ai_provider_name": "scripted", "gen_ai_request_model": "m1"}
    assert value(obs, "loopobs_tokens_total", **m1, **AG, gen_ai_token_type="input") == used_in
    assert value(obs, "loopobs_tokens_total", **m1, **AG, gen_ai_token_type="output") == used_out
    chat = {"gen_ai_operation_name": "chat", **m1}
    assert value(obs, "gen_ai_client_token_usage_count", **chat, gen_ai_token_type="input") == 200
    assert (
        value(obs, "gen_ai_client_token_usage_sum", **chat, gen_ai_token_type="output") == used_out
    )
    assert (
        value(obs, "gen_ai_client_operation_duration_seconds_count", **chat, error_type="") == 200
    )
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="search",
            loopobs_tool_outcome="output",
            **AG,
        )
        == 100
    )
    assert (
        value(
            obs,
            "gen_ai_execute_tool_duration_seconds_count",
            **AG,
            gen_ai_tool_name="search",
            error_type="",
        )
        == 100
    )
    assert value(obs, "loopobs_runs_total", **AG, loopobs_run_status="completed") == 100
    assert value(obs, "gen_ai_invoke_agent_duration_seconds_count", **AG, error_type="") == 100
    assert value(obs, "loopobs_turns_total", **AG) == sum(r.turns for r in results) == 200
    assert value(obs, "loopobs_runs_active", **AG) == 0
    assert obs.open_runs == 0


async def test_agent_loop_fallback_is_counted(obs: PrometheusObserver) -> None:
    """A retryable failure on m1 falls back to m2: failure, fallback, switch and tokens by model."""
    from loopobs import AgentLoop, RateLimited
    from loopobs.llm import Fail, Reply, ScriptedClient

    client = ScriptedClient(
        [Fail(RateLimited("busy")), Reply(text="ok", usage=Usage(input_tokens=7, output_tokens=3))]
    )
    loop = AgentLoop(client, model="m1", fallback_models=["m2"], observers=[obs])
    result = await loop.run("q")
    assert result.ok
    default_agent = {"gen_ai_agent_name": "agent"}
    assert (
        value(
            obs,
            "loopobs_stream_failures_total",
            gen_ai_provider_name="scripted",
            gen_ai_request_model="m1",
            error_type="RateLimited",
            **default_agent,
        )
        == 1
    )
    assert (
        value(obs, "loopobs_fallbacks_total", loopobs_model_from="m1", loopobs_model_to="m2") == 1
    )
    assert (
        value(
            obs,
            "loopobs_tokens_total",
            gen_ai_provider_name="scripted",
            gen_ai_request_model="m2",
            gen_ai_token_type="input",
            **default_agent,
        )
        == 7
    )
    assert (
        value(
            obs,
            "gen_ai_client_operation_duration_seconds_count",
            gen_ai_operation_name="chat",
            gen_ai_provider_name="scripted",
            gen_ai_request_model="m1",
            error_type="RateLimited",
        )
        == 1
    )


def test_failed_tool_without_error_object_is_tool_error(obs: PrometheusObserver) -> None:
    """``is_error`` with no error object is labelled ``ToolError``, as MetricsObserver does."""
    rid = uuid.uuid4()
    obs.on_tool_post(
        ToolPostContext(
            run_id=rid,
            time_ns=0,
            tool_call_id="c",
            turn=0,
            tool="t",
            is_error=True,
            outcome="error",
            duration_ms=5.0,
        )
    )
    assert (
        value(
            obs,
            "gen_ai_execute_tool_duration_seconds_count",
            gen_ai_tool_name="t",
            error_type="ToolError",
        )
        == 1
    )
    assert (
        value(
            obs,
            "loopobs_tool_calls_total",
            gen_ai_tool_name="t",
            loopobs_tool_outcome="error",
            **NO_AGENT,
        )
        == 1
    )


@pytest.mark.parametrize("deltas", [0, 1])
def test_an_attempt_without_a_chunk_gap_creates_no_chunk_timing_series(deltas: int) -> None:
    """A call that fails before its second chunk, or answers in one, leaves the series alone."""
    from loopobs.contract import events as events_
    from loopobs.contract.errors import RateLimited

    registry = CollectorRegistry()
    obs = PrometheusObserver(registry)
    rid = uuid.uuid4()
    obs.on_stream_start(
        events_.StreamStartContext(
            run_id=rid, time_ns=0, turn=0, model="brand-new-model", provider="p"
        )
    )
    for n in range(deltas):
        obs.on_text_delta(events_.TextDeltaContext(run_id=rid, time_ns=n, turn=0, delta="x"))
    obs.on_stream_failure(
        events_.StreamFailureContext(
            run_id=rid,
            time_ns=9,
            turn=0,
            model="brand-new-model",
            provider="p",
            error=RateLimited("busy"),
        )
    )
    names = {s.name for family in registry.collect() for s in family.samples}
    assert not any("time_per_output_chunk" in name for name in names)
