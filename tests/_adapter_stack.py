"""Every observer an adapter feeds, on in-memory backends, and the checks each adapter test makes.

:class:`Stack` holds a recorder, the tracing observer (in-memory spans), the OTel
metrics observer (in-memory reader), the Prometheus observer (a fresh registry)
and a JSONL recorder (a temporary file). Its checks are what every framework
adapter must satisfy on a real run of its framework: the event contract holds,
one ``invoke_agent`` trace with ``chat`` and ``execute_tool`` children, token
counts equal to what the model reported, OTel and Prometheus metric sums equal,
no run left active, and a JSONL log that ``loopobs inspect`` reads.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs.cli import main as cli_main
from loopobs.core.observer import LoopObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.jsonl import JsonlRecorder
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.prometheus import PrometheusObserver
from loopobs.exporters.tracing import TracingObserver
from loopobs.testing import RecordingObserver, assert_contract, metric_points


@dataclass
class Stack:
    """The observers of one test and the backends they write to."""

    recorder: RecordingObserver
    spans: InMemorySpanExporter
    tracer_provider: TracerProvider
    reader: InMemoryMetricReader
    meter_provider: MeterProvider
    tracing: TracingObserver
    metrics: MetricsObserver
    prometheus: PrometheusObserver
    jsonl: JsonlRecorder
    log: Path

    @property
    def observers(self) -> list[LoopObserver]:
        """The observers to hand to an adapter."""
        return [self.recorder, self.tracing, self.metrics, self.prometheus, self.jsonl]

    def close(self) -> None:
        """Flush and shut every backend down."""
        self.jsonl.shutdown()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # -- the checks ------------------------------------------------------------------------
    def finished_spans(self) -> Sequence[ReadableSpan]:
        """Every span ended so far."""
        return self.spans.get_finished_spans()

    def check_contract(self) -> None:
        """The recorded stream keeps every guarantee of the event contract."""
        assert_contract(self.recorder.events)

    def check_trace(self, agent: str, *, chats: int, tools: Sequence[str]) -> None:
        """One trace per run rooted at ``invoke_agent {agent}``; chat and tool spans under it."""
        spans = self.finished_spans()
        roots = [s for s in spans if s.parent is None]
        assert [s.name for s in roots] == [f"invoke_agent {agent}"], [s.name for s in roots]
        trace_id = roots[0].context.trace_id
        assert all(s.context.trace_id == trace_id for s in spans)
        by_id = {s.context.span_id: s for s in spans}

        def ancestors(span: ReadableSpan) -> Iterator[ReadableSpan]:
            while span.parent is not None:
                span = by_id[span.parent.span_id]
                yield span

        chat = [s for s in spans if s.name.startswith("chat ")]
        tool = [s for s in spans if s.name.startswith("execute_tool ")]
        assert len(chat) == chats, [s.name for s in spans]
        assert sorted(s.name for s in tool) == sorted(f"execute_tool {t}" for t in tools)
        for span in (*chat, *tool):
            assert roots[0] in list(ancestors(span))

    def chat_tokens(self) -> tuple[int, int]:
        """Input and output tokens summed over the chat spans."""
        spans = [s for s in self.finished_spans() if s.name.startswith("chat ")]
        def tokens(span: ReadableSpan, key: str) -> int:
            value = (span.attributes or {}).get(key, 0)
            assert isinstance(value, int)
            return value

        return (sum(tokens(s, c.GEN_AI_USAGE_INPUT_TOKENS) for s in spans),
                sum(tokens(s, c.GEN_AI_USAGE_OUTPUT_TOKENS) for s in spans))

    def otel_sums(self) -> dict[str, float]:
        """Per catalog metric: the sum over its points (histograms: the sum of observations)."""
        points = metric_points(self.reader)
        out: dict[str, float] = {}
        for spec in c.METRICS:
            if spec.name in (c.OBSERVER_ERRORS.name, c.LABEL_OVERFLOW.name):
                continue
            total = 0.0
            for p in points.get(spec.name, []):
                total += p.sum if isinstance(p, HistogramDataPoint) else p.value
            out[spec.name] = total
        return out

    def prometheus_sums(self) -> dict[str, float]:
        """The same sums read from the Prometheus registry."""
        out: dict[str, float] = {}
        families = {m.name: m for m in self.prometheus.registry.collect()}
        for spec in c.METRICS:
            if spec.name in (c.OBSERVER_ERRORS.name, c.LABEL_OVERFLOW.name):
                continue
            name = spec.prometheus_name
            family = families.get(name.removesuffix("_total"))
            total = 0.0
            if family is not None:
                wanted = {"histogram": name + "_sum", "counter": name}.get(spec.kind, name)
                total = sum(s.value for s in family.samples if s.name == wanted)
            out[spec.name] = total
        return out

    def check_metrics(self, *, input_tokens: int, output_tokens: int, runs: int) -> None:
        """OTel and Prometheus agree on every metric; tokens are the model's; nothing active."""
        otel, prom = self.otel_sums(), self.prometheus_sums()
        durations = {c.OPERATION_DURATION.name, c.TIME_TO_FIRST_CHUNK.name,
                     c.TOOL_DURATION.name, c.AGENT_DURATION.name}
        for name, value in otel.items():
            if name in durations:  # floats summed in another order
                assert abs(value - prom[name]) < 1e-6, (name, value, prom[name])
            else:
                assert value == prom[name], (name, value, prom[name])
        assert otel[c.TOKEN_USAGE.name] == input_tokens + output_tokens
        assert otel[c.RUNS.name] == runs
        assert otel[c.RUNS_ACTIVE.name] == 0
        assert self.chat_tokens() == (input_tokens, output_tokens)

    def check_nothing_open(self) -> None:
        """No span left open, no run left in any observer, the active-run gauges at 0."""
        assert self.tracing.open_spans() == 0
        assert self.tracing.open_runs == 0
        assert self.metrics.open_runs == 0
        assert self.prometheus.open_runs == 0
        assert self.otel_sums()[c.RUNS_ACTIVE.name] == 0
        assert self.prometheus_sums()[c.RUNS_ACTIVE.name] == 0
        assert self.recorder.of("on_run_end"), "the run never ended"

    def check_log(self, capsys: Any, agent: str) -> None:
        """``loopobs inspect`` reads the JSONL log and shows the run."""
        self.jsonl.force_flush()
        capsys.readouterr()
        assert cli_main(["inspect", str(self.log)]) == 0
        out = capsys.readouterr().out
        assert agent in out, out


def make_stack(tmp_path: Path) -> Stack:
    """A fresh stack writing its log under ``tmp_path``."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    log = tmp_path / "events.jsonl"
    return Stack(RecordingObserver(), spans, tracer_provider, reader, meter_provider,
                 TracingObserver(tracer_provider), MetricsObserver(meter_provider),
                 PrometheusObserver(), JsonlRecorder(log), log)
