"""A Microsoft Agent Framework agent, its spans read by the span bridge: run in its own venv.

``tests/test_otel_bridge_maf.py`` runs this file with the venv that ``make bridge-venvs``
builds (``build/bridge-venvs/maf``; kept apart so that the dev venv's versions stay as they
are), the repository on ``PYTHONPATH``. The model is
:class:`tests._openai_server.ScriptedServer` through the framework's own
``OpenAIChatCompletionClient``; its spans (``invoke_agent``, ``chat``, ``execute_tool``)
go through the global provider to a :class:`~loopobs.adapters.otel.GenAISpanProcessor`.
``ENABLE_SENSITIVE_DATA=true`` in the environment turns content on. Prints one JSON summary.

    python tests/_maf_app.py SCENARIO [--instrument-openai] [--group-by agent|trace]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from typing import Any

from tests._bridge_app import Bridge
from tests._openai_server import ScriptedServer
from tests._strands_app import SCENARIOS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    args = parser.parse_args()
    bridge = Bridge(args.group_by)

    # imported by name: the framework is not in the dev venv that type-checks this file
    af: Any = importlib.import_module("agent_framework")
    client_class: Any = importlib.import_module("agent_framework.openai").OpenAIChatCompletionClient
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
        client = client_class(model="gpt-test", api_key="k", base_url=server.base_url)
        agent = af.Agent(client, "Use the tools.", name="calc", tools=[add, poll])
        answer = str(asyncio.run(agent.run("go"))).strip()
        served = len(server.requests)
    print(bridge.summary(answer=answer, served=served))


if __name__ == "__main__":
    main()
