"""Cost of TracingObserver and MetricsObserver, against raw SDK calls in this process.

Run: ``.venv/bin/python bench/bench_otel.py`` (``--quick`` for fewer repeats).

All tracing rows use one SDK ``TracerProvider`` with a ``SimpleSpanProcessor``
into an exporter that discards spans, so the whole span cost is paid on the
calling thread and nothing accumulates. Rows:

- model call: ``on_stream_start`` + ``on_stream_success`` (one ``chat`` span
  with the attributes the observer sets) vs a raw ``start_span`` with exactly
  the same attributes, set the same way, and ended; target ≤ 1.3×.
- tool call: ``on_tool_pre`` + ``on_tool_post`` vs the same raw span.
- both with context propagation on (the default: the span is attached while
  it runs) against a raw span that is attached and detached too, and off
  against a raw span without attach.
- ``opentelemetry-util-genai`` (if installed; not a dependency): the same
  model call and tool call recorded through ``TelemetryHandler.inference()`` and
  ``.tool()`` with the SDK tracer and a no-op meter (tracing only), and with SDK
  metrics against TracingObserver + MetricsObserver doing both.
- MetricsObserver per event, with an SDK ``MeterProvider`` and an in-memory reader.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# Run as a script, bench/ is on sys.path but the repository root (home of bench._util) is not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind

from bench._util import Timing, fmt_ns, fmt_ratio, print_table, time_callable
from loopobs import (
    RunStartContext,
    StreamStartContext,
    StreamSuccessContext,
    ToolPostContext,
    ToolPreContext,
    TurnEndContext,
    TurnStartContext,
)
from loopobs.exporters import catalog as c
from loopobs.exporters.metrics import MetricsObserver
from loopobs.exporters.tracing import TracingObserver


class Discard(SpanExporter):
    """Accepts spans and drops them."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


RUN = uuid.uuid4()
SESSION = uuid.uuid4()
T = 1_700_000_000_000_000_000
STREAM_START = StreamStartContext(
    run_id=RUN, time_ns=T, turn=0, model="gpt-4o", provider="openai", attempt=0, stream=True
)
STREAM_OK = StreamSuccessContext(
    run_id=RUN,
    time_ns=T + 1,
    turn=0,
    model="gpt-4o",
    provider="openai",
    attempt=0,
    input_tokens=1200,
    output_tokens=300,
    duration_ms=800.0,
    time_to_first_token_ms=150.0,
    finish_reason="stop",
    response_id="resp_123",
    response_model="gpt-4o-2024-08-06",
)
TOOL_PRE = ToolPreContext(run_id=RUN, time_ns=T, turn=0, tool="search", tool_call_id="call_1")
TOOL_POST = ToolPostContext(
    run_id=RUN,
    time_ns=T + 1,
    tool_call_id="call_1",
    turn=0,
    tool="search",
    result_hash=0x1234,
    duration_ms=3.0,
)
TURN_END = TurnEndContext(run_id=RUN, time_ns=T + 2, turn=0, success=True)


def open_run(obs: Any) -> None:
    obs.on_run_start(
        RunStartContext(run_id=RUN, time_ns=T, session_id=SESSION, agent="bench", model="gpt-4o")
    )
    obs.on_turn_start(TurnStartContext(run_id=RUN, time_ns=T, turn=0))


def raw_chat(tracer: trace.Tracer, parent: trace.Span, attach: bool) -> Callable[[], None]:
    parent_ctx = trace.set_span_in_context(parent)
    session = str(SESSION)

    def call() -> None:
        span = tracer.start_span(
            "chat gpt-4o",
            context=parent_ctx,
            kind=SpanKind.CLIENT,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_CHAT,
                c.GEN_AI_REQUEST_MODEL: "gpt-4o",
                c.GEN_AI_REQUEST_STREAM: True,
                c.GEN_AI_CONVERSATION_ID: session,
                c.LOOPOBS_ATTEMPT: 0,
                c.GEN_AI_PROVIDER_NAME: "openai",
            },
            start_time=T,
        )
        token = otel_context.attach(trace.set_span_in_context(span)) if attach else None
        if token is not None:
            otel_context.detach(token)
        span.set_attributes(
            {
                c.GEN_AI_RESPONSE_MODEL: "gpt-4o-2024-08-06",
                c.GEN_AI_USAGE_INPUT_TOKENS: 1200,
                c.GEN_AI_USAGE_OUTPUT_TOKENS: 300,
                c.GEN_AI_RESPONSE_ID: "resp_123",
                c.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
                c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: 0.15,
            }
        )
        span.end(end_time=T + 1)

    return call


def raw_tool(tracer: trace.Tracer, parent: trace.Span, attach: bool) -> Callable[[], None]:
    parent_ctx = trace.set_span_in_context(parent)

    def call() -> None:
        span = tracer.start_span(
            "execute_tool search",
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes={
                c.GEN_AI_OPERATION_NAME: c.OP_EXECUTE_TOOL,
                c.GEN_AI_TOOL_NAME: "search",
                c.GEN_AI_TOOL_CALL_ID: "call_1",
                c.GEN_AI_TOOL_TYPE: c.TOOL_TYPE_FUNCTION,
                c.LOOPOBS_ATTEMPT: 0,
            },
            start_time=T,
        )
        token = otel_context.attach(trace.set_span_in_context(span)) if attach else None
        if token is not None:
            otel_context.detach(token)
        span.set_attributes(
            {c.LOOPOBS_TOOL_OUTCOME: "output", c.LOOPOBS_TOOL_RESULT_HASH: f"{0x1234:016x}"}
        )
        span.end(end_time=T + 1)

    return call


def observer_chat(obs: Any) -> Callable[[], None]:
    start, ok = obs.on_stream_start, obs.on_stream_success

    def call() -> None:
        start(STREAM_START)
        ok(STREAM_OK)

    return call


def observer_tool(obs: Any) -> Callable[[], None]:
    pre, post = obs.on_tool_pre, obs.on_tool_post

    def call() -> None:
        pre(TOOL_PRE)
        post(TOOL_POST)

    return call


Row = tuple[str, str, str, str, str]


def main(argv: Sequence[str] | None = None) -> list[Row]:
    """Run the benchmarks, print a table, and return its rows."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="3 repeats of ~0.05 s")
    args = parser.parse_args(argv)
    repeats, target = (3, 0.05) if args.quick else (7, 0.1)

    def t(name: str, fn: Callable[[], object]) -> Timing:
        return time_callable(name, fn, repeats=repeats, target_s=target)

    tp = TracerProvider()
    tp.add_span_processor(SimpleSpanProcessor(Discard()))
    tracer = tp.get_tracer("bench")
    rows: list[Row] = []

    def row(label: str, timing: Timing, base: Timing | None, note: str = "") -> None:
        rows.append(
            (
                label,
                fmt_ns(timing.best_ns),
                fmt_ns(timing.median_ns),
                fmt_ratio(timing.best_ns, base.best_ns) if base else "",
                note,
            )
        )

    for propagate in (True, False):
        obs = TracingObserver(tp, propagate_context=propagate)
        open_run(obs)
        parent = obs._runs[RUN].turns[0]
        tag = "attach" if propagate else "no attach"
        raw_c = t("raw chat", raw_chat(tracer, parent, propagate))
        obs_c = t("obs chat", observer_chat(obs))
        raw_t = t("raw tool", raw_tool(tracer, parent, propagate))
        obs_t = t("obs tool", observer_tool(obs))
        row(f"raw SDK chat span, same attributes ({tag})", raw_c, None, "baseline")
        row(f"TracingObserver model call ({tag})", obs_c, raw_c, "target ≤ 1.30×")
        row(f"raw SDK tool span, same attributes ({tag})", raw_t, None, "baseline")
        row(f"TracingObserver tool call ({tag})", obs_t, raw_t, "target ≤ 1.30×")
        obs.reset()
        if propagate:
            chat_default, raw_default, tool_default = obs_c, raw_c, obs_t

    reader = InMemoryMetricReader()
    mp = MeterProvider(metric_readers=[reader])
    metrics_obs = MetricsObserver(mp)
    open_run(metrics_obs)
    try:
        from opentelemetry.util.genai.handler import TelemetryHandler
    except ImportError as exc:
        rows.append(("opentelemetry-util-genai", "skipped", "", "", f"not installed ({exc.name})"))
    else:

        def genai(handler: Any) -> Callable[[], None]:
            def call() -> None:
                inv = handler.inference("openai", request_model="gpt-4o")
                inv.response_model_name = "gpt-4o-2024-08-06"
                inv.response_id = "resp_123"
                inv.input_tokens = 1200
                inv.output_tokens = 300
                inv.finish_reasons = ["stop"]
                inv.stop()
                tool = handler.tool("search", tool_type="function")
                tool.tool_call_id = "call_1"
                tool.stop()

            return call

        traced = TelemetryHandler(tracer_provider=tp, meter_provider=NoOpMeterProvider())
        full = TelemetryHandler(tracer_provider=tp, meter_provider=mp)
        g_trace = t("util-genai trace", genai(traced))
        row(
            "util-genai inference + tool record, SDK tracer, no-op meter",
            g_trace,
            raw_default,
            f"TracingObserver is "
            f"{g_trace.best_ns / (chat_default.best_ns + tool_default.best_ns):.1f}× cheaper",
        )
        both = TracingObserver(tp)
        open_run(both)
        chat_both, metric_chat = observer_chat(both), observer_chat(metrics_obs)
        tool_both, metric_tool = observer_tool(both), observer_tool(metrics_obs)

        # The same workload on both sides: a model call and its tool call.
        def traced_and_metered() -> None:
            chat_both()
            metric_chat()
            tool_both()
            metric_tool()

        ours = t("ours", traced_and_metered)
        g_full = t("util-genai full", genai(full))
        row(
            "TracingObserver + MetricsObserver model call + tool call (SDK metrics)",
            ours,
            raw_default,
        )
        row(
            "util-genai inference + tool record, SDK tracer + SDK meter",
            g_full,
            raw_default,
            f"ours is {g_full.best_ns / ours.best_ns:.1f}× cheaper",
        )
        both.reset()

    for label, fn in (
        (
            "MetricsObserver on_stream_success (2 hist + ttfc + 2 token hist + 2 counters)",
            lambda: metrics_obs.on_stream_success(STREAM_OK),
        ),
        (
            "MetricsObserver on_tool_post (1 hist + 1 counter)",
            lambda: metrics_obs.on_tool_post(TOOL_POST),
        ),
        ("MetricsObserver on_turn_end (1 counter)", lambda: metrics_obs.on_turn_end(TURN_END)),
    ):
        row(label, t(label, fn), None)

    print_table(("benchmark", "best", "median", "× raw (best)", "note"), rows)
    tp.shutdown()
    mp.shutdown()
    return rows


if __name__ == "__main__":
    main()
