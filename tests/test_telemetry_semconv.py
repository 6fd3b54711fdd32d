"""What the GenAI conventions ask for, end to end: real clients (replayed HTTP), SDK providers."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry._logs import SeverityNumber
from opentelemetry.sdk.trace import ReadableSpan

import loopobs
from loopobs import AgentLoop, RateLimited, Usage, tool
from loopobs.contract import trace_links
from loopobs.exporters import catalog as c
from loopobs.exporters.redaction import redact_common_secrets
from loopobs.llm import Fail, OpenAIClient, Reply, ScriptedClient, ToolCall
from tests._llm_replay import PLANTED_KEY, Replay
from tests._otel_capture import Capture


@pytest.fixture
def cap() -> Iterator[Capture]:
    capture = Capture()
    yield capture
    capture.shutdown()


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@tool
def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def scripted_loop(cap: Capture, steps: list[Any], **kwargs: Any) -> AgentLoop:
    observers = cap.observers(
        capture_content=kwargs.pop("capture_content", False),
        latest=kwargs.pop("latest", False),
        redact=kwargs.pop("redact", None),
    )
    return AgentLoop(
        ScriptedClient(steps),
        model="m1",
        tools=[lookup],
        observers=observers,
        detectors=[],
        **kwargs,
    )


TOOL_THEN_ANSWER = [
    Reply(
        tool_calls=(ToolCall("lookup", {"city": "Oslo"}, id="c1"),),
        usage=Usage(input_tokens=10, output_tokens=2),
        finish_reason="tool_calls",
    ),
    Reply(text="It is sunny.", usage=Usage(input_tokens=20, output_tokens=4), finish_reason="stop"),
]


async def test_openai_chat_span_has_server_request_and_provider_attributes(cap: Capture) -> None:
    """Options reach the request body and the chat span; server, openai.* and usage details too."""
    replay = Replay.of(["openai_text"])
    options = {
        "max_tokens": 256,
        "temperature": 0,
        "top_p": 0.5,
        "stop": ["END"],
        "seed": 7,
        "service_tier": "auto",
        "user": "not reported",
    }
    loop = AgentLoop(
        OpenAIClient(api_key=PLANTED_KEY, http_client=replay.http()),
        model="gpt-4o",
        observers=cap.observers(),
        detectors=[],
        request_options=options,
    )
    result = await loop.run("Capital of France?")
    assert result.ok
    body = replay.json(0)
    assert {k: body[k] for k in options} == options
    chat = attrs(cap.spans()["chat gpt-4o"])
    assert chat[c.SERVER_ADDRESS] == "api.openai.com"
    assert chat[c.SERVER_PORT] == 443
    assert chat[c.GEN_AI_REQUEST_MAX_TOKENS] == 256
    assert chat[c.GEN_AI_REQUEST_TEMPERATURE] == 0.0
    assert isinstance(chat[c.GEN_AI_REQUEST_TEMPERATURE], float)
    assert chat[c.GEN_AI_REQUEST_TOP_P] == 0.5
    assert chat[c.GEN_AI_REQUEST_STOP_SEQUENCES] == ("END",)
    assert chat[c.GEN_AI_REQUEST_SEED] == 7
    assert chat[c.OPENAI_REQUEST_SERVICE_TIER] == "auto"
    assert chat[c.OPENAI_RESPONSE_SERVICE_TIER] == "default"
    assert chat[c.OPENAI_RESPONSE_SYSTEM_FINGERPRINT] == "fp_eb9dce56a8"
    assert chat[c.GEN_AI_RESPONSE_MODEL] == "gpt-4o-2024-08-06"
    # reported details are present, the reported 0 included
    assert chat[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] == 1024
    assert chat[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] == 0
    assert not any("user" in key for key in chat)
    # the client metrics carry the response model and the server
    (point,) = cap.metrics()[c.OPERATION_DURATION.name]
    assert point.attributes[c.GEN_AI_RESPONSE_MODEL] == "gpt-4o-2024-08-06"
    assert point.attributes[c.SERVER_ADDRESS] == "api.openai.com"
    assert point.attributes[c.SERVER_PORT] == 443


async def test_unreported_details_stay_absent_and_agent_span_lists_only_its_attributes(
    cap: Capture,
) -> None:
    """No usage details reported: no cache/reasoning attributes; invoke_agent has no reasoning."""
    result = await scripted_loop(cap, TOOL_THEN_ANSWER).run("weather?")
    assert result.ok
    spans = cap.spans()
    for name in ("chat m1", "invoke_agent agent"):
        got = attrs(spans[name])
        assert c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS not in got
        assert c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS not in got
    agent = attrs(spans["invoke_agent agent"])
    assert c.GEN_AI_RESPONSE_FINISH_REASONS not in agent
    assert c.GEN_AI_RESPONSE_FINISH_REASONS in attrs(spans["chat m1"])
    assert agent[c.GEN_AI_PROVIDER_NAME] == "scripted"
    turn = attrs(spans["turn"])
    assert not [k for k in turn if k.startswith("gen_ai.")]


async def test_tool_span_and_duration_carry_description_type_and_agent(cap: Capture) -> None:
    """execute_tool: description and type on the span; the duration has the required keys."""
    await scripted_loop(cap, TOOL_THEN_ANSWER, agent_name="weather").run("weather?")
    span = attrs(cap.spans()["execute_tool lookup"])
    assert span[c.GEN_AI_TOOL_DESCRIPTION] == "The weather in a city."
    assert span[c.GEN_AI_TOOL_TYPE] == "function"
    (point,) = cap.metrics()[c.TOOL_DURATION.name]
    assert dict(point.attributes) == {
        c.GEN_AI_OPERATION_NAME: "execute_tool",
        c.GEN_AI_TOOL_NAME: "lookup",
        c.GEN_AI_TOOL_TYPE: "function",
        c.GEN_AI_AGENT_NAME: "weather",
    }
    (agent,) = cap.metrics()[c.AGENT_DURATION.name]
    assert dict(agent.attributes) == {
        c.GEN_AI_OPERATION_NAME: "invoke_agent",
        c.GEN_AI_AGENT_NAME: "weather",
        c.GEN_AI_REQUEST_MODEL: "m1",
    }


async def test_inference_details_is_a_log_record_in_the_chat_span(cap: Capture) -> None:
    """EVENT_ONLY: one log record per call, with inference attributes and structured content."""
    await scripted_loop(cap, TOOL_THEN_ANSWER, capture_content="EVENT_ONLY").run("weather?")
    chats = [s for s in cap.all_spans() if s.name == "chat m1"]
    records = cap.logs(c.EVENT_INFERENCE_DETAILS)
    assert len(records) == len(chats) == 2
    for record, chat in zip(records, chats, strict=True):
        log = record.log_record
        assert chat.context is not None
        assert (log.trace_id, log.span_id) == (chat.context.trace_id, chat.context.span_id)
        got: dict[str, Any] = dict(log.attributes or {})
        assert got[c.GEN_AI_OPERATION_NAME] == "chat"
        assert got[c.GEN_AI_PROVIDER_NAME] == "scripted"
        assert got[c.GEN_AI_REQUEST_MODEL] == "m1"
        assert c.GEN_AI_USAGE_INPUT_TOKENS in got
        assert c.LOOPOBS_ATTEMPT not in got
        output = got[c.GEN_AI_OUTPUT_MESSAGES]
        assert isinstance(output, tuple | list)  # structured, not a JSON string
        assert output[0]["role"] == "assistant"
    second: dict[str, Any] = dict(records[1].log_record.attributes or {})
    roles = [m["role"] for m in second[c.GEN_AI_INPUT_MESSAGES]]
    assert roles == ["user", "assistant", "tool"]
    # no content on spans in EVENT_ONLY
    assert c.GEN_AI_INPUT_MESSAGES not in attrs(chats[0])


async def test_no_content_mode_emits_no_inference_details(cap: Capture) -> None:
    """Content capture off: no details event at all."""
    await scripted_loop(cap, TOOL_THEN_ANSWER).run("weather?")
    assert cap.logs(c.EVENT_INFERENCE_DETAILS) == []


@pytest.mark.parametrize(
    ("latest", "event"), [(False, c.EVENT_OPERATION_EXCEPTION), (True, c.EVENT_INFERENCE_EXCEPTION)]
)
async def test_failed_call_emits_the_exception_event(
    cap: Capture, latest: bool, event: str
) -> None:
    """A failed model call: a WARN log record with exception.* in the failed chat span."""
    steps = [Fail(RateLimited("slow down")), Reply(text="ok")]
    await scripted_loop(cap, steps, fallback_models=["m2"], latest=latest).run("q")
    (record,) = cap.logs(event)
    log = record.log_record
    assert log.severity_number is SeverityNumber.WARN
    failed = cap.spans()["chat m1"]
    assert failed.context is not None
    assert log.span_id == failed.context.span_id
    got: dict[str, Any] = dict(log.attributes or {})
    assert got[c.EXCEPTION_TYPE] == "RateLimited"
    assert "slow down" in got[c.EXCEPTION_MESSAGE]
    assert got[c.ERROR_TYPE] == "RateLimited"


async def test_latest_names_behind_the_switch(
    cap: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment switch selects cache_write naming, the new metrics, no provider on agent."""
    monkeypatch.setenv(c.SEMCONV_OPT_IN_ENV, "http, gen_ai_latest_experimental")
    observers = cap.observers(latest=None)  # type: ignore[arg-type]
    steps = [
        Reply(
            text="hi",
            usage=Usage(
                input_tokens=30,
                output_tokens=5,
                cache_write_input_tokens=0,
                details=("cache_write",),
            ),
        )
    ]
    await AgentLoop(ScriptedClient(steps), model="m1", observers=observers, detectors=[]).run("q")
    spans = cap.spans()
    chat = attrs(spans["chat m1"])
    assert chat[c.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] == 0
    assert c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS not in chat
    assert c.GEN_AI_PROVIDER_NAME not in attrs(spans["invoke_agent agent"])
    names = set(cap.metrics())
    assert {
        c.INFERENCE_DURATION.name,
        c.INFERENCE_INPUT_TOKENS.name,
        c.INFERENCE_CACHE_WRITE_TOKENS.name,
        c.AGENT_INFERENCE_CALLS.name,
        c.AGENT_TOOL_CALLS.name,
    } <= names
    assert not names & {c.OPERATION_DURATION.name, c.TOKEN_USAGE.name}
    (calls,) = cap.metrics()[c.AGENT_INFERENCE_CALLS.name]
    assert calls.sum == 1
    (tools,) = cap.metrics()[c.AGENT_TOOL_CALLS.name]
    assert tools.sum == 0


def test_the_switch_is_read_from_the_standard_variable() -> None:
    """Only the gen_ai_latest_experimental entry of the comma-separated list selects it."""
    assert c.latest_experimental({c.SEMCONV_OPT_IN_ENV: "http,gen_ai_latest_experimental"})
    assert not c.latest_experimental({c.SEMCONV_OPT_IN_ENV: "http/dup"})
    assert not c.latest_experimental({})


def test_time_per_output_chunk_is_recorded_between_chunks_as_they_arrive(cap: Capture) -> None:
    """Three chunks 10 ms and 30 ms apart: two intervals, none for the first chunk.

    Each interval is recorded when its chunk arrives, so a reader sees a call's
    gaps while it still streams; the attempt's end adds none.
    """
    from loopobs.contract import events as ev

    (_, metrics) = cap.observers()
    rid = uuid.uuid4()
    metrics.on_stream_start(
        ev.StreamStartContext(
            run_id=rid,
            time_ns=0,
            turn=0,
            model="m",
            provider="p",
            server_address="h",
            server_port=8080,
        )
    )
    metrics.on_text_delta(ev.TextDeltaContext(run_id=rid, time_ns=5_000_000, turn=0, delta="x"))
    assert c.TIME_PER_OUTPUT_CHUNK.name not in cap.metrics()
    for t_ms in (15, 45):
        metrics.on_text_delta(
            ev.TextDeltaContext(run_id=rid, time_ns=t_ms * 1_000_000, turn=0, delta="x")
        )
    (point,) = cap.metrics()[c.TIME_PER_OUTPUT_CHUNK.name]
    assert point.count == 2
    assert point.sum == pytest.approx(0.04)
    assert dict(point.attributes) == {
        c.GEN_AI_OPERATION_NAME: "chat",
        c.GEN_AI_PROVIDER_NAME: "p",
        c.GEN_AI_REQUEST_MODEL: "m",
        c.SERVER_ADDRESS: "h",
        c.SERVER_PORT: 8080,
    }
    metrics.on_stream_success(
        ev.StreamSuccessContext(run_id=rid, time_ns=50_000_000, turn=0, model="m", provider="p")
    )
    metrics.on_text_delta(ev.TextDeltaContext(run_id=rid, time_ns=60_000_000, turn=0, delta="x"))
    (point,) = cap.metrics()[c.TIME_PER_OUTPUT_CHUNK.name]
    assert point.count == 2  # a chunk after the attempt's end times nothing


def test_chunk_gap_exemplars_link_to_the_chat_span_they_timed(cap: Capture) -> None:
    """Under the loop, each gap is recorded while its chat span is current."""
    observers = cap.observers()
    loop = AgentLoop(
        ScriptedClient([Reply(text="a reply of a few chunks")], chunk_size=4),
        model="m",
        detectors=[],
        observers=observers,
    )
    with cap.tracer_provider.get_tracer("app").start_as_current_span("request"):
        assert asyncio.run(loop.run("hi")).ok
    chats = {s.context.span_id for s in cap.all_spans() if s.name.startswith("chat")}
    (point,) = cap.metrics()[c.TIME_PER_OUTPUT_CHUNK.name]
    assert point.count >= 2
    assert point.exemplars
    assert {e.span_id for e in point.exemplars} <= chats


# -- redaction ------------------------------------------------------------------------------
PLANTED = ("sk-proj-PLANTEDsecret0123456789", "jane.doe@example.com", "+1 415 555 0134")


def _exported_text(cap: Capture) -> str:
    parts = []
    for span in cap.all_spans():
        parts.append(json.dumps(attrs(span), default=str))
        parts.extend(json.dumps(dict(e.attributes or {}), default=str) for e in span.events)
    parts.extend(json.dumps(dict(r.log_record.attributes or {}), default=str) for r in cap.logs())
    return "\n".join(parts)


@tool
def crm(customer: str) -> str:
    """Look a customer up."""
    return f"{customer}: key {PLANTED[0]}, mail {PLANTED[1]}, phone {PLANTED[2]}"


@pytest.mark.parametrize("redact", [None, redact_common_secrets], ids=["off", "on"])
async def test_redaction_removes_planted_values_everywhere(cap: Capture, redact: Any) -> None:
    """Planted key, e-mail and phone reach spans and events only without the redaction hook."""
    prompt = f"My key is {PLANTED[0]}, write to {PLANTED[1]} or call {PLANTED[2]}."
    steps = [
        Reply(tool_calls=(ToolCall("crm", {"customer": PLANTED[1]}, id="c1"),)),
        Reply(text=f"Done, I mailed {PLANTED[1]}."),
    ]
    observers = cap.observers(capture_content="SPAN_AND_EVENT", redact=redact)
    loop = AgentLoop(
        ScriptedClient(steps),
        model="m1",
        tools=[crm],
        observers=observers,
        detectors=[],
        system_prompt=f"Admin key {PLANTED[0]}",
    )
    assert (await loop.run(prompt)).ok
    text = _exported_text(cap)
    assert c.GEN_AI_INPUT_MESSAGES in text  # content was captured
    found = [v for v in PLANTED if v in text]
    if redact is None:
        assert found == list(PLANTED)
    else:
        assert found == []
        assert "[REDACTED:api_key]" in text
        assert "[REDACTED:email]" in text
        assert "[REDACTED:phone]" in text


def test_builtin_redactor_keeps_ordinary_text() -> None:
    """Numbers, dates and words that are not secrets survive."""
    text = "Order 12345 on 2024-05-01 costs 99.50; see https://example.com/docs, version 1.2.3"
    assert redact_common_secrets(text) == text
    assert redact_common_secrets("token: Bearer abcdefghijklmnop1234") == "token: [REDACTED:bearer]"


# -- evaluations ----------------------------------------------------------------------------
async def test_record_evaluation_lands_on_the_run_span_and_in_a_metric(cap: Capture) -> None:
    """By run id, after the run ended: the event is in the invoke_agent span; the score counted."""
    result = await scripted_loop(cap, TOOL_THEN_ANSWER).run("weather?")
    found = loopobs.record_evaluation(
        result.run_id,
        name="helpfulness",
        score=0.75,
        label="pass",
        explanation=f"answered {PLANTED[1]}",
        logger_provider=cap.logger_provider,
        meter_provider=cap.meter_provider,
        redact=redact_common_secrets,
    )
    assert found
    (record,) = cap.logs(c.EVENT_EVALUATION_RESULT)
    run_span = cap.spans()["invoke_agent agent"]
    assert run_span.context is not None
    log = record.log_record
    assert (log.trace_id, log.span_id) == (run_span.context.trace_id, run_span.context.span_id)
    assert dict(log.attributes or {}) == {
        c.GEN_AI_EVALUATION_NAME: "helpfulness",
        c.GEN_AI_EVALUATION_SCORE_VALUE: 0.75,
        c.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
        c.GEN_AI_EVALUATION_EXPLANATION: "answered [REDACTED:email]",
    }
    (point,) = cap.metrics()[c.EVALUATION_SCORE.name]
    assert (point.count, point.sum) == (1, 0.75)
    assert dict(point.attributes) == {
        c.GEN_AI_EVALUATION_NAME: "helpfulness",
        c.GEN_AI_EVALUATION_SCORE_LABEL: "pass",
    }


def test_record_evaluation_on_a_span_and_on_an_unknown_run(cap: Capture) -> None:
    """A span is evaluated in its own context; an unknown run id still emits, returning False."""
    tracer = cap.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("judge me") as span:
        assert loopobs.record_evaluation(
            span,
            name="exact",
            label="fail",
            logger_provider=cap.logger_provider,
            meter_provider=cap.meter_provider,
        )
    trace_links.reset()
    assert not loopobs.record_evaluation(
        uuid.uuid4(),
        name="exact",
        score=0.0,
        logger_provider=cap.logger_provider,
        meter_provider=cap.meter_provider,
    )
    first, second = cap.logs(c.EVENT_EVALUATION_RESULT)
    assert first.log_record.span_id == span.get_span_context().span_id
    assert not second.log_record.span_id
    with pytest.raises(ValueError, match="score or a label"):
        loopobs.record_evaluation(span, name="x")
