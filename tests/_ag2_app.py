"""An AG2 agent, its spans read by the span bridge: run in AG2's own venv.

``tests/test_otel_bridge_ag2.py`` runs this file with the venv that ``make bridge-venvs``
builds (``build/bridge-venvs/ag2``; kept apart so that the dev venv's versions stay as
they are), the repository on ``PYTHONPATH``. The model is
:class:`tests._openai_server.ScriptedServer` through AG2's own ``OpenAIConfig``; AG2's
``TelemetryMiddleware`` writes its spans to a :class:`~loopobs.adapters.otel.GenAISpanProcessor`.
Prints one JSON summary.

    python tests/_ag2_app.py SCENARIO [--no-content] [--instrument-openai] [--group-by agent|trace]
        [--stop --stop-after N]   # with loopobs.adapters.ag2.LoopobsAG2Middleware
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
    parser.add_argument("--no-content", action="store_true")
    parser.add_argument("--instrument-openai", action="store_true")
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    parser.add_argument("--stop", action="store_true")
    parser.add_argument("--stop-after", type=int, default=5)
    args = parser.parse_args()
    bridge = Bridge(args.group_by, stop_after=args.stop_after)

    # imported by name: AG2 is not in the dev venv that type-checks this file
    ag2: Any = importlib.import_module("ag2")
    config_class: Any = importlib.import_module("ag2.config").OpenAIConfig
    telemetry: Any = importlib.import_module("ag2.middleware.builtin.telemetry").TelemetryMiddleware
    if args.instrument_openai:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=bridge.provider)

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    stopping: list[Any] = []
    if args.stop:
        from loopobs.adapters.ag2 import LoopobsAG2Middleware

        stopping.append(LoopobsAG2Middleware(bridge.processor))

    with ScriptedServer(SCENARIOS[args.scenario]) as server:
        config = config_class(
            model="gpt-test", api_key="k", base_url=server.base_url, max_retries=0
        )
        agent = ag2.Agent(
            "calc",
            config=config,
            tools=[add, poll],
            middleware=[
                telemetry(
                    tracer_provider=bridge.provider,
                    capture_content=not args.no_content,
                    agent_name="calc",
                    provider_name="openai",
                    model_name="gpt-test",
                ),
                *stopping,
            ],
        )
        answer, raised = "", None
        try:
            reply = asyncio.run(agent.ask("go"))
            answer = str(asyncio.run(reply.content()) if hasattr(reply, "content") else reply)
        except Exception as exc:
            raised = f"{type(exc).__name__}: {exc}"
        served = len(server.requests)
    print(bridge.summary(answer=answer.strip(), served=served, raised=raised))


if __name__ == "__main__":
    main()
