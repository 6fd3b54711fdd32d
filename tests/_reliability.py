"""Helpers shared by the ``test_reliability_*`` files: the full observer stack and its checks.

"All observers" means: :class:`TracingObserver` (SDK provider, in-memory exporter),
:class:`MetricsObserver` (in-memory reader), :class:`PrometheusObserver` (fresh
registry), :class:`JsonlRecorder` (into a ``StringIO``) and the loop's default
detectors. The script is a function of the request, so any number of concurrent
runs can share one client: each run makes ``tool_turns`` tool calls (distinct
arguments, so the detectors stay quiet) and then answers.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from loopobs import AgentLoop, LoopObserver, Usage, tool
from loopobs.contract.compaction import estimate_tokens
from loopobs.contract.model import ModelRequest, ToolResultMessage
from loopobs.exporters import JsonlRecorder, MetricsObserver, PrometheusObserver, TracingObserver
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.testing import RecordingObserver, metric_points

STEP_USAGE = Usage(input_tokens=100, output_tokens=10)
ANSWER_USAGE = Usage(input_tokens=200, output_tokens=20)
_STEP = re.compile(r"^step (\d+) of (\d+)$")


@tool
async def lookup(step: int, total: int, n: int) -> str:
    """A cheap async tool whose result tells the script how far the run is."""
    return f"step {step} of {total}"


def tool_script(
    tool_turns: int, *, fill: int = 0, parallel: int = 1, measured_usage: bool = False
) -> Callable[[ModelRequest], Reply]:
    """A request -> reply script: ``tool_turns`` tool turns of ``parallel`` calls, then an answer.

    It reads only the request's last message, so it survives compaction and is
    shared safely by concurrent runs. ``fill`` pads every reply's text (to make
    a context grow, for compaction). ``measured_usage`` reports the request's
    estimated size as its input tokens (as a provider would), else fixed usages.
    """
    counter = itertools.count()
    pad = " filler" * fill

    def script(request: ModelRequest) -> Reply:
        last = request.messages[-1] if request.messages else None
        step = 0
        if isinstance(last, ToolResultMessage):
            m = _STEP.match(last.content)
            step = int(m.group(1)) if m else tool_turns
        step_usage, answer_usage = STEP_USAGE, ANSWER_USAGE
        if measured_usage:
            size = estimate_tokens(request.messages)
            step_usage = Usage(input_tokens=size, output_tokens=STEP_USAGE.output_tokens)
            answer_usage = Usage(input_tokens=size, output_tokens=ANSWER_USAGE.output_tokens)
        if step < tool_turns:
            return Reply(
                text=f"working{pad}",
                usage=step_usage,
                tool_calls=tuple(
                    ToolCall("lookup", {"step": step + 1, "total": tool_turns, "n": next(counter)})
                    for _ in range(parallel)
                ),
            )
        return Reply(text=f"answer number {next(counter)}{pad}", usage=answer_usage)

    return script


@dataclass
class Stack:
    """Every exporting observer, with the in-memory sinks to read back."""

    span_exporter: InMemorySpanExporter
    tracer_provider: TracerProvider
    tracing: TracingObserver
    metric_reader: InMemoryMetricReader
    meter_provider: MeterProvider
    metrics: MetricsObserver
    prometheus: PrometheusObserver
    jsonl_stream: io.StringIO
    jsonl: JsonlRecorder
    recorder: RecordingObserver
    extra: list[LoopObserver] = field(default_factory=list)

    @property
    def observers(self) -> list[LoopObserver]:
        """The observers to attach, in order (extra ones first, the recorder last)."""
        return [*self.extra, self.tracing, self.metrics, self.prometheus, self.jsonl, self.recorder]

    def close(self) -> None:
        """Shut the providers down."""
        self.jsonl.shutdown()
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()

    def jsonl_lines(self) -> list[str]:
        """The event log written so far (flushed first)."""
        self.jsonl.force_flush()
        return [line for line in self.jsonl_stream.getvalue().splitlines() if line]


def make_stack(extra: list[LoopObserver] | None = None, *, exemplars: bool = True) -> Stack:
    """A fresh stack of all observers with in-memory sinks (never global providers)."""
    exporter = InMemorySpanExporter()
    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    stream = io.StringIO()
    return Stack(
        span_exporter=exporter,
        tracer_provider=tp,
        tracing=TracingObserver(tp),
        metric_reader=reader,
        meter_provider=mp,
        metrics=MetricsObserver(mp),
        prometheus=PrometheusObserver(CollectorRegistry(), exemplars=exemplars),
        jsonl_stream=stream,
        jsonl=JsonlRecorder(stream),
        recorder=RecordingObserver(),
        extra=list(extra or []),
    )


def make_loop(stack: Stack, tool_turns: int, **kwargs: Any) -> AgentLoop:
    """An AgentLoop over the tool script, with every observer and the default detectors."""
    kwargs.setdefault("max_turns", tool_turns + 5)
    return AgentLoop(
        ScriptedClient(tool_script(tool_turns), chunk_size=64),
        model="m1",
        tools=[lookup],
        observers=stack.observers,
        **kwargs,
    )


def otel_sum(points: dict[str, list[Any]], name: str, **attrs: str) -> float:
    """The sum over the data points of an OTel metric (values, or histogram sums)."""
    total = 0.0
    for p in points.get(name, []):
        if all(p.attributes.get(k) == v for k, v in attrs.items()):
            total += p.sum if hasattr(p, "bucket_counts") else p.value
    return total


def otel_count(points: dict[str, list[Any]], name: str) -> int:
    """The number of recorded values of an OTel histogram, over all its points."""
    return sum(p.count for p in points.get(name, []))


def prom_sum(registry: CollectorRegistry, sample: str, **labels: str) -> float:
    """The sum of one sample name over every label set (e.g. ``loopobs_turns_total``)."""
    total = 0.0
    for family in registry.collect():
        for s in family.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def collect(stack: Stack) -> dict[str, list[Any]]:
    """The OTel metric points now."""
    return metric_points(stack.metric_reader)
