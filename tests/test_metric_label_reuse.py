"""Label sets reused between events: a value folded into ``_other`` is bounded (and counted)
every time it comes back, and a reset lets new values in again."""

from __future__ import annotations

import uuid
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry

from loopobs import ToolPostContext
from loopobs.exporters import MetricsObserver, PrometheusObserver
from loopobs.exporters import catalog as c
from loopobs.testing import metric_points

RUN = uuid.uuid4()


def _post(obs: Any, tool: str, n: int) -> None:
    obs.on_tool_post(
        ToolPostContext(
            run_id=RUN, time_ns=n, tool_call_id=f"c{n}", turn=0, tool=tool, duration_ms=1.0
        )
    )


def _otel_sums(reader: InMemoryMetricReader, name: str) -> dict[frozenset[Any], float]:
    out: dict[frozenset[Any], float] = {}
    for p in metric_points(reader).get(name, []):
        assert isinstance(p, NumberDataPoint)
        out[frozenset(dict(p.attributes or {}).items())] = p.value
    return out


def test_prometheus_counts_every_repeated_fold() -> None:
    registry = CollectorRegistry()
    obs = PrometheusObserver(registry, max_label_values=1)
    for n, tool in enumerate(["a", "b", "b", "b", "a", "b"]):
        _post(obs, tool, n)
    overflow = registry.get_sample_value(
        "loopobs_label_overflow_total", {"loopobs_label": "gen_ai_tool_name"}
    )
    assert overflow == 4
    calls = {
        tool: registry.get_sample_value(
            "loopobs_tool_calls_total",
            {"gen_ai_tool_name": tool, "loopobs_tool_outcome": "output", "gen_ai_agent_name": ""},
        )
        for tool in ("a", c.OVERFLOW_VALUE)
    }
    assert calls == {"a": 2, c.OVERFLOW_VALUE: 4}


def test_otel_counts_every_repeated_fold_and_admits_again_after_reset() -> None:
    reader = InMemoryMetricReader()
    obs = MetricsObserver(MeterProvider(metric_readers=[reader]), max_label_values=1)
    for n, tool in enumerate(["a", "b", "b", "a"]):
        _post(obs, tool, n)
    overflow = _otel_sums(reader, c.LABEL_OVERFLOW.name)
    assert overflow == {frozenset({(c.LOOPOBS_LABEL, "gen_ai_tool_name")}): 2}
    obs.reset()
    _post(obs, "b", 9)  # the bound forgot "a": "b" is admitted now
    calls = _otel_sums(reader, c.TOOL_CALLS.name)
    tool_calls = {dict(k)[c.GEN_AI_TOOL_NAME]: v for k, v in calls.items()}
    assert tool_calls == {"a": 2, c.OVERFLOW_VALUE: 2, "b": 1}
    assert _otel_sums(reader, c.LABEL_OVERFLOW.name) == overflow
