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
from typing import Any

from tests._bridge_app import Bridge
from tests._openai_server import Reply, ScriptedServer

SCENARIOS: dict[str, list[Reply]] = {
    # two additions, then the answer
    "productive": [
        Reply(calls=[("call_1", "add", {"a": 1, "b": 2})], usage=(12, 7)),
        Reply(calls=[("call_2", "add", {"a": 3, "b": 4})], usage=(20, 5)),
        Reply("3 and 7", usage=(30, 4)),
    ],
    # six different jobs polled once each: new work, not a loop
    "six_jobs": [
        *(Reply(calls=[(f"p{i}", "poll", {"job": str(i)})], usage=(3, 1)) for i in range(6)),
        Reply("all queued", usage=(3, 1)),
    ],
    # the same job polled six times: a runaway
    "runaway": [
        *(Reply(calls=[(f"p{i}", "poll", {"job": "42"})], usage=(3, 1)) for i in range(6)),
        Reply("gave up", usage=(3, 1)),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    args = parser.parse_args()

    bridge = Bridge(args.group_by)

    # imported by name: strands is not in the dev venv that type-checks this file
    strands: Any = importlib.import_module("strands")
    OpenAIModel: Any = importlib.import_module("strands.models.openai").OpenAIModel

    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        model = OpenAIModel(
            client_args={"base_url": server.base_url, "api_key": "k"}, model_id="gpt-test"
        )
        agent = strands.Agent(
            model=model,
            tools=[strands.tool(add), strands.tool(poll)],
            name="calc",
            callback_handler=None,
        )
        answer = str(agent("go")).strip()
        served = len(server.requests)
    print(bridge.summary(answer=answer, served=served))


if __name__ == "__main__":
    main()
