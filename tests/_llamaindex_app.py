"""A LlamaIndex agent under OpenInference's LlamaIndex instrumentation, read by the span
bridge: run in a venv of its own.

``tests/test_otel_bridge_llamaindex.py`` runs this file with the venv that ``make
bridge-venvs`` builds (``build/bridge-venvs/llamaindex``: LlamaIndex would move the dev
venv's setuptools), the repository on ``PYTHONPATH``. A ``FunctionAgent`` on LlamaIndex's
``OpenAI`` LLM talks to :class:`tests._openai_server.ScriptedServer`. Prints one JSON summary.

    python tests/_llamaindex_app.py SCENARIO [--group-by agent|trace]
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
    parser.add_argument("--group-by", default="trace", choices=["agent", "trace"])
    args = parser.parse_args()
    bridge = Bridge(args.group_by)

    # imported by name: LlamaIndex is not in the dev venv that type-checks this file
    instrumentor: Any = importlib.import_module(
        "openinference.instrumentation.llama_index"
    ).LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=bridge.provider)
    function_agent: Any = importlib.import_module("llama_index.core.agent.workflow").FunctionAgent
    llm_class: Any = importlib.import_module("llama_index.llms.openai").OpenAI

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        llm = llm_class(model="gpt-4o-mini", api_base=server.base_url, api_key="k", max_retries=0)
        agent = function_agent(tools=[add, poll], llm=llm, system_prompt="Use the tools.")

        async def run() -> str:
            return str(await agent.run("go"))

        answer = asyncio.run(run())
        served = len(server.requests)
    instrumentor.uninstrument()
    print(bridge.summary(answer=answer.strip(), served=served))


if __name__ == "__main__":
    main()
