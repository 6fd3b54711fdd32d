"""Peers side by side: what each adds to one streamed model call (+ its tool call).

Run: ``make bench-peers`` (installs each peer into its own venv under
``build/peers/<peer>`` from ``bench/peers/<peer>.txt``, never into the dev
dependencies, then runs this script); ``--quick`` for a smoke run.

Workload, the same for everyone: one ``chat.completions`` call, streamed, whose
SSE body (``SSE_BODY``: text, one tool call, usage) comes from an in-process httpx
mock transport that yields to the event loop before every chunk, as a socket
would; then the tool call is executed. Each stack goes through its real client:
the ``openai`` SDK for the instrumentors and util-genai, ``langchain-openai``'s
``ChatOpenAI`` for LangChain, loopobs's ``AgentLoop`` + ``OpenAIClient`` (one
turn = the same call and its tool call, on a 20-turn run). Telemetry goes to a
SimpleSpanProcessor → in-memory exporter and an in-memory metric reader; message
content capture is off everywhere (each peer's own switch).

Each peer runs in its own venv. Instrumentors patch the SDK's classes, so each
round runs them bare and instrumented in two interpreters; the other stacks
alternate bare and instrumented calls in one. "added" is the median instrumented
call minus the median bare call, in CPU time of the process (wall time on a
shared machine mostly measures the other processes), over every round.
"bytes/span" is the OTLP protobuf size of the exported spans divided by their
number. The last column is each peer's added time as a ratio to loopobs's traces
+ metrics.

A second table compares the model-call span of each peer with loopobs's ``chat``
span: the OTLP bytes of the attributes both set (each side's own values), and
of the attributes only one of them sets.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENVS = ROOT / "build" / "peers"

PEERS = {
    "openllmetry": "OpenLLMetry (opentelemetry-instrumentation-openai), traces + metrics",
    "openinference": "OpenInference (openinference-instrumentation-openai), traces",
    "openai-v2": "OTel contrib openai-v2, traces + metrics",
    "util-genai": "opentelemetry-util-genai inference + tool record, traces + metrics",
    "langchain": "LangChain ChatOpenAI, callbacks to 3 no-op handlers",
}
OURS = {
    "loopobs": "loopobs TracingObserver + MetricsObserver, per turn",
    "loopobs-noop": "loopobs 3 no-op observers, per turn",
}

# Content capture off for every peer (loopobs's default).
CONTENT_OFF = {
    "TRACELOOP_TRACE_CONTENT": "false",
    "OPENINFERENCE_HIDE_INPUTS": "true",
    "OPENINFERENCE_HIDE_OUTPUTS": "true",
    "TRACELOOP_METRICS_ENABLED": "true",
}
# (contrib openai-v2 and util-genai capture no content unless told to.)

MODEL = "gpt-4o-mini"
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a city up.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
    payload: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL + "-2024-07-18",
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


SSE_BODY: list[bytes] = [
    _chunk({"role": "assistant", "content": ""}),
    *(_chunk({"content": word}) for word in ("Let ", "me ", "look ", "that ", "up.")),
    _chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }
            ]
        }
    ),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
    _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
    _chunk({}, finish="tool_calls"),
    _chunk({}, usage={"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}),
    b"data: [DONE]\n\n",
]


def transport() -> Any:
    """An httpx transport serving ``SSE_BODY``, yielding to the event loop before each chunk."""
    import httpx

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for chunk in SSE_BODY:
                await asyncio.sleep(0)
                yield chunk

    async def handle(request: httpx.Request) -> httpx.Response:
        await request.aread()
        await asyncio.sleep(0)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    return httpx.MockTransport(handle)


def lookup(city: str) -> str:
    """The tool: what every stack executes after the call."""
    return f"{city}: 12 °C, light rain"


# -- the stacks (each runs in its own venv) ------------------------------------------------


class Telemetry:
    """SDK providers with in-memory sinks (fresh per stack; never installed globally)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def span_bytes(self) -> tuple[int, float, dict[str, Any] | None]:
        """Spans exported so far, their mean OTLP protobuf size, and the model-call span.

        The model-call span (:func:`model_span`) is described by its own size and
        its attributes. Clears the exported spans.
        """
        spans = self.exporter.get_finished_spans()
        self.exporter.clear()
        if not spans:
            return 0, 0.0, None
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        mean = len(encode_spans(spans).SerializeToString()) / len(spans)
        return len(spans), mean, model_span(spans)


def model_span(spans: Any) -> dict[str, Any] | None:
    """The first model-call span: its OTLP size alone (no resource or scope) and attributes.

    A model call is a span whose ``gen_ai.operation.name`` is ``chat``, or
    OpenInference's ``LLM`` span kind.
    """
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    for span in spans:
        attributes = dict(span.attributes or {})
        if (
            attributes.get("gen_ai.operation.name") == "chat"
            or attributes.get("openinference.span.kind") == "LLM"
        ):
            message = encode_spans([span]).resource_spans[0].scope_spans[0].spans[0]
            return {
                "bytes": message.ByteSize(),
                "name": span.name,
                "attributes": {
                    k: list(v) if isinstance(v, tuple) else v for k, v in attributes.items()
                },
            }
    return None


def attribute_bytes(attributes: dict[str, Any]) -> int:
    """What ``attributes`` add to an OTLP span message, in bytes."""
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_attributes

    total = 0
    for kv in (
        _encode_attributes(
            {k: tuple(v) if isinstance(v, list) else v for k, v in attributes.items()}
        )
        or ()
    ):
        size = kv.ByteSize()
        total += 1 + len(_varint(size)) + size  # field tag, length, the key-value itself
    return total


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _openai_call() -> Callable[[], Awaitable[Any]]:
    import httpx
    import openai

    client = openai.AsyncOpenAI(
        api_key="k",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.AsyncClient(transport=transport()),
    )

    async def call() -> Any:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[TOOL],
            stream=True,
            stream_options={"include_usage": True},
        )
        arguments = ""
        async for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    arguments += call.function.arguments or ""
        return json.loads(arguments)

    return call


def _instrumentor_stack(
    name: str, tel: Telemetry
) -> tuple[Callable[[], Awaitable[Any]], Callable[[bool], None]]:
    call = _openai_call()
    if name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Instr
    elif name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as Instr
    else:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as Instr
    instrumentor = Instr()

    def switch(on: bool) -> None:
        if on:
            kwargs: dict[str, Any] = {"tracer_provider": tel.tracer_provider}
            if name != "openinference":
                kwargs["meter_provider"] = tel.meter_provider
            instrumentor.instrument(**kwargs)
        else:
            instrumentor.uninstrument()

    async def one() -> None:
        args = await call()
        lookup(**args)

    return one, switch


def _util_genai_stack(
    tel: Telemetry,
) -> tuple[Callable[[], Awaitable[Any]], Callable[[bool], None]]:
    from opentelemetry.util.genai.handler import TelemetryHandler

    call = _openai_call()
    handler = TelemetryHandler(
        tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider
    )
    state = {"on": False}

    async def one() -> None:
        if not state["on"]:
            lookup(**await call())
            return
        inv = handler.inference("openai", request_model=MODEL, server_address="127.0.0.1")
        inv.request_stream = True
        args = await call()
        inv.response_model_name = MODEL + "-2024-07-18"
        inv.response_id = "chatcmpl-1"
        inv.input_tokens = 120
        inv.output_tokens = 30
        inv.finish_reasons = ["tool_calls"]
        inv.stop()
        tool = handler.tool("lookup", tool_type="function")
        tool.tool_call_id = "call_1"
        lookup(**args)
        tool.stop()

    return one, lambda on: state.update(on=on)


def _langchain_stack() -> tuple[Callable[[], Awaitable[Any]], Callable[[bool], None]]:
    import httpx
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_openai import ChatOpenAI

    class NoOp(BaseCallbackHandler):
        pass

    model = ChatOpenAI(
        model=MODEL,
        api_key="k",
        base_url="http://127.0.0.1:9/v1",
        http_async_client=httpx.AsyncClient(transport=transport()),
        streaming=True,
        stream_usage=True,
    ).bind_tools([TOOL])
    state: dict[str, Any] = {"config": {}}

    async def one() -> None:
        message = None
        async for chunk in model.astream("Weather in Paris?", config=state["config"]):
            message = chunk if message is None else message + chunk
        assert message is not None
        lookup(**message.tool_calls[0]["args"])

    def switch(on: bool) -> None:
        state["config"] = {"callbacks": [NoOp(), NoOp(), NoOp()]} if on else {}

    return one, switch


TURNS = 20


def _loopobs_stack(
    name: str, tel: Telemetry
) -> tuple[Callable[[], Awaitable[Any]], Callable[[bool], None]]:
    import httpx

    sys.path.insert(0, str(ROOT))
    from loopobs import AgentLoop, LoopObserver, tool
    from loopobs.exporters import MetricsObserver, TracingObserver
    from loopobs.llm import OpenAIClient

    @tool
    def lookup_tool(city: str) -> str:
        """Look a city up."""
        return lookup(city)

    lookup_tool.name = "lookup"  # type: ignore[misc]
    client = OpenAIClient(
        "http://127.0.0.1:9/v1", api_key="k", http_client=httpx.AsyncClient(transport=transport())
    )
    observers: list[LoopObserver] = (
        [TracingObserver(tel.tracer_provider), MetricsObserver(tel.meter_provider)]
        if name == "loopobs"
        else [LoopObserver(), LoopObserver(), LoopObserver()]
    )
    state = {"on": False}

    async def one() -> None:
        loop = AgentLoop(
            client,
            model=MODEL,
            tools=[lookup_tool],
            max_turns=TURNS,
            observers=observers if state["on"] else [],
            detectors=[],
        )
        result = await loop.run("Weather in Paris?")
        assert result.turns == TURNS, result

    return one, lambda on: state.update(on=on)


def child(name: str, mode: str, calls: int) -> dict[str, Any]:
    """CPU time per call of ``name``'s stack, instrumented (``full``) or not (``bare``).

    One mode per interpreter: instrumentors patch the SDK's classes, and not every
    one restores them fully when uninstrumented.
    """
    os.environ.update(CONTENT_OFF)
    tel: Any = None if name == "langchain" else Telemetry()
    per = 1
    if name in PEERS and name not in ("util-genai", "langchain"):
        one, switch = _instrumentor_stack(name, tel)
    elif name == "util-genai":
        one, switch = _util_genai_stack(tel)
    elif name == "langchain":
        one, switch = _langchain_stack()
    else:
        one, switch = _loopobs_stack(name, tel)
        per, calls = TURNS, max(1, calls // TURNS)
    spans_of = tel.span_bytes if tel is not None else (lambda: (0, 0.0, None))

    async def timed(n: int) -> list[float]:
        # CPU time of this process: on a shared machine, wall time mostly measures the
        # other processes (everything here runs in this process: SimpleSpanProcessor).
        clock = time.process_time
        out = []
        for _ in range(n):
            started = clock()
            await one()
            out.append((clock() - started) / per)
        return out

    async def main() -> dict[str, Any]:
        switch(mode != "bare")
        await timed(max(1, calls // 5))  # warm-up: imports, first-call paths
        spans_of()
        times: dict[str, list[float]] = {"bare": [], "full": []}
        if mode == "paired":
            # Bare and instrumented calls alternate, so drift in the machine's load hits both.
            for _ in range(calls):
                switch(False)
                times["bare"] += await timed(1)
                switch(True)
                times["full"] += await timed(1)
        else:
            times[mode] = await timed(calls)
        spans, size, model = spans_of()
        measured = len(times["full"])
        return {
            "name": name,
            "mode": mode,
            "bare": times["bare"],
            "full": times["full"],
            "spans_per_call": spans / (measured * per) if measured else 0.0,
            "bytes_per_span": size,
            "model_span": model,
        }

    return asyncio.run(main())


# -- the orchestrator ----------------------------------------------------------------------


def _python_of(name: str) -> str | None:
    if name in OURS:
        return sys.executable
    python = VENVS / name / "bin" / "python"
    return str(python) if python.exists() else None


TOGGLED = ("util-genai", "langchain", "loopobs", "loopobs-noop")
"""Stacks switched on and off per call in one process; instrumentors patch classes, so
theirs run bare and instrumented in separate interpreters."""


def _child_run(python: str, name: str, mode: str, calls: int) -> dict[str, Any]:
    proc = subprocess.run(
        [python, __file__, "--child", name, "--mode", mode, "--calls", str(calls)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError((proc.stderr.strip().splitlines() or ["?"])[-1][:200])
    row: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return row


def run(names: list[str], rounds: int, calls: int) -> list[dict[str, Any]]:
    """Each stack bare and instrumented, alternating interpreters; skipped ones say why."""
    rows = []
    for name in names:
        python = _python_of(name)
        if python is None:
            rows.append(
                {
                    "name": name,
                    "skipped": f"no venv at build/peers/{name} (`make bench-peers` makes it)",
                }
            )
            continue
        bare: list[float] = []
        full: list[float] = []
        spans = size = 0.0
        model: dict[str, Any] | None = None
        try:
            for _ in range(rounds):
                modes = ["paired"] if name in TOGGLED else ["bare", "full"]
                for mode in modes:
                    row = _child_run(python, name, mode, calls)
                    bare += row["bare"]
                    full += row["full"]
                    if row["full"]:
                        spans, size = row["spans_per_call"], row["bytes_per_span"]
                        model = row.get("model_span") or model
        except RuntimeError as exc:
            rows.append({"name": name, "skipped": f"failed: {exc}"})
            continue
        bare_us, full_us = statistics.median(bare) * 1e6, statistics.median(full) * 1e6
        rows.append(
            {
                "name": name,
                "bare_us": bare_us,
                "full_us": full_us,
                "added_us": full_us - bare_us,
                "spans_per_call": spans,
                "bytes_per_span": size,
                "model_span": model,
            }
        )
        print(
            f"  {name}: {rows[-1]['added_us']:.1f} µs added per call", file=sys.stderr, flush=True
        )
    return rows


def same_attributes(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Per peer: the model-call span's bytes for the attributes it shares with loopobs's.

    Both sides' attribute bytes over the keys both set (values as each set them),
    then what each sets that the other does not.
    """
    ours = next((r.get("model_span") for r in rows if r["name"] == "loopobs"), None)
    if not ours:
        return []
    out = []
    for r in rows:
        theirs = r.get("model_span")
        if r["name"] in OURS or not theirs:
            continue
        shared = sorted(set(ours["attributes"]) & set(theirs["attributes"]))
        only_ours = sorted(set(ours["attributes"]) - set(theirs["attributes"]))
        only_theirs = sorted(set(theirs["attributes"]) - set(ours["attributes"]))

        def size(side: dict[str, Any], keys: list[str]) -> int:
            return attribute_bytes({k: side["attributes"][k] for k in keys})

        out.append(
            [
                r["name"],
                f"{len(shared)}",
                f"{size(ours, shared)} B",
                f"{size(theirs, shared)} B",
                f"{len(only_ours)} ({size(ours, only_ours)} B)",
                f"{len(only_theirs)} ({size(theirs, only_theirs)} B)",
                f"{ours['bytes']} / {theirs['bytes']} B",
            ]
        )
    return out


def table(rows: list[dict[str, Any]]) -> list[list[str]]:
    """Markdown rows: stack, added per call, spans, bytes per span, ratio to loopobs."""
    ours = next((r for r in rows if r["name"] == "loopobs" and "added_us" in r), None)
    out = []
    for r in rows:
        label = {**PEERS, **OURS}[r["name"]]
        if "skipped" in r:
            out.append([label, "skipped", "", "", r["skipped"]])
            continue
        ratio = f"{r['added_us'] / ours['added_us']:.2f}×" if ours and ours["added_us"] > 0 else ""
        out.append(
            [
                label,
                f"{r['added_us']:,.0f} µs",
                f"{r['spans_per_call']:g}",
                f"{r['bytes_per_span']:,.0f}" if r["bytes_per_span"] else "",
                ratio,
            ]
        )
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run every stack (or ``--only``) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", choices=[*PEERS, *OURS])
    parser.add_argument("--child", choices=[*PEERS, *OURS])
    parser.add_argument("--mode", choices=["bare", "full", "paired"], default="full")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.mode, args.calls)))
        return []
    rounds, calls = (2, 60) if args.quick else (args.rounds, args.calls)
    rows = run(args.only or [*PEERS, *OURS], rounds, calls)
    from bench._util import print_table

    print(
        f"\nPeers: added per model call (+ tool), medians of {rounds} rounds × {calls} calls, "
        f"Python {sys.version.split()[0]}\n"
    )
    print_table(["stack", "added per call", "spans", "bytes/span", "× loopobs"], table(rows))
    shared = same_attributes(rows)
    if shared:
        print(
            "\nThe model-call span, attribute by attribute: bytes of the attributes loopobs "
            "and the peer both set (each with its own values), and of those only one sets\n"
        )
        print_table(
            [
                "peer",
                "shared keys",
                "loopobs",
                "peer",
                "only loopobs",
                "only peer",
                "whole span: loopobs / peer",
            ],
            shared,
        )
    return rows


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
