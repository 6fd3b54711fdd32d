"""A smolagents agent, its spans read by the span bridge: run in smolagents' own venv.

``tests/test_otel_bridge_smolagents.py`` runs this file with the venv that ``make
bridge-venvs`` builds (``build/bridge-venvs/smolagents``), the repository on ``PYTHONPATH``.
The model is :class:`tests._openai_server.ScriptedServer` through smolagents'
``OpenAIServerModel``; OpenInference's smolagents instrumentor writes the spans (agent run,
model calls, tools) to a :class:`~loopobs.adapters.otel.GenAISpanProcessor`. Prints one JSON
summary. With ``--stop``, :class:`~loopobs.adapters.smolagents.LoopobsStepCallback` is on the
agent and stops a runaway (``raised`` in the summary: the exception's type and message).

    python tests/_smolagents_app.py SCENARIO [--instrument-openai] [--stop]
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from tests._bridge_app import Bridge
from tests._openai_server import Reply, ScriptedServer


def _done(text: str, n: int) -> Reply:
    # smolagents' ToolCallingAgent ends a run with its final_answer tool, not with text
    return Reply(calls=[(f"f{n}", "final_answer", {"answer": text})], usage=(30, 4))


SCENARIOS: dict[str, list[Reply]] = {
    "productive": [
        Reply(calls=[("call_1", "add", {"a": 1, "b": 2})], usage=(12, 7)),
        Reply(calls=[("call_2", "add", {"a": 3, "b": 4})], usage=(20, 5)),
        _done("3 and 7", 3),
    ],
    "six_jobs": [
        *(Reply(calls=[(f"p{i}", "poll", {"job": str(i)})], usage=(3, 1)) for i in range(6)),
        _done("all queued", 6),
    ],
    "runaway": [
        *(Reply(calls=[(f"p{i}", "poll", {"job": "42"})], usage=(3, 1)) for i in range(6)),
        _done("gave up", 6),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--stop", action="store_true")
    args = parser.parse_args()
    bridge = Bridge("trace")
    from loopobs.adapters.smolagents import LoopobsStepCallback

    stopper = LoopobsStepCallback(bridge.processor)

    # imported by name: smolagents is not in the dev venv that type-checks this file
    smolagents: Any = importlib.import_module("smolagents")
    instrumentor: Any = importlib.import_module("openinference.instrumentation.smolagents")
    instrumentor.SmolagentsInstrumentor().instrument(tracer_provider=bridge.provider)
    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)

    @smolagents.tool
    def add(a: int, b: int) -> str:
        """Add two numbers.

        Args:
            a: the first number.
            b: the second number.
        """
        return str(a + b)

    @smolagents.tool
    def poll(job: str) -> str:
        """Poll a job.

        Args:
            job: the job's id.
        """
        return f"job {job}: queued"

    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        model = smolagents.OpenAIServerModel(
            model_id="gpt-test", api_base=server.base_url, api_key="k"
        )
        agent = smolagents.ToolCallingAgent(
            tools=[add, poll],
            model=model,
            name="calc",
            max_steps=10,
            verbosity_level=0,
            step_callbacks=[stopper] if args.stop else None,
        )
        answer, raised = "", ""
        try:
            answer = str(stopper.run(agent, "add 1+2 and 3+4"))
        except Exception as exc:
            raised = f"{type(exc).__name__}: {exc}"
        served = len(server.requests)
        steps = len(agent.memory.steps)
    print(bridge.summary(answer=answer.strip(), raised=raised, served=served, steps=steps))


if __name__ == "__main__":
    main()
