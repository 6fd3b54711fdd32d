"""TracingObserver's size governance: content attributes have a length bound, counted."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from loopobs.exporters import catalog as c
from loopobs.exporters import content
from loopobs.exporters.tracing import TracingObserver
from tests._emit import Script

BIG = 11 * 1024 * 1024


def _tool_run(obs: TracingObserver, result: str, *, query: str = "what is 2+2?") -> None:
    """One turn: a model call asking for a tool, the tool returning ``result``."""
    s = Script(obs)
    s.run_start()
    s.turn_start(0, query=query)
    s.stream_start(0, "m")
    s.stream_success(0, "m", finish="tool_calls")
    s.response(0, "", tool_calls=1)
    s.call_received(0, "fetch", "call-1", {"url": "u" * 100})
    s.tool_pre(0, "fetch", "call-1")
    s.tool_post(0, "fetch", "call-1", result=result)
    s.turn_end(0)
    s.turn_start(1, query=query)
    s.stream_start(1, "m")
    s.stream_success(1, "m")
    s.response(1, "done")
    s.turn_end(1)
    s.run_end()


def _spans(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield tracer_provider, exporter
    tracer_provider.shutdown()


@pytest.fixture(autouse=True)
def _no_limit_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"):
        monkeypatch.delenv(name, raising=False)


def test_an_11_mb_tool_result_becomes_a_bounded_attribute(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """By default a content value is cut to 32,768 characters, with a marker, and counted;
    the next call's input messages (which quote the result) are cut too."""
    tracer_provider, exporter = provider
    obs = TracingObserver(tracer_provider, capture_content=True)
    _tool_run(obs, "r" * BIG)
    (tool,) = _spans(exporter, "execute_tool")
    result = (tool.attributes or {})[c.GEN_AI_TOOL_CALL_RESULT]
    assert isinstance(result, str)
    assert len(result) == content.DEFAULT_MAX_CONTENT_LENGTH
    assert result.endswith(content.TRUNCATED_MARKER)
    second = max(_spans(exporter, "chat"), key=lambda s: s.start_time or 0)
    inputs = (second.attributes or {})[c.GEN_AI_INPUT_MESSAGES]
    assert isinstance(inputs, str)
    assert len(inputs) == content.DEFAULT_MAX_CONTENT_LENGTH
    for span in exporter.get_finished_spans():
        for value in (span.attributes or {}).values():
            assert not isinstance(value, str) or len(value) <= content.DEFAULT_MAX_CONTENT_LENGTH
    assert obs.truncated_attributes == 2


def test_the_standard_length_variable_lowers_the_bound(
    provider: tuple[TracerProvider, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1000")
    tracer_provider, exporter = provider
    obs = TracingObserver(tracer_provider, capture_content=True)
    assert obs.content_length_limit == 1000
    _tool_run(obs, "r" * 5000)
    (tool,) = _spans(exporter, "execute_tool")
    result = (tool.attributes or {})[c.GEN_AI_TOOL_CALL_RESULT]
    assert isinstance(result, str)
    assert len(result) == 1000
    assert result.endswith(content.TRUNCATED_MARKER)


def test_the_providers_span_limits_are_learnt_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A provider built with SpanLimits cuts values itself (silently for us): the observer
    reads back what the span kept, counts the cut, and cuts later values itself (marker
    included, and no more SDK warnings)."""
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=500))
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    obs = TracingObserver(tracer_provider, capture_content=True)
    caplog.set_level(logging.WARNING, logger="opentelemetry.attributes")
    _tool_run(obs, "r" * 5000)
    assert obs.content_length_limit == 500
    first_warnings = len(caplog.records)
    _tool_run(obs, "s" * 5000)
    assert len(caplog.records) == first_warnings
    first, second = sorted(_spans(exporter, "execute_tool"), key=lambda s: s.start_time or 0)
    assert (first.attributes or {})[c.GEN_AI_TOOL_CALL_RESULT] == "r" * 500
    later = (second.attributes or {})[c.GEN_AI_TOOL_CALL_RESULT]
    assert isinstance(later, str)
    assert len(later) == 500
    assert later.endswith(content.TRUNCATED_MARKER)
    assert obs.truncated_attributes >= 2
    tracer_provider.shutdown()


def test_usage_attributes_are_set_before_content_ones(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """On a chat span the token usage comes before the content: a backend keeping only the
    first attributes of a span keeps the numbers."""
    tracer_provider, exporter = provider
    _tool_run(TracingObserver(tracer_provider, capture_content=True), "4")
    for chat in _spans(exporter, "chat"):
        names = list(chat.attributes or {})
        assert names.index(c.GEN_AI_USAGE_INPUT_TOKENS) < names.index(c.GEN_AI_INPUT_MESSAGES)
        assert names.index(c.GEN_AI_USAGE_OUTPUT_TOKENS) < names.index(c.GEN_AI_OUTPUT_MESSAGES)


def test_no_bound_of_its_own_when_asked(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, exporter = provider
    obs = TracingObserver(tracer_provider, capture_content=True, max_content_length=None)
    _tool_run(obs, "r" * 100_000)
    (tool,) = _spans(exporter, "execute_tool")
    assert (tool.attributes or {})[c.GEN_AI_TOOL_CALL_RESULT] == "r" * 100_000
    assert obs.truncated_attributes == 0


def test_event_content_and_log_records_are_bounded_too(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    tracer_provider, exporter = provider
    obs = TracingObserver(tracer_provider, capture_content="EVENT_ONLY", max_content_length=64)
    _tool_run(obs, "r" * 1000, query="q" * 1000)
    for chat in _spans(exporter, "chat"):
        (details,) = [e for e in chat.events if e.name == c.EVENT_INFERENCE_DETAILS]
        for value in (details.attributes or {}).values():
            assert isinstance(value, str)
            assert len(value) <= 64
    short, cut = content.cut_strings({"a": ["x" * 100, {"b": "y"}]}, 20)
    assert cut == 1
    assert json.dumps(short) == json.dumps(
        {"a": ["x" * (20 - len(content.TRUNCATED_MARKER)) + content.TRUNCATED_MARKER, {"b": "y"}]}
    )
    assert content.cut("x" * 100, 5) == "xxxxx"


def test_a_failing_redaction_hook_still_ends_the_chat_span(
    provider: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    """An observer never leaves a span open: a redaction hook raising while a call's content
    is gathered still ends the call's span."""
    tracer_provider, exporter = provider

    def redact(text: str) -> str:
        if "secret" in text:
            raise RuntimeError("redaction bug")
        return text

    obs = TracingObserver(tracer_provider, capture_content=True, redact=redact)
    s = Script(obs)
    s.run_start()
    s.turn_start(0)
    s.stream_start(0, "m")
    s.text(0, "a secret")
    s.stream_success(0, "m")
    with pytest.raises(RuntimeError):
        s.response(0, "a secret")
    assert len(_spans(exporter, "chat")) == 1
    s.turn_end(0)
    s.run_end()
    assert obs.open_spans() == 0
