"""A small tool-calling agent on the official ``openai`` client, instrumented like real apps.

The model spans come from a real instrumentor (OpenInference's or OpenLLMetry's
OpenAI instrumentation); the app writes its own agent and tool spans in the same
convention, as agent frameworks do. The model is :class:`~tests._openai_server.ScriptedServer`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

Convention = Literal["openinference", "genai"]

TOOLS: dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b,
    "poll": lambda job: "queued",
    "explode": lambda x: (_ for _ in ()).throw(ValueError(f"bad input {x}")),
}

TOOL_SCHEMAS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in TOOLS
]


@contextmanager
def instrumented(convention: Convention, provider: TracerProvider) -> Iterator[None]:
    """Instrument the ``openai`` client into ``provider`` (never the global one), then undo."""
    instrumentor: Any
    if convention == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor

        instrumentor = OpenAIInstrumentor()
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as LLMetry

        instrumentor = LLMetry()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def _agent_attrs(convention: Convention, name: str) -> dict[str, Any]:
    if convention == "openinference":
        return {"openinference.span.kind": "AGENT", "agent.name": name}
    return {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}


def _tool_attrs(convention: Convention, name: str, call_id: str, args: str) -> dict[str, Any]:
    if convention == "openinference":
        # as OpenInference's instrumentors write them: the arguments in input.value, the
        # tool's JSON schema in tool.parameters
        return {
            "openinference.span.kind": "TOOL",
            "tool.name": name,
            "tool.id": call_id,
            "input.value": args,
            "tool.parameters": json.dumps(TOOL_SCHEMAS[0]),
        }
    return {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call_id,
        "gen_ai.tool.call.arguments": args,
    }


def _result_attr(convention: Convention) -> str:
    return "output.value" if convention == "openinference" else "gen_ai.tool.call.result"


def run_agent(
    client: openai.OpenAI,
    tracer: Tracer,
    convention: Convention,
    question: str,
    *,
    agent_span: bool = True,
    max_turns: int = 10,
    stream: bool = False,
) -> str:
    """Ask the model, run the tools it asks for, until it answers (or ``max_turns``)."""
    outer = (
        tracer.start_as_current_span(
            "invoke_agent calc", attributes=_agent_attrs(convention, "calc")
        )
        if agent_span
        else tracer.start_as_current_span("POST /ask")
    )
    with outer:
        messages: list[Any] = [{"role": "user", "content": question}]
        for _ in range(max_turns):
            if stream:
                chunks = client.chat.completions.create(
                    model="gpt-test",
                    messages=messages,
                    stream=True,
                    stream_options={"include_usage": True},
                )
                return "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            reply = client.chat.completions.create(
                model="gpt-test", messages=messages, tools=TOOL_SCHEMAS
            )
            message = reply.choices[0].message
            if not message.tool_calls:
                return message.content or ""
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                fn = call.function  # type: ignore[union-attr]
                with tracer.start_as_current_span(
                    f"execute_tool {fn.name}",
                    attributes=_tool_attrs(convention, fn.name, call.id, fn.arguments),
                ) as span:
                    result = str(TOOLS[fn.name](**json.loads(fn.arguments)))
                    span.set_attribute(_result_attr(convention), result)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        return ""


async def run_agent_async(
    client: openai.AsyncOpenAI, tracer: Tracer, convention: Convention, started: asyncio.Event
) -> None:
    """One model call asking for a tool that never returns (to be cancelled)."""
    with tracer.start_as_current_span(
        "invoke_agent calc", attributes=_agent_attrs(convention, "calc")
    ):
        reply = await client.chat.completions.create(
            model="gpt-test", messages=[{"role": "user", "content": "wait"}], tools=TOOL_SCHEMAS
        )
        call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
        with tracer.start_as_current_span(
            "execute_tool wait", attributes=_tool_attrs(convention, "wait", call.id, "{}")
        ):
            started.set()
            await asyncio.Event().wait()
