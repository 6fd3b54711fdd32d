"""What every framework adapter must give, checked the same way for each.

:class:`Stack` wires the whole observer stack (recorder, tracing, OTel metrics,
Prometheus, JSONL) to fresh in-memory providers and a fresh registry;
:meth:`Stack.check_run` asserts the adapter's output after a real framework run:
the contract holds, one ``invoke_agent`` trace with ``chat`` and ``execute_tool``
children, token usage equal to what the model reported, Prometheus and OTel metric
sums equal to the recorded events, nothing left open, and a JSONL log that
``loopobs inspect`` reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from loopobs import AgentLoop, LoopObserver, Tool, Usage
from loopobs.cli import main as cli_main
from loopobs.exporters import JsonlRecorder, PrometheusObserver
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.tracing import TracingObserver
from loopobs.llm.scripted import ScriptedClient, Step
from loopobs.testing import RecordingObserver, assert_contract, metric_points


def _int_attribute(span: ReadableSpan, name: str) -> int:
    value = (span.attributes or {}).get(name, 0)
    assert isinstance(value, int)
    return value


class Stack:
    """Every exporter, wired to in-memory backends; ``observers`` go to the adapter."""

    def __init__(self, tmp_path: Path) -> None:
        self.recorder = RecordingObserver()
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracing = TracingObserver(self.tracer_provider)
        self.metrics = MetricsObserver(meter_provider=self.meter_provider)
        self.prometheus = PrometheusObserver(CollectorRegistry())
        self.log_path = tmp_path / "events.jsonl"
        self.jsonl = JsonlRecorder(self.log_path)

    @property
    def observers(self) -> list[LoopObserver]:
        return [self.recorder, self.tracing, self.metrics, self.prometheus, self.jsonl]

    def close(self) -> None:
        self.jsonl.shutdown()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    # -- reading back ----------------------------------------------------------------------
    def finished(self, name_prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(name_prefix)]

    def prom(self, name: str, **labels: str) -> float:
        total = 0.0
        for family in self.prometheus.registry.collect():
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
        return total

    def otel_sum(self, name: str, **attributes: str) -> float:
        total = 0.0
        for point in metric_points(self.reader).get(name, []):
            attrs: Any = point.attributes or {}
            if all(attrs.get(k) == v for k, v in attributes.items()):
                total += point.sum if hasattr(point, "sum") else point.value
        return total

    def reported_usage(self) -> Usage:
        total = Usage()
        for ctx in self.recorder.of("on_stream_success"):
            total = total + Usage(input_tokens=ctx.input_tokens, output_tokens=ctx.output_tokens)
        return total

    def metric_sums(self) -> dict[str, float]:
        """Label-free totals of both metric paths, comparable between two sources of runs.

        Per token type, tool outcome and run status; model, provider, agent and tool
        names are summed over (a framework names its model and agent its own way).
        """
        sums: dict[str, float] = {}
        keep = ("gen_ai_token_type", "loopobs_tool_outcome", "loopobs_run_status")
        for family in self.prometheus.registry.collect():
            for sample in family.samples:
                # Durations differ between sources (their counts are compared, not their
                # values); the chunk timings exist only when the model streams chunk by chunk.
                if (
                    sample.name.endswith(("_created", "_bucket"))
                    or "time_to_first" in sample.name
                    or "time_per_output_chunk" in sample.name
                    or ("seconds" in sample.name and not sample.name.endswith("_count"))
                ):
                    continue
                labels = ",".join(f"{k}={sample.labels[k]}" for k in keep if k in sample.labels)
                key = f"prometheus {sample.name}{{{labels}}}"
                sums[key] = sums.get(key, 0.0) + sample.value
        for name, points in metric_points(self.reader).items():
            if "time_to_first" in name or "time_per_output_chunk" in name:
                continue
            for point in points:
                attrs: Any = point.attributes or {}
                labels = ",".join(
                    f"{k}={attrs[k]}"
                    for k in ("gen_ai.token.type", "loopobs.tool.outcome", "loopobs.run.status")
                    if k in attrs
                )
                if hasattr(point, "count"):
                    values = {"count": float(point.count)}
                    if "duration" not in name:
                        values["sum"] = float(point.sum)
                else:
                    values = {"value": float(point.value)}
                for kind, value in values.items():
                    key = f"otel {name}.{kind}{{{labels}}}"
                    sums[key] = sums.get(key, 0.0) + value
        return sums

    # -- the checks ------------------------------------------------------------------------
    def check_nothing_open(self) -> None:
        """No span of the tracing observer open, no run counted active."""
        assert self.tracing.open_runs == 0
        assert self.tracing.open_spans() == 0
        assert self.prom("loopobs_runs_active") == 0
        assert self.otel_sum("loopobs.runs.active") == 0

    def check_run(self, *, usage: Usage, chats: int, tools: int, runs: int = 1) -> None:
        """The full list of what a framework run must produce through its adapter."""
        assert_contract(self.recorder.events)
        # one trace per run: invoke_agent with chat and execute_tool children
        agents = self.finished("invoke_agent")
        assert len(agents) == runs
        chat_spans = self.finished("chat")
        tool_spans = self.finished("execute_tool")
        assert len(chat_spans) == chats
        assert len(tool_spans) == tools
        span_ids = {s.context.span_id: s for s in self.spans.get_finished_spans()}
        for span in chat_spans + tool_spans:
            ancestor = span
            while ancestor.parent is not None and ancestor.parent.span_id in span_ids:
                ancestor = span_ids[ancestor.parent.span_id]
            assert ancestor.name.startswith("invoke_agent"), span.name
            assert span.context.trace_id == ancestor.context.trace_id
        # token usage equal to what the model reported
        recorded = self.reported_usage()
        assert (recorded.input_tokens, recorded.output_tokens) == (
            usage.input_tokens,
            usage.output_tokens,
        )
        ends = self.recorder.of("on_run_end")
        assert sum(e.input_tokens for e in ends) == usage.input_tokens
        assert sum(e.output_tokens for e in ends) == usage.output_tokens
        assert (
            sum(_int_attribute(a, "gen_ai.usage.input_tokens") for a in agents)
            == usage.input_tokens
        )
        # Prometheus and OTel metric sums equal to the events
        for kind, expected in (("input", usage.input_tokens), ("output", usage.output_tokens)):
            assert self.prom("loopobs_tokens_total", gen_ai_token_type=kind) == expected
            assert self.otel_sum("loopobs.tokens", **{"gen_ai.token.type": kind}) == expected
        posts = len(self.recorder.of("on_tool_post"))
        assert posts == tools
        assert self.prom("loopobs_tool_calls_total") == posts
        assert self.otel_sum("loopobs.tool.calls") == posts
        assert self.prom("loopobs_runs_total") == runs
        assert self.otel_sum("loopobs.runs") == runs
        self.check_nothing_open()
        # a JSONL log that `loopobs inspect` reads
        self.jsonl.force_flush()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert cli_main(["inspect", str(self.log_path)]) == 0
        assert "total:" in out.getvalue()
        assert "malformed" not in out.getvalue()

    def check_metrics_agree(self) -> None:
        """Every catalog metric has the same sum in OTel and in Prometheus (histograms: the sum
        of their observations; durations up to float rounding)."""
        from opentelemetry.sdk.metrics.export import HistogramDataPoint

        from loopobs.exporters import catalog

        points = metric_points(self.reader)
        families = {m.name: m for m in self.prometheus.registry.collect()}
        for spec in catalog.METRICS:
            if spec in (catalog.OBSERVER_ERRORS, catalog.LABEL_OVERFLOW):
                continue
            otel = sum(
                (p.sum if isinstance(p, HistogramDataPoint) else p.value)
                for p in points.get(spec.name, [])
            )
            name = spec.prometheus_name
            family = families.get(name.removesuffix("_total"))
            wanted = name + "_sum" if spec.kind == "histogram" else name
            prom = sum(s.value for s in family.samples if s.name == wanted) if family else 0.0
            assert abs(otel - prom) < 1e-6, (spec.name, otel, prom)


def agent_loop_sums(
    tmp_path: Path, steps: Sequence[Step], tools: Sequence[Tool], question: str
) -> dict[str, float]:
    """The metric totals ``AgentLoop`` gives for the same script: what an adapter must match."""
    folder = tmp_path / "agent_loop"
    folder.mkdir()
    stack = Stack(folder)
    try:
        loop = AgentLoop(
            ScriptedClient(steps), model="scripted", tools=tools, observers=stack.observers
        )
        result = asyncio.run(loop.run(question))
        assert result.ok, result.error
        return stack.metric_sums()
    finally:
        stack.close()
