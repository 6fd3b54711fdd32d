"""A CrewAI crew, its spans read by the span bridge and stopped by its hook: run in CrewAI's venv.

``tests/test_otel_bridge_crewai.py`` runs this file with the venv that ``make bridge-venvs``
builds (``build/bridge-venvs/crewai``), the repository on ``PYTHONPATH``. The model is
:class:`tests._openai_server.ScriptedServer` through CrewAI's own ``LLM`` (its native OpenAI
provider); OpenInference's CrewAI instrumentor (and, with ``--instrument-openai``, its OpenAI
one) writes the spans to a :class:`~loopobs.adapters.otel.GenAISpanProcessor`;
:class:`~loopobs.adapters.crewai.LoopobsCrewHook` stops a runaway. Prints one JSON summary.

    python tests/_crewai_app.py SCENARIO [--instrument-openai] [--no-hook] [--stop-after N]
    python tests/_crewai_app.py doc     # runs docs/adapters/crewai.md's example as written
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
from pathlib import Path
from typing import Any

# CrewAI's own telemetry and tracing would call its servers: off (the run is offline).
os.environ["CREWAI_DISABLE_TELEMETRY"] = "true"
os.environ["CREWAI_TRACING_ENABLED"] = "false"
os.environ["OTEL_SDK_DISABLED"] = "false"

from tests._bridge_app import Bridge
from tests._openai_server import ScriptedServer
from tests._strands_app import SCENARIOS

DOC = Path(__file__).resolve().parents[1] / "docs" / "adapters" / "crewai.md"


def _doc() -> None:
    (block,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    out = io.StringIO()
    with ScriptedServer(SCENARIOS["runaway"]) as server:
        os.environ["OPENAI_BASE_URL"] = server.base_url
        os.environ["OPENAI_API_KEY"] = "sk-test"
        with contextlib.redirect_stdout(out):
            exec(compile(block, str(DOC), "exec"), {"__name__": "docs_example"})
        served = len(server.requests)
    print(json.dumps({"printed": out.getvalue().splitlines(), "served": served}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=[*sorted(SCENARIOS), "doc"])
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--no-hook", action="store_true")
    parser.add_argument("--stop-after", type=int, default=3)
    args = parser.parse_args()
    if args.scenario == "doc":
        _doc()
        return
    bridge = Bridge("trace", stop_after=args.stop_after)

    # imported by name: CrewAI is not in the dev venv that type-checks this file
    crewai: Any = importlib.import_module("crewai")
    crewai_tool: Any = importlib.import_module("crewai.tools").tool
    instrumentor: Any = importlib.import_module("openinference.instrumentation.crewai")
    adapter: Any = importlib.import_module("loopobs.adapters.crewai")
    instrumentor.CrewAIInstrumentor().instrument(tracer_provider=bridge.provider)
    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)

    @crewai_tool("add")
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @crewai_tool("poll")
    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    hook = adapter.LoopobsCrewHook(bridge.processor)
    if not args.no_hook:
        hook.register()
    raised = None
    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        llm = crewai.LLM(model="openai/gpt-test", base_url=server.base_url, api_key="k")
        agent = crewai.Agent(
            role="calc",
            goal="do the task",
            backstory="a careful worker",
            llm=llm,
            tools=[add, poll],
        )
        task = crewai.Task(description="add 1+2 and 3+4", expected_output="the sums", agent=agent)
        crew = crewai.Crew(agents=[agent], tasks=[task])
        answer = ""
        try:
            answer = str(adapter.kickoff_observed(crew))
        except Exception as exc:
            raised = f"{type(exc).__name__}: {exc}"
        served = len(server.requests)
    hook.unregister()
    print(bridge.summary(answer=answer.strip(), served=served, raised=raised))


if __name__ == "__main__":
    main()
