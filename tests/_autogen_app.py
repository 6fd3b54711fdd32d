"""An AutoGen AgentChat agent, its spans read by the span bridge: run in AutoGen's own venv.

``tests/test_otel_bridge_autogen.py`` runs this file with the venv that ``make bridge-venvs``
builds (``build/bridge-venvs/autogen``), the repository on ``PYTHONPATH``. The model is
:class:`tests._openai_server.ScriptedServer` through AutoGen's ``OpenAIChatCompletionClient``;
autogen-core writes its ``invoke_agent`` and ``execute_tool`` spans, and an OpenAI
instrumentor the model calls (``--instrument-openai``: OpenInference's;
``--instrument-openai-guide``: ``opentelemetry-instrumentation-openai``, the one AutoGen's
tracing guide installs), to a
:class:`~loopobs.adapters.otel.GenAISpanProcessor`. Prints one JSON summary.

    python tests/_autogen_app.py SCENARIO [--instrument-openai] [--instrument-openai-guide]
        [--group-by agent|trace] [--stream] [--team]
        [--budget-tokens N] [--stop --stop-after N [--raw]]
    # --stop: with LoopobsModelClient, through run_observed() (--raw: runner.run())
    python tests/_autogen_app.py doc     # runs docs/adapters/autogen.md's example as written
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

from tests._bridge_app import Bridge
from tests._openai_server import Reply, ScriptedServer
from tests._strands_app import SCENARIOS

DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters" / "autogen.md"
MODEL_INFO = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


def _doc() -> None:
    """Run the page's example against a server that asks for the same poll forever."""
    runaway = [Reply(calls=[(f"p{i}", "poll", {"job": "42"})], usage=(3, 1)) for i in range(9)]
    with ScriptedServer(runaway) as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "k"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            for block in re.findall(r"^```python\n(.*?)^```", DOC.read_text(), re.S | re.M):
                exec(compile(block, str(DOC), "exec"), {"__name__": "docs_example"})
        served = len(server.requests)
    print(json.dumps({"printed": out.getvalue().splitlines(), "served": served}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=[*sorted(SCENARIOS), "doc"])
    parser.add_argument("--instrument-openai", action="store_true")
    # the OpenAI instrumentor of AutoGen's tracing guide (opentelemetry-instrumentation-openai)
    parser.add_argument("--instrument-openai-guide", action="store_true")
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--team", action="store_true")  # the agent alone in a RoundRobinGroupChat
    parser.add_argument("--raw", action="store_true")  # runner.run(), not run_observed()
    parser.add_argument("--stop", action="store_true")
    parser.add_argument("--stop-after", type=int, default=5)
    parser.add_argument("--budget-tokens", type=int, default=None)
    args = parser.parse_args()
    if args.scenario == "doc":
        _doc()
        return
    bridge = Bridge(args.group_by, stop_after=args.stop_after, budget_tokens=args.budget_tokens)

    # imported by name: AutoGen is not in the dev venv that type-checks this file
    agents: Any = importlib.import_module("autogen_agentchat.agents")
    teams: Any = importlib.import_module("autogen_agentchat.teams")
    conditions: Any = importlib.import_module("autogen_agentchat.conditions")
    openai_client: Any = importlib.import_module("autogen_ext.models.openai")
    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)
    if args.instrument_openai_guide:
        guide: Any = importlib.import_module("opentelemetry.instrumentation.openai")
        guide.OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    async def run(base_url: str) -> str:
        client: Any = openai_client.OpenAIChatCompletionClient(
            model="gpt-test", base_url=base_url, api_key="k", max_retries=0, model_info=MODEL_INFO
        )
        if args.stop:
            from loopobs.adapters.autogen import LoopobsModelClient

            client = LoopobsModelClient(client, bridge.processor)
        agent = agents.AssistantAgent(
            "calc",
            model_client=client,
            tools=[add, poll],
            max_tool_iterations=10,
            model_client_stream=args.stream,
        )
        # what the agent's config dumps as its model client (the wrapper dumps the wrapped one)
        dumped.append(agent.dump_component().config["model_client"]["provider"])
        runner = (
            teams.RoundRobinGroupChat(
                [agent], termination_condition=conditions.MaxMessageTermination(3)
            )
            if args.team
            else agent
        )
        try:
            if args.stop and not args.raw:
                from loopobs.adapters.autogen import run_observed

                result = await run_observed(runner, client, task="go")
            else:
                result = await runner.run(task="go")
        finally:
            await client.close()
        return str(result.messages[-1].content)

    dumped: list[str] = []
    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        answer, raised = "", None
        try:
            answer = asyncio.run(run(server.base_url))
        except Exception as exc:
            raised = f"{type(exc).__name__}: {exc}".splitlines()[0]
        served = len(server.requests)
    print(bridge.summary(answer=answer.strip(), served=served, raised=raised, dumped=dumped))


if __name__ == "__main__":
    main()
