"""Conformance: each span, metric and event loopobs emits, against the spec's requirement levels.

The tables below transcribe the requirement levels of the GenAI semantic conventions:

* default: ``open-telemetry/semantic-conventions`` **v1.41.0** — ``model/gen-ai/spans.yaml``
  (``gen_ai.inference.client``, ``gen_ai.execute_tool.internal``,
  ``gen_ai.invoke_agent.internal``), ``model/gen-ai/metrics.yaml``, ``model/gen-ai/events.yaml``
  and ``docs/gen-ai/gen-ai-exceptions.md``; ``gen_ai.execute_tool.duration`` and
  ``gen_ai.invoke_agent.duration`` from ``open-telemetry/semantic-conventions-genai``
  ``model/gen-ai/metrics.yaml`` (they exist only there);
* ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``:
  ``open-telemetry/semantic-conventions-genai`` **v0.1.0** — ``model/gen-ai/spans.yaml``,
  ``metrics.yaml``, ``token-metrics.yaml`` (the ``gen_ai.client.inference.*`` metrics, required
  ``gen_ai.token.modality``), the ``gen_ai.client.inference.exception`` event, and the
  ``gen_ai.invoke_agent.inference_calls`` / ``tool_calls`` histograms.

A real run (the OpenAI client on recorded HTTP, a fallback after a failed call, a tool
error, content captured on spans and events, an evaluation) is exported through the SDK's
in-memory exporters, and every span, metric point and log record is checked: a missing
required or conditionally required attribute, a value of the wrong type, an attribute the
table does not list for that signal (in the ``gen_ai``, ``server``, ``error``, ``exception``
and ``openai`` namespaces), and a name the conventions deprecate fail the test — in both modes.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes, openai_attributes
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.trace import StatusCode

import loopobs
from loopobs import AgentLoop, RateLimited
from loopobs.exporters import catalog as c
from loopobs.llm import Fail, OpenAIClient, Reply, ScriptedClient
from tests._ast import parse
from tests._llm_replay import PLANTED_KEY, Replay, get_weather, local_time
from tests._otel_capture import Capture

REQUIRED, CONDITIONAL, RECOMMENDED, OPT_IN = (
    "required",
    "conditionally_required",
    "recommended",
    "opt_in",
)
STR, INT, DOUBLE, BOOL, STRS = "string", "int", "double", "boolean", "string[]"

Condition = Callable[[Mapping[str, Any], bool], bool]
"""(attributes, failed) → whether a conditionally required attribute must be present."""


def _on_error(attrs: Mapping[str, Any], failed: bool) -> bool:
    return failed


def _with_server(attrs: Mapping[str, Any], failed: bool) -> bool:
    return c.SERVER_ADDRESS in attrs


def _always(attrs: Mapping[str, Any], failed: bool) -> bool:
    return True


def _never(attrs: Mapping[str, Any], failed: bool) -> bool:
    return False  # "if applicable / if the request has one": checked by type only


@dataclass(frozen=True)
class Attr:
    level: str
    type: str
    when: Condition = _never


@dataclass(frozen=True)
class Signal:
    """One span type, metric or event: its attributes' levels, plus kind/unit for metrics."""

    attributes: Mapping[str, Attr]
    kind: str = ""
    unit: str = ""


# -- spans (v1.41.0 spans.yaml) -------------------------------------------------------------
_USAGE = {
    c.GEN_AI_USAGE_INPUT_TOKENS: Attr(RECOMMENDED, INT),
    c.GEN_AI_USAGE_OUTPUT_TOKENS: Attr(RECOMMENDED, INT),
    c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Attr(RECOMMENDED, INT),
    c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Attr(RECOMMENDED, INT),
}
_CONTENT = {
    c.GEN_AI_INPUT_MESSAGES: Attr(OPT_IN, STR),
    c.GEN_AI_OUTPUT_MESSAGES: Attr(OPT_IN, STR),
    c.GEN_AI_SYSTEM_INSTRUCTIONS: Attr(OPT_IN, STR),
}
_REQUEST = {
    c.GEN_AI_REQUEST_MAX_TOKENS: Attr(RECOMMENDED, INT),
    c.GEN_AI_REQUEST_CHOICE_COUNT: Attr(CONDITIONAL, INT),
    c.GEN_AI_REQUEST_TEMPERATURE: Attr(RECOMMENDED, DOUBLE),
    c.GEN_AI_REQUEST_TOP_P: Attr(RECOMMENDED, DOUBLE),
    c.GEN_AI_REQUEST_TOP_K: Attr(CONDITIONAL, DOUBLE),
    c.GEN_AI_REQUEST_STOP_SEQUENCES: Attr(RECOMMENDED, STRS),
    c.GEN_AI_REQUEST_FREQUENCY_PENALTY: Attr(RECOMMENDED, DOUBLE),
    c.GEN_AI_REQUEST_PRESENCE_PENALTY: Attr(RECOMMENDED, DOUBLE),
    c.GEN_AI_REQUEST_SEED: Attr(CONDITIONAL, INT),
}
_ERROR = {c.ERROR_TYPE: Attr(CONDITIONAL, STR, _on_error)}
_SERVER = {
    c.SERVER_ADDRESS: Attr(RECOMMENDED, STR),
    c.SERVER_PORT: Attr(CONDITIONAL, INT, _with_server),
}

CHAT_SPAN = {
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_PROVIDER_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_REQUEST_MODEL: Attr(CONDITIONAL, STR, _always),  # "if available": it always is
    c.GEN_AI_CONVERSATION_ID: Attr(CONDITIONAL, STR, _always),  # the session id
    c.GEN_AI_REQUEST_STREAM: Attr(CONDITIONAL, BOOL, _always),  # every loopobs call streams
    **_ERROR,
    **_SERVER,
    **_REQUEST,
    **_USAGE,
    **_CONTENT,
    c.GEN_AI_RESPONSE_ID: Attr(RECOMMENDED, STR),
    c.GEN_AI_RESPONSE_MODEL: Attr(RECOMMENDED, STR),
    c.GEN_AI_RESPONSE_FINISH_REASONS: Attr(RECOMMENDED, STRS),
    c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK: Attr(RECOMMENDED, DOUBLE),
    c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Attr(RECOMMENDED, INT),
    # the openai refinement of the inference span
    c.OPENAI_REQUEST_SERVICE_TIER: Attr(CONDITIONAL, STR),
    c.OPENAI_RESPONSE_SERVICE_TIER: Attr(CONDITIONAL, STR),
    c.OPENAI_RESPONSE_SYSTEM_FINGERPRINT: Attr(RECOMMENDED, STR),
}
TOOL_SPAN = {
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_TOOL_NAME: Attr(REQUIRED, STR),
    **_ERROR,
    c.GEN_AI_TOOL_CALL_ID: Attr(RECOMMENDED, STR),
    c.GEN_AI_TOOL_DESCRIPTION: Attr(RECOMMENDED, STR),
    c.GEN_AI_TOOL_TYPE: Attr(RECOMMENDED, STR),
    c.GEN_AI_TOOL_CALL_ARGUMENTS: Attr(OPT_IN, STR),
    c.GEN_AI_TOOL_CALL_RESULT: Attr(OPT_IN, STR),
}
AGENT_SPAN = {
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_PROVIDER_NAME: Attr(REQUIRED, STR),
    **_ERROR,
    c.GEN_AI_AGENT_NAME: Attr(CONDITIONAL, STR, _always),
    c.GEN_AI_CONVERSATION_ID: Attr(CONDITIONAL, STR, _always),
    c.GEN_AI_REQUEST_MODEL: Attr(CONDITIONAL, STR, _always),
    **_REQUEST,
    **_USAGE,
    **_CONTENT,
    c.GEN_AI_RESPONSE_FINISH_REASONS: Attr(RECOMMENDED, STRS),
}

# -- metrics (v1.41.0 metrics.yaml; tool and agent durations from the genai repository) -----
_CLIENT_METRIC = {
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_PROVIDER_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_REQUEST_MODEL: Attr(CONDITIONAL, STR, _always),
    c.GEN_AI_RESPONSE_MODEL: Attr(RECOMMENDED, STR),
    **_SERVER,
}
TOKEN_USAGE = Signal(
    {**_CLIENT_METRIC, c.GEN_AI_TOKEN_TYPE: Attr(REQUIRED, STR)}, "histogram", "{token}"
)
DURATION = Signal({**_CLIENT_METRIC, **_ERROR}, "histogram", "s")
CHUNK_TIMING = Signal(_CLIENT_METRIC, "histogram", "s")
TOOL_DURATION = Signal(
    {
        **_ERROR,
        c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
        c.GEN_AI_TOOL_NAME: Attr(REQUIRED, STR),
        c.GEN_AI_TOOL_TYPE: Attr(RECOMMENDED, STR),
        c.GEN_AI_AGENT_NAME: Attr(CONDITIONAL, STR, _always),
    },
    "histogram",
    "s",
)
AGENT_METRIC = {
    **_ERROR,
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_AGENT_NAME: Attr(CONDITIONAL, STR, _always),
    c.GEN_AI_REQUEST_MODEL: Attr(CONDITIONAL, STR, _always),
}
AGENT_DURATION = Signal(AGENT_METRIC, "histogram", "s")

# -- events (log records) --------------------------------------------------------------------
DETAILS_EVENT = {
    c.GEN_AI_OPERATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_PROVIDER_NAME: Attr(REQUIRED, STR),
    **{k: v for k, v in CHAT_SPAN.items() if k not in _CONTENT},
    c.GEN_AI_INPUT_MESSAGES: Attr(OPT_IN, "any"),
    c.GEN_AI_OUTPUT_MESSAGES: Attr(OPT_IN, "any"),
    c.GEN_AI_SYSTEM_INSTRUCTIONS: Attr(OPT_IN, "any"),
}
EXCEPTION_EVENT = {
    **{k: v for k, v in CHAT_SPAN.items() if k not in _CONTENT},
    c.EXCEPTION_TYPE: Attr(REQUIRED, STR),
    c.EXCEPTION_MESSAGE: Attr(RECOMMENDED, STR),
    c.ERROR_TYPE: Attr(REQUIRED, STR),
}
EVALUATION_EVENT = {
    c.GEN_AI_EVALUATION_NAME: Attr(REQUIRED, STR),
    c.GEN_AI_EVALUATION_SCORE_VALUE: Attr(CONDITIONAL, DOUBLE),
    c.GEN_AI_EVALUATION_SCORE_LABEL: Attr(CONDITIONAL, STR),
    c.GEN_AI_EVALUATION_EXPLANATION: Attr(RECOMMENDED, STR),
    c.GEN_AI_RESPONSE_ID: Attr(RECOMMENDED, STR),
    **_ERROR,
}


def _latest(table: Mapping[str, Attr]) -> dict[str, Attr]:
    """The table with the genai repository's renames: ``cache_write`` for ``cache_creation``."""
    out = dict(table)
    if out.pop(c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, None) is not None:
        out[c.GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS] = Attr(RECOMMENDED, INT)
    return out


@dataclass(frozen=True)
class Spec:
    """The tables of one mode."""

    spans: Mapping[str, Mapping[str, Attr]]
    metrics: Mapping[str, Signal]
    events: Mapping[str, Mapping[str, Attr]]
    deprecated: frozenset[str] = field(default_factory=frozenset)
    """Names this mode replaces (on top of what the semconv package deprecates)."""


_INFERENCE_COUNTER = {**_CLIENT_METRIC, c.GEN_AI_TOKEN_MODALITY: Attr(REQUIRED, STR)}

DEFAULT = Spec(
    spans={"chat": CHAT_SPAN, "execute_tool": TOOL_SPAN, "invoke_agent": AGENT_SPAN},
    metrics={
        c.TOKEN_USAGE.name: TOKEN_USAGE,
        c.OPERATION_DURATION.name: DURATION,
        c.TIME_TO_FIRST_CHUNK.name: CHUNK_TIMING,
        c.TIME_PER_OUTPUT_CHUNK.name: CHUNK_TIMING,
        c.TOOL_DURATION.name: TOOL_DURATION,
        c.AGENT_DURATION.name: AGENT_DURATION,
    },
    events={
        c.EVENT_INFERENCE_DETAILS: DETAILS_EVENT,
        c.EVENT_OPERATION_EXCEPTION: EXCEPTION_EVENT,
        c.EVENT_EVALUATION_RESULT: EVALUATION_EVENT,
    },
)
LATEST = Spec(
    spans={
        "chat": _latest(CHAT_SPAN),
        "execute_tool": TOOL_SPAN,
        # genai v0.1.0: the internal agent span lists no provider (and no agent id).
        "invoke_agent": _latest(
            {k: v for k, v in AGENT_SPAN.items() if k != c.GEN_AI_PROVIDER_NAME}
        ),
    },
    metrics={
        c.INFERENCE_DURATION.name: DURATION,
        c.INFERENCE_TIME_TO_FIRST_CHUNK.name: CHUNK_TIMING,
        c.INFERENCE_TIME_PER_OUTPUT_CHUNK.name: CHUNK_TIMING,
        **{
            spec.name: Signal(_INFERENCE_COUNTER, "sum", "{token}")
            for spec in (
                c.INFERENCE_INPUT_TOKENS,
                c.INFERENCE_OUTPUT_TOKENS,
                c.INFERENCE_CACHE_READ_TOKENS,
                c.INFERENCE_CACHE_WRITE_TOKENS,
                c.INFERENCE_REASONING_TOKENS,
            )
        },
        c.INFERENCE_OPERATION_INPUT_TOKENS.name: Signal(
            {**_CLIENT_METRIC, **_ERROR}, "histogram", "{token}"
        ),
        c.INFERENCE_OPERATION_OUTPUT_TOKENS.name: Signal(
            {**_CLIENT_METRIC, **_ERROR}, "histogram", "{token}"
        ),
        c.TOOL_DURATION.name: TOOL_DURATION,
        c.AGENT_DURATION.name: AGENT_DURATION,
        c.AGENT_INFERENCE_CALLS.name: Signal(AGENT_METRIC, "histogram", "{inference_call}"),
        c.AGENT_TOOL_CALLS.name: Signal(AGENT_METRIC, "histogram", "{tool_call}"),
    },
    events={
        c.EVENT_INFERENCE_DETAILS: _latest(DETAILS_EVENT),
        c.EVENT_INFERENCE_EXCEPTION: _latest(EXCEPTION_EVENT),
        c.EVENT_EVALUATION_RESULT: EVALUATION_EVENT,
    },
    deprecated=frozenset(
        {
            c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
            c.TOKEN_USAGE.name,
            c.OPERATION_DURATION.name,
            c.TIME_TO_FIRST_CHUNK.name,
            c.TIME_PER_OUTPUT_CHUNK.name,
            c.EVENT_OPERATION_EXCEPTION,
        }
    ),
)

# -- what the semconv package deprecates ------------------------------------------------------


def _package_deprecations() -> frozenset[str]:
    """Names whose generated docstring says they were replaced or removed.

    Every GenAI name in the package says "Deprecated: Moved to the … GenAI repository";
    a move is not a deprecation, a replacement or removal is.
    """
    found: set[str] = set()
    for module in (gen_ai_attributes, openai_attributes, gen_ai_metrics):
        tree = parse(inspect.getsource(module))
        body = tree.body
        for node, following in itertools.pairwise(body):
            if not (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
            ):
                continue
            doc = str(following.value.value)
            if "Deprecated: Replaced by" in doc or "Deprecated: Removed" in doc:
                found.add(str(node.value.value))
    return frozenset(found)


PACKAGE_DEPRECATED = _package_deprecations()
_CHECKED_PREFIXES = ("gen_ai.", "server.", "error.", "exception.", "openai.")


# -- the checker ------------------------------------------------------------------------------
def _type_ok(value: Any, kind: str) -> bool:
    if kind == "any":
        return True
    if kind == STR:
        return isinstance(value, str)
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == DOUBLE:
        return isinstance(value, float)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == STRS:
        return isinstance(value, tuple | list) and all(isinstance(v, str) for v in value)
    raise AssertionError(kind)


def problems_of(
    where: str,
    attributes: Mapping[str, Any],
    table: Mapping[str, Attr],
    failed: bool,
    deprecated: frozenset[str],
) -> list[str]:
    """What is wrong with one signal's attributes against its table (empty: conformant)."""
    out = []
    for key, attr in table.items():
        present = key in attributes
        if not present and (
            attr.level == REQUIRED or (attr.level == CONDITIONAL and attr.when(attributes, failed))
        ):
            out.append(f"{where}: {attr.level} {key} missing")
        if present and not _type_ok(attributes[key], attr.type):
            out.append(f"{where}: {key}={attributes[key]!r} is not {attr.type}")
    for key in attributes:
        if key in deprecated or key in PACKAGE_DEPRECATED:
            out.append(f"{where}: {key} is deprecated")
        elif key.startswith(_CHECKED_PREFIXES) and key not in table:
            out.append(f"{where}: {key} is not listed for this signal")
    return out


def _span_kind(span: ReadableSpan) -> str:
    return span.name.split(" ", 1)[0]


def check_spans(spans: Sequence[ReadableSpan], spec: Spec) -> list[str]:
    out = []
    seen = set()
    for span in spans:
        attributes = dict(span.attributes or {})
        kind = _span_kind(span)
        failed = span.status.status_code is StatusCode.ERROR
        if kind == "turn":
            # loopobs's own span: no GenAI operation, nothing from the GenAI namespaces
            out += [
                f"turn: {k} on loopobs's own span"
                for k in attributes
                if k.startswith(_CHECKED_PREFIXES) and k != c.ERROR_TYPE
            ]
            continue
        seen.add(kind)
        table = spec.spans.get(kind)
        if table is None:
            out.append(f"{span.name}: a span the table does not know")
            continue
        if attributes.get(c.GEN_AI_OPERATION_NAME) != kind:
            out.append(f"{span.name}: operation name {attributes.get(c.GEN_AI_OPERATION_NAME)}")
        out += problems_of(span.name, attributes, table, failed, spec.deprecated)
        for event in span.events:
            if event.name in spec.deprecated or event.name in PACKAGE_DEPRECATED:
                out.append(f"{span.name}: span event {event.name} is deprecated")
    out += [f"no {kind} span was emitted" for kind in set(spec.spans) - seen]
    return out


def check_metrics(capture: Capture, spec: Spec) -> list[str]:
    out = []
    exported = capture.metric_kinds()
    for name, metric in exported.items():
        if name in spec.deprecated or name in PACKAGE_DEPRECATED:
            out.append(f"metric {name} is deprecated")
        signal = spec.metrics.get(name)
        if signal is None:
            if name.startswith("gen_ai."):
                out.append(f"metric {name} is not in the table")
            continue
        kind = type(metric.data).__name__.lower()
        if kind != signal.kind:
            out.append(f"metric {name} is a {kind}, not a {signal.kind}")
        if metric.unit != signal.unit:
            out.append(f"metric {name} has unit {metric.unit}, not {signal.unit}")
        for point in metric.data.data_points:
            attributes = dict(point.attributes or {})
            out += problems_of(
                f"metric {name}",
                attributes,
                signal.attributes,
                c.ERROR_TYPE in attributes,
                spec.deprecated,
            )
    out += [f"metric {name} was not recorded" for name in set(spec.metrics) - set(exported)]
    return out


def check_events(capture: Capture, spec: Spec) -> list[str]:
    out = []
    seen = set()
    for record in capture.logs():
        log = record.log_record
        name = log.event_name or ""
        seen.add(name)
        if name in spec.deprecated or name in PACKAGE_DEPRECATED:
            out.append(f"event {name} is deprecated")
            continue
        table = spec.events.get(name)
        if table is None:
            out.append(f"event {name} is not in the table")
            continue
        if not log.span_id:
            out.append(f"event {name} is not in a span's context")
        out += problems_of(
            f"event {name}", dict(log.attributes or {}), table, False, spec.deprecated
        )
    out += [f"event {name} was not emitted" for name in set(spec.events) - seen]
    return out


# -- the run ------------------------------------------------------------------------------------
async def _drive(capture: Capture, latest: bool) -> None:
    observers = capture.observers(capture_content="SPAN_AND_EVENT", latest=latest)
    replay = Replay.of(["openai_tool_calls", "openai_text"])
    loop = AgentLoop(
        OpenAIClient(api_key=PLANTED_KEY, http_client=replay.http()),
        model="gpt-4o",
        tools=[get_weather, local_time],
        observers=observers,
        detectors=[],
        system_prompt="Be brief.",
        request_options={
            "max_tokens": 300,
            "temperature": 0.2,
            "seed": 3,
            "stop": ["\n\n"],
            "service_tier": "default",
        },
    )
    result = await loop.run("Weather in Paris and Tokyo, and the time?")
    assert result.ok
    loopobs.record_evaluation(
        result.run_id,
        name="helpful",
        score=1.0,
        label="pass",
        logger_provider=capture.logger_provider,
        meter_provider=capture.meter_provider,
    )
    failing = AgentLoop(
        ScriptedClient([Fail(RateLimited("busy")), Reply(text="ok")]),
        model="m1",
        fallback_models=["m2"],
        observers=observers,
        detectors=[],
    )
    assert (await failing.run("q")).ok


@pytest.fixture(params=[False, True], ids=["v1.41", "gen_ai_latest_experimental"])
def emitted(request: pytest.FixtureRequest) -> Iterator[tuple[Capture, Spec]]:
    import asyncio

    capture = Capture()
    latest = bool(request.param)
    asyncio.run(_drive(capture, latest))
    yield capture, (LATEST if latest else DEFAULT)
    capture.shutdown()


def test_spans_conform(emitted: tuple[Capture, Spec]) -> None:
    """chat, execute_tool and invoke_agent spans carry what the table requires, typed right."""
    capture, spec = emitted
    assert check_spans(capture.all_spans(), spec) == []


def test_metrics_conform(emitted: tuple[Capture, Spec]) -> None:
    """Every GenAI metric is in the table, with its kind, unit and required attributes."""
    capture, spec = emitted
    assert check_metrics(capture, spec) == []


def test_events_conform(emitted: tuple[Capture, Spec]) -> None:
    """Inference details, the exception event and the evaluation result, each in a span."""
    capture, spec = emitted
    assert check_events(capture, spec) == []


def test_the_checker_finds_each_kind_of_problem() -> None:
    """A missing required attribute, a wrong type, an unlisted one and a deprecated name."""
    good = {c.GEN_AI_OPERATION_NAME: "execute_tool", c.GEN_AI_TOOL_NAME: "t"}
    assert problems_of("s", good, TOOL_SPAN, False, frozenset()) == []
    assert problems_of(
        "s", {c.GEN_AI_OPERATION_NAME: "execute_tool"}, TOOL_SPAN, False, frozenset()
    ) == ["s: required gen_ai.tool.name missing"]
    assert problems_of("s", good, TOOL_SPAN, True, frozenset()) == [
        "s: conditionally_required error.type missing"
    ]
    assert problems_of("s", {**good, c.GEN_AI_TOOL_CALL_ID: 7}, TOOL_SPAN, False, frozenset()) == [
        "s: gen_ai.tool.call.id=7 is not string"
    ]
    assert problems_of(
        "s", {**good, c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: 1}, TOOL_SPAN, False, frozenset()
    ) == ["s: gen_ai.usage.reasoning.output_tokens is not listed for this signal"]
    assert "gen_ai.system" in PACKAGE_DEPRECATED
    assert c.GEN_AI_PROVIDER_NAME not in PACKAGE_DEPRECATED  # moved, not deprecated
    assert problems_of("s", {**good, "gen_ai.system": "openai"}, TOOL_SPAN, False, frozenset()) == [
        "s: gen_ai.system is deprecated"
    ]
    assert problems_of(
        "s",
        {**good, c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: 1},
        TOOL_SPAN,
        False,
        LATEST.deprecated,
    ) == ["s: gen_ai.usage.cache_creation.input_tokens is deprecated"]
    port = {c.SERVER_ADDRESS: "h"}
    assert problems_of("m", port, _SERVER, False, frozenset()) == [
        "m: conditionally_required server.port missing"
    ]
    assert problems_of("m", {**port, c.SERVER_PORT: "443"}, _SERVER, False, frozenset()) == [
        "m: server.port='443' is not int"
    ]


def test_every_catalog_name_with_a_package_constant_uses_it() -> None:
    """No hand-typed duplicate: a catalog value the package defines is the package's constant."""
    package: dict[str, str] = {}
    for module in (gen_ai_attributes, openai_attributes, gen_ai_metrics):
        tree = parse(inspect.getsource(module))
        for node in tree.body:
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.target, ast.Name)
            ):
                package[str(node.value.value)] = node.target.id
    source = inspect.getsource(c)
    typed = [value for value in package if f'"{value}"' in source]
    assert typed == []
