"""A Google ADK agent, its spans read by the span bridge: run in ADK's own venv.

ADK 2.13 caps OpenTelemetry at 1.44, below loopobs's dev venv, so
``tests/test_otel_bridge_adk.py`` runs this file with the venv that ``make
bridge-venvs`` builds (``build/bridge-venvs/adk``), the repository on ``PYTHONPATH``.
The model is ADK's own model interface (``BaseLlm``) answering from a script, offline;
ADK writes its spans (``invoke_workflow``, ``invoke_agent``, ``generate_content``,
``execute_tool``) through the global provider to a
:class:`~loopobs.adapters.otel.GenAISpanProcessor`. Prints one JSON summary.

    python tests/_adk_app.py SCENARIO [--group-by agent|trace]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from collections.abc import AsyncIterator
from typing import Any

from tests._bridge_app import Bridge

# (function call id, tool, arguments) or the answer text, with (input, output) tokens
Step = tuple[tuple[str, str, dict[str, Any]] | str, tuple[int, int]]

SCENARIOS: dict[str, list[Step]] = {
    "productive": [
        (("c1", "add", {"a": 1, "b": 2}), (12, 7)),
        (("c2", "add", {"a": 3, "b": 4}), (20, 5)),
        ("3 and 7", (30, 4)),
    ],
    "six_jobs": [
        *(((f"p{i}", "poll", {"job": str(i)}), (3, 1)) for i in range(6)),
        ("all queued", (3, 1)),
    ],
    "runaway": [
        *(((f"p{i}", "poll", {"job": "42"}), (3, 1)) for i in range(6)),
        ("gave up", (3, 1)),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--group-by", default="agent", choices=["agent", "trace"])
    args = parser.parse_args()
    bridge = Bridge(args.group_by)

    # imported by name: ADK is not in the dev venv that type-checks this file
    agents: Any = importlib.import_module("google.adk.agents")
    base_llm: Any = importlib.import_module("google.adk.models.base_llm")
    llm_response: Any = importlib.import_module("google.adk.models.llm_response")
    runners: Any = importlib.import_module("google.adk.runners")
    types: Any = importlib.import_module("google.genai.types")
    script = SCENARIOS[args.scenario]
    served: list[int] = []

    class ScriptedLlm(base_llm.BaseLlm):  # type: ignore[misc]
        """ADK's model interface, answering the next step of the script."""

        async def generate_content_async(
            self, llm_request: Any, stream: bool = False
        ) -> AsyncIterator[Any]:
            what, (tokens_in, tokens_out) = script[min(len(served), len(script) - 1)]
            served.append(1)
            if isinstance(what, str):
                part = types.Part(text=what)
            else:
                call_id, name, arguments = what
                part = types.Part(
                    function_call=types.FunctionCall(id=call_id, name=name, args=arguments)
                )
            yield llm_response.LlmResponse(
                content=types.Content(role="model", parts=[part]),
                usage_metadata=types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=tokens_in,
                    candidates_token_count=tokens_out,
                    total_token_count=tokens_in + tokens_out,
                ),
            )

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def poll(job: str) -> str:
        """Poll a job."""
        return f"job {job}: queued"

    agent = agents.LlmAgent(
        name="calc",
        model=ScriptedLlm(model="scripted"),
        tools=[add, poll],
        instruction="Use the tools.",
    )

    async def run() -> str:
        runner = runners.InMemoryRunner(agent=agent, app_name="app")
        session = await runner.session_service.create_session(app_name="app", user_id="u")
        answer = ""
        async for event in runner.run_async(
            user_id="u",
            session_id=session.id,
            new_message=types.Content(role="user", parts=[types.Part(text="go")]),
        ):
            for part in (event.content.parts if event.content else None) or []:
                if part.text:
                    answer = part.text
        return answer

    answer = asyncio.run(run())
    print(bridge.summary(answer=answer, served=len(served)))


if __name__ == "__main__":
    main()
