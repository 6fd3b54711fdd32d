"""Bound instruments export exactly what the public API exports, and fall back where they must.

Each test records the same thing twice, once through ``MetricsObserver``'s bound
recorders and once through the SDK's public ``record``/``add``, into two
providers configured alike, and compares everything the readers export except
timestamps: sums, counts, buckets, min/max, and the exemplars' values, trace and
span ids and filtered attributes (a sum's exemplars are sampled at random, so only
their trace and attributes are compared).
"""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest
from opentelemetry.context import get_current
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    InMemoryMetricReader,
    MetricReader,
    NumberDataPoint,
)
from opentelemetry.sdk.metrics.view import View
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs import AgentLoop
from loopobs.contract.errors import RateLimited
from loopobs.exporters import MetricsObserver, TracingObserver, bound_metrics
from loopobs.exporters import catalog as c
from loopobs.exporters.bound_metrics import (
    BoundRecord,
    PublicRecord,
    bind,
    fast_path_available,
)
from loopobs.llm import Fail, Reply, ScriptedClient, ToolCall
from tests._loop_support import explode, search, u
from tests._otel_capture import exported_metrics

pytestmark = pytest.mark.skipif(
    not fast_path_available(),
    reason="bound recording is verified on opentelemetry-sdk "
           f"{', '.join(sorted(bound_metrics.VERIFIED_SDK))} only; this SDK uses the public API")

DELTA: dict[type, AggregationTemporality] = {
    Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}


def snapshot(reader: MetricReader | InMemoryMetricReader) -> dict[str, Any]:
    """Everything a reader exports, timestamps left out, keyed by metric and attributes."""
    assert isinstance(reader, InMemoryMetricReader)
    out: dict[str, Any] = {}
    for name, metric in exported_metrics(reader).items():
        points: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for p in metric.data.data_points:
            key = tuple(sorted(dict(p.attributes or {}).items()))
            exemplars = sorted(
                (e.value, e.trace_id, e.span_id,
                 tuple(sorted(dict(e.filtered_attributes or {}).items())))
                for e in p.exemplars)
            if isinstance(p, HistogramDataPoint):
                points[key] = (p.count, p.sum, tuple(p.bucket_counts),
                               tuple(p.explicit_bounds), p.min, p.max, exemplars)
            else:
                assert isinstance(p, NumberDataPoint)
                # A sum's exemplar reservoir samples at random: which value (and span) it
                # kept differs from run to run, whatever records it.
                points[key] = (p.value, [(e[1], e[3]) for e in exemplars])
        out[name] = (type(metric.data).__name__,
                     getattr(metric.data, "aggregation_temporality", None),
                     getattr(metric.data, "is_monotonic", None), points)
    return out


def _script() -> list[Any]:
    return [
        Reply(text="Let me look that up for you, one moment.",
              tool_calls=(ToolCall("search", {"query": "paris"}),), usage=u(120, 30)),
        Fail(RateLimited("provider hiccup")),
        Reply(text="And one more.", tool_calls=(ToolCall("explode", {}),), usage=u(150, 12)),
        Reply(text="Done: 12 °C and light rain.", thinking="it rains", usage=u(170, 9)),
    ]


class Pair:
    """A bound and a public ``MetricsObserver`` (kept across runs, as in an application)."""

    def __init__(self, bound_provider: MeterProvider, public_provider: MeterProvider) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer = TracerProvider()
        self.tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        self.observers = [TracingObserver(self.tracer), MetricsObserver(bound_provider),
                          MetricsObserver(public_provider, bound_instruments=False)]

    def run(self) -> None:
        """One traced run, under a request span, recorded into both providers.

        Exemplars need a sampled span current when a value is recorded: the chat
        span while chunks stream, the request span for the rest.
        """
        loop = AgentLoop(ScriptedClient(_script(), chunk_size=6), model="m1",
                         tools=[search, explode], detectors=[], max_turns=6,
                         fallback_models=["m2"], observers=self.observers)
        with self.tracer.get_tracer("app").start_as_current_span("request"):
            result = asyncio.run(loop.run("Weather in Paris?"))
        assert result.ok, result.error


def test_a_traced_run_exports_the_same_metrics_and_exemplars() -> None:
    bound_reader, public_reader = InMemoryMetricReader(), InMemoryMetricReader()
    pair = Pair(MeterProvider(metric_readers=[bound_reader]),
                MeterProvider(metric_readers=[public_reader]))
    pair.run()
    bound, public = snapshot(bound_reader), snapshot(public_reader)
    assert bound == public
    # The comparison covered what matters: chunks, tokens, tools, a failure, exemplars.
    for name in (c.TIME_PER_OUTPUT_CHUNK.name, c.TOKEN_USAGE.name, c.TOOL_DURATION.name,
                 c.STREAM_FAILURES.name, c.TOKENS.name):
        assert bound[name][3], name
    for name in (c.TIME_PER_OUTPUT_CHUNK.name, c.TOKEN_USAGE.name):
        assert any(point[-1] for point in bound[name][3].values()), name
    # Chunk gaps are recorded when the attempt ends, yet link to the chat span they timed.
    chats = {s.context.span_id for s in pair.spans.get_finished_spans()
             if s.name.startswith("chat")}
    gap_spans = {e[2] for point in bound[c.TIME_PER_OUTPUT_CHUNK.name][3].values()
                 for e in point[-1]}
    assert gap_spans
    assert gap_spans <= chats


def test_delta_readers_views_and_several_readers_match_the_public_api() -> None:
    def provider() -> tuple[MeterProvider, list[InMemoryMetricReader]]:
        readers = [InMemoryMetricReader(), InMemoryMetricReader(preferred_temporality=DELTA)]
        views = [View(instrument_name=c.TOOL_DURATION.name,
                      attribute_keys={c.GEN_AI_TOOL_NAME}),
                 View(instrument_name=c.TOKENS.name, name="renamed.tokens"),
                 View(instrument_name="*")]
        return MeterProvider(metric_readers=readers, views=views), readers

    bound_provider, bound_readers = provider()
    public_provider, public_readers = provider()
    pair = Pair(bound_provider, public_provider)
    for _ in range(3):  # a delta reader's collect between runs resets its aggregations
        pair.run()
        for b, p in zip(bound_readers, public_readers, strict=True):
            assert snapshot(b) == snapshot(p)


def test_a_reader_added_after_binding_gets_later_values() -> None:
    bound_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    public_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    pair = Pair(bound_provider, public_provider)
    pair.run()
    late_bound, late_public = InMemoryMetricReader(), InMemoryMetricReader()
    bound_provider.add_metric_reader(late_bound)
    public_provider.add_metric_reader(late_public)
    pair.run()
    assert snapshot(late_bound) == snapshot(late_public)
    assert snapshot(late_bound)[c.TURNS.name]


def _instruments() -> tuple[InMemoryMetricReader, Any, Any]:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    return reader, meter.create_histogram("h"), meter.create_counter("n")


def test_values_the_sdk_rejects_go_through_the_public_api(caplog: Any) -> None:
    reader, histogram, counter = _instruments()
    record = bind(histogram, {"k": "v"}, histogram.record)
    add = bind(counter, {"k": "v"}, counter.add)
    assert isinstance(record, BoundRecord)
    assert isinstance(add, BoundRecord)
    for value in (2.0, -1.0, math.nan, math.inf, 3.0):
        record(value)
        add(value)
    got = snapshot(reader)
    ((count, total, *_), ) = list(got["h"][3].values())
    assert (count, total) == (2, 5.0)
    assert [v[0] for v in got["n"][3].values()] == [5.0]
    assert "non-negative" in caplog.text or "not finite" in caplog.text


@pytest.mark.parametrize("values", [[-1.0], [math.nan, math.inf], []])
def test_a_recorder_that_never_got_an_accepted_value_exports_nothing(
        values: list[float], caplog: Any) -> None:
    """Nothing is bound before an accepted value: an empty aggregation would be exported."""
    reader, histogram, counter = _instruments()
    for instrument, public in ((histogram, histogram.record), (counter, counter.add)):
        record = bind(instrument, {"k": "v"}, public)
        assert isinstance(record, BoundRecord)
        for value in values:
            record(value)
        record.many(values, [1] * len(values), get_current())
    assert snapshot(reader) == {}


def test_a_disabled_meter_exports_nothing_through_either_path() -> None:
    from opentelemetry.sdk.metrics._internal import _MeterConfig

    def disabled(scope: Any) -> Any:
        return _MeterConfig(is_enabled=False)

    bound_reader, public_reader = InMemoryMetricReader(), InMemoryMetricReader()
    Pair(MeterProvider(metric_readers=[bound_reader], _meter_configurator=disabled),
         MeterProvider(metric_readers=[public_reader], _meter_configurator=disabled)).run()
    assert snapshot(bound_reader) == snapshot(public_reader) == {}


def test_without_the_fast_path_chunk_gaps_still_link_to_their_chat_span(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On an SDK the fast path does not know, the gaps recorded at the end keep their span."""
    monkeypatch.setattr(bound_metrics, "VERIFIED_SDK", frozenset())
    reader = InMemoryMetricReader()
    pair = Pair(MeterProvider(metric_readers=[reader]),
                MeterProvider(metric_readers=[InMemoryMetricReader()]))
    pair.run()
    chats = {s.context.span_id for s in pair.spans.get_finished_spans()
             if s.name.startswith("chat")}
    gap_spans = {e[2] for point in snapshot(reader)[c.TIME_PER_OUTPUT_CHUNK.name][3].values()
                 for e in point[-1]}
    assert gap_spans
    assert gap_spans <= chats


def test_gaps_captured_without_a_span_take_none_at_flush_time() -> None:
    """An empty captured context stays empty on the public path, as on the bound one."""
    tracer = TracerProvider()
    for fast in (True, False):
        reader, histogram, _ = _instruments()
        record = bind(histogram, {"k": "v"}, histogram.record) if fast \
            else PublicRecord(histogram.record, {"k": "v"})
        captured = get_current()  # no span
        with tracer.get_tracer("t").start_as_current_span("later"):
            record.many([0.1, 0.2], [1, 2], captured)
        (point,) = snapshot(reader)["h"][3].values()
        assert point[0] == 2
        assert point[-1] == [], fast


def test_concurrent_threads_lose_no_value() -> None:
    reader, histogram, counter = _instruments()
    recorders = [bind(counter, {"k": str(i % 3)}, counter.add) for i in range(6)]

    def work(i: int) -> None:
        for _ in range(2_000):
            recorders[i](1)
            bind(histogram, {"k": "x"}, histogram.record)(0.5)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = snapshot(reader)
    assert sorted(v[0] for v in got["n"][3].values()) == [4_000, 4_000, 4_000]
    assert next(iter(got["h"][3].values()))[0] == 12_000


def test_unverified_sdks_and_api_only_instruments_use_the_public_api(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    noop = NoOpMeterProvider().get_meter("t").create_histogram("h")
    assert not isinstance(bind(noop, {}, noop.record), BoundRecord)
    reader, histogram, _ = _instruments()
    monkeypatch.setattr(bound_metrics, "VERIFIED_SDK", frozenset({"0.0.1"}))
    assert not fast_path_available()
    record = bind(histogram, {"k": "v"}, histogram.record)
    assert not isinstance(record, BoundRecord)
    record(1.0)
    assert next(iter(snapshot(reader)["h"][3].values()))[0] == 1
