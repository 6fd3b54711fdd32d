"""Security: planted secrets never reach telemetry.

- No API key in spans, metrics, logs, the event log or error messages — even when the
  server echoes it back.
- No prompt, answer, reasoning, tool argument or tool result in any span, metric or
  log unless content capture is on; the JSONL event log, the user's own full record,
  does hold them (and its documentation says so).
- ``/metrics`` binds to 127.0.0.1 unless told otherwise.
- Label values are bounded, and ids (run, session, tool call) are never label values.
"""

from __future__ import annotations

import inspect
import json
import logging
import traceback
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from prometheus_client import generate_latest

from loopobs import AgentLoop, tool
from loopobs.contract.model import ModelRequest, ToolResultMessage
from loopobs.exporters import PrometheusObserver, start_metrics_server
from loopobs.exporters import jsonl as jsonl_module
from loopobs.exporters import metrics_server as metrics_server_module
from loopobs.llm import AnthropicClient, OpenAIClient, Reply, ScriptedClient, ToolCall
from loopobs.testing import assert_contract
from tests._reliability import Stack, make_stack

KEY = "sk-PLANTED-api-key-7f3a9c0d1e2b"


def _span_text(span: ReadableSpan) -> str:
    """Everything a span exports, as text: name, attributes, events, links, status."""
    return str(span.to_json())


def everything(stack: Stack, caplog: pytest.LogCaptureFixture, *extra: object) -> dict[str, str]:
    """Every output the exporters produced, by destination."""
    data = stack.metric_reader.get_metrics_data()
    logs = "\n".join(
        r.getMessage() + ("".join(traceback.format_exception(*r.exc_info)) if r.exc_info else "")
        for r in caplog.records
    )
    return {
        "spans": "\n".join(_span_text(s) for s in stack.span_exporter.get_finished_spans()),
        "otel metrics": data.to_json() if data is not None else "",
        "prometheus": generate_latest(stack.prometheus.registry).decode(),
        "logs": logs,
        "extra": "\n".join(repr(x) + str(x) for x in extra),
    }


def _echoing_server(seen: list[str]) -> httpx.MockTransport:
    """A server that echoes the credential it got in a 401 (as some APIs do, partly)."""

    def handler(request: httpx.Request) -> httpx.Response:
        got = request.headers.get("authorization") or request.headers.get("x-api-key") or ""
        seen.append(got)
        return httpx.Response(401, json={"error": {"message": f"bad key {got} ({KEY})"}})

    return httpx.MockTransport(handler)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_api_key_never_reaches_telemetry_logs_or_errors(
    provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is sent, echoed by the server, and found in no output at all."""
    seen: list[str] = []
    http = httpx.AsyncClient(transport=_echoing_server(seen))
    client: Any = (
        OpenAIClient("http://127.0.0.1:9/v1", api_key=KEY, http_client=http)
        if provider == "openai"
        else AnthropicClient("http://127.0.0.1:9", api_key=KEY, http_client=http)
    )
    stack = make_stack()
    loop = AgentLoop(client, model="m1", observers=stack.observers, fallback_models=["m2"])
    with caplog.at_level(logging.DEBUG):
        result = await loop.run("hello")
    await http.aclose()
    assert not result.ok
    assert seen
    assert all(KEY in s for s in seen)  # the key really went out
    outputs = everything(stack, caplog, result.error, client, *result.messages)
    outputs["event log"] = "\n".join(stack.jsonl_lines())
    for where, text in outputs.items():
        assert KEY not in text, f"the API key leaked into {where}"
    assert "***" in str(result.error)
    stack.close()


SECRETS = {
    "system": "SYSTEM-PROMPT-SECRET-d41d8",
    "query": "USER-QUERY-SECRET-8f14e",
    "answer": "ANSWER-SECRET-c9f0f",
    "thinking": "REASONING-SECRET-45c48",
    "argument": "TOOL-ARGUMENT-SECRET-6512b",
    "bad argument": "BAD-TOOL-ARGUMENT-SECRET-c20ad",
    "result": "TOOL-RESULT-SECRET-e4da3",
}


@tool
def vault(query: str) -> str:
    """Returns a secret result."""
    return f"{SECRETS['result']} for {len(query)} chars"


def _secret_script(request: ModelRequest) -> Reply:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if len(results) == 0:
        return Reply(
            thinking=SECRETS["thinking"],
            text="checking",
            tool_calls=(
                ToolCall("vault", {"query": SECRETS["argument"]}),
                ToolCall("vault", {"query": 7, "extra": SECRETS["bad argument"]}),
                ToolCall("vault", f'{{"query": "{SECRETS["bad argument"]}"'),
            ),
        )
    return Reply(text=f"The answer is {SECRETS['answer']}")


async def _secret_run(stack: Stack) -> Any:
    loop = AgentLoop(
        ScriptedClient(_secret_script, chunk_size=4),
        model="m1",
        tools=[vault],
        system_prompt=SECRETS["system"],
        observers=stack.observers,
    )
    return await loop.run(SECRETS["query"])


async def test_no_content_in_spans_metrics_or_logs_without_capture(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Capture off: no planted content anywhere but the JSONL event log, which has it all."""
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    stack = make_stack()
    with caplog.at_level(logging.DEBUG):
        result = await _secret_run(stack)
    assert result.ok
    assert_contract(stack.recorder.events)
    outputs = everything(stack, caplog)
    for name, secret in SECRETS.items():
        for where, text in outputs.items():
            assert secret not in text, f"the {name} leaked into {where}"
    # The event log is the user's own full record: it holds all of it, and says so.
    lines = stack.jsonl_lines()
    # Deltas come in 4-character chunks (so no span could hold a secret by accident):
    # the log's deltas joined hold the reasoning.
    log = "\n".join(lines) + "".join(
        json.loads(line)["delta"] for line in lines if '"on_thinking_delta"' in line
    )
    for name, secret in SECRETS.items():
        assert secret in log, f"the event log lost the {name}"
    assert jsonl_module.__doc__ is not None
    assert "user's own full record" in jsonl_module.__doc__
    assert "prompts, answers and tool arguments verbatim" in " ".join(jsonl_module.__doc__.split())
    stack.close()


async def test_content_capture_on_puts_content_on_spans(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scan above can see content: with capture on, prompt and answer are on spans."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    stack = make_stack()
    result = await _secret_run(stack)
    assert result.ok
    spans = "\n".join(_span_text(s) for s in stack.span_exporter.get_finished_spans())
    for name in ("system", "query", "answer", "argument", "result"):
        assert SECRETS[name] in spans, f"capture on, but no {name} on the spans"
    # Metrics never carry content, capture or not.
    prom = generate_latest(stack.prometheus.registry).decode()
    assert not any(secret in prom for secret in SECRETS.values())
    stack.close()


def test_metrics_server_binds_loopback_unless_told() -> None:
    """start_metrics_server defaults to 127.0.0.1; a wider bind needs an explicit addr."""
    default = inspect.signature(start_metrics_server).parameters["addr"].default
    assert default == "127.0.0.1"
    with start_metrics_server(0, registry=PrometheusObserver()) as server:
        assert server.addr == "127.0.0.1"
        assert server._httpd.socket.getsockname()[0] == "127.0.0.1"
    assert "127.0.0.1 unless told otherwise" in " ".join(
        (metrics_server_module.__doc__ or "").split()
    )


async def test_label_values_are_bounded_and_ids_never_labels() -> None:
    """30 agents, models and tools with a bound of 4: at most 4 values + _other per label."""
    bound = 4
    stack = make_stack()
    stack.prometheus = PrometheusObserver(max_label_values=bound)
    from loopobs.exporters import MetricsObserver

    stack.metrics = MetricsObserver(stack.meter_provider, max_label_values=bound)
    ids: set[str] = set()
    for i in range(30):
        name = f"tool_{i}"
        t = tool(name=name)(lambda: "ok")
        client = ScriptedClient([Reply(tool_calls=(ToolCall(name, {}),)), Reply(text="done")])
        loop = AgentLoop(
            client,
            model=f"model-{i}",
            tools=[t],
            agent_name=f"agent-{i}",
            observers=stack.observers,
            detectors=[],
        )
        result = await loop.run("go")
        assert result.ok
        ids |= {str(result.run_id), str(result.session.id)}
        ids |= {e.tool_call_id for e in stack.recorder.of("on_tool_post", result.run_id)}

    values: dict[str, set[str]] = {}
    for family in stack.prometheus.registry.collect():
        for sample in family.samples:
            for label, value in sample.labels.items():
                values.setdefault(label, set()).add(value)
    for label in ("gen_ai_agent_name", "gen_ai_request_model", "gen_ai_tool_name"):
        assert len(values[label] - {"", "_other"}) <= bound, label
        assert "_other" in values[label]
    prom = generate_latest(stack.prometheus.registry).decode()
    data = stack.metric_reader.get_metrics_data()
    otel = data.to_json() if data is not None else ""
    otel_values: dict[str, set[str]] = {}
    for rm in json.loads(otel)["resource_metrics"]:
        for sm in rm["scope_metrics"]:
            for metric in sm["metrics"]:
                for point in metric["data"]["data_points"]:
                    for key, value in point["attributes"].items():
                        otel_values.setdefault(key, set()).add(str(value))
    for key in ("gen_ai.agent.name", "gen_ai.request.model", "gen_ai.tool.name"):
        assert len(otel_values[key] - {"_other"}) <= bound, key
    for ident in ids:
        assert ident not in prom
        assert ident not in otel
    stack.close()


LOOP_SECRET = "SSN-123-45-6789-LOOPED"


@tool
def lookup_person(query: str) -> str:
    """Look a person up (always the same answer)."""
    return "no match"


async def test_a_stopped_loop_names_no_argument_values(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runaway call with a secret argument: the stop names the tool and a hash, never the value.

    The detector's pattern quotes the arguments; with capture off it must reach neither the
    span status, the span events, the metrics, the logs, nor the run's error message.
    """
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    stack = make_stack()
    script = ScriptedClient(
        lambda _: Reply(tool_calls=(ToolCall("lookup_person", {"query": LOOP_SECRET}),))
    )
    loop = AgentLoop(
        script, model="m1", tools=[lookup_person], observers=stack.observers, max_turns=40
    )
    with caplog.at_level(logging.DEBUG):
        result = await loop.run("find them")
    assert result.status == "loop_detected"
    assert result.error is not None
    assert "lookup_person(args#" in str(result.error)
    for where, text in everything(stack, caplog, result.error).items():
        assert LOOP_SECRET not in text, f"the looped argument leaked into {where}"
    assert LOOP_SECRET in "\n".join(stack.jsonl_lines())  # the user's full record keeps it
    stack.close()

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    captured = make_stack()
    loop = AgentLoop(
        script, model="m1", tools=[lookup_person], observers=captured.observers, max_turns=40
    )
    await loop.run("find them")
    spans = "\n".join(_span_text(s) for s in captured.span_exporter.get_finished_spans())
    assert LOOP_SECRET in spans  # capture on: the pattern is on the detection event
    captured.close()
