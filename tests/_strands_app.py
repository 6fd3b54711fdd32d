"""A Strands agent, its spans read by the span bridge: run in Strands' own venv.

Strands pins OpenTelemetry apart from loopobs's dev venv, so
``tests/test_otel_bridge_strands.py`` runs this file with the venv that ``make
bridge-venvs`` builds (``build/bridge-venvs/strands``), the repository on
``PYTHONPATH``. The model is :class:`tests._openai_server.ScriptedServer` through
Strands' own ``OpenAIModel``; every span goes, through the global provider that
Strands' tracer uses, to a :class:`~loopobs.adapters.otel.GenAISpanProcessor`.
Prints one JSON summary of what the processor reported.

    python tests/_strands_app.py SCENARIO [--instrument-openai] [--group-by agent|trace]
"""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from loopobs import RepetitionDetector
from loopobs.adapters.otel import GenAISpanProcessor
from loopobs.testing import RecordingObserver, assert_contract
from tests._openai_server import Reply, ScriptedServer

SCENARIOS: dict[str, list[Reply]] = {
    # two additions, then the answer
    "productive": [Reply(calls=[("call_1", "add", {"a": 1, "b": 2})], usage=(12, 7)),
                   Reply(calls=[("call_2", "add", {"a": 3, "b": 4})], usage=(20, 5)),
                   Reply("3 and 7", usage=(30, 4))],
    # six different jobs polled once each: new work, not a loop
    "six_jobs": [*(Reply(calls=[(f"p{i}", "poll", {"job": str(i)})], usage=(3, 1))
                   for i in range(6)), Reply("all queued", usage=(3, 1))],
    # the same job polled six times: a runaway
    "runaway": [*(Reply(calls=[(f"p{i}", "poll", {"job": "42"})], usage=(3, 1))
                  for i in range(6)), Reply("gave up", usage=(3, 1))],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    args = parser.parse_args()

    recorder = RecordingObserver()
    processor = GenAISpanProcessor(
        [recorder], group_by=args.group_by,
        detectors=[RepetitionDetector(warn_after=3, stop_after=5)])
    provider = TracerProvider()
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)  # Strands' tracer writes to the global provider

    # imported by name: strands is not in the dev venv that type-checks this file
    strands: Any = importlib.import_module("strands")
    OpenAIModel: Any = importlib.import_module("strands.models.openai").OpenAIModel

    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        model = OpenAIModel(client_args={"base_url": server.base_url, "api_key": "k"},
                            model_id="gpt-test")
        agent = strands.Agent(model=model, tools=[strands.tool(add), strands.tool(poll)],
                              name="calc", callback_handler=None)
        answer = str(agent("go")).strip()
        served = len(server.requests)
    provider.shutdown()
    assert_contract(recorder.events)
    summary: dict[str, Any] = {
        "answer": answer,
        "served": served,
        "agents": [c.agent for c in recorder.of("on_run_start")],
        "runs_ended": [c.status for c in recorder.of("on_run_end")],
        "model_calls": len(recorder.of("on_stream_success")),
        "input_tokens": sum(c.input_tokens for c in recorder.of("on_run_end")),
        "output_tokens": sum(c.output_tokens for c in recorder.of("on_run_end")),
        "tools": [c.tool for c in recorder.of("on_tool_post")],
        "arguments": [dict(c.input) for c in recorder.of("on_tool_call_received")],
        "results": [c.result for c in recorder.of("on_tool_post")],
        "detections": [d.action for d in recorder.of("on_loop_detected")],
        "open_runs": processor.open_runs,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
