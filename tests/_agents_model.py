"""An offline model for the OpenAI Agents SDK: a script of responses behind the SDK's ``Model``.

Each model call takes the next step of the script: a list of output items (tool
calls, an assistant message), or an exception to raise. Usage is reported per
call exactly as a provider would (input tokens with a cached share, output
tokens with a reasoning share), so tests can compare the adapter's figures with
what the model said. ``stream_response`` streams the message text as text
deltas followed by the completed response, the way the Responses API does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

Step = Sequence[TResponseOutputItem] | BaseException | Callable[[], Any]

INPUT_TOKENS = 40
CACHED_TOKENS = 8
OUTPUT_TOKENS = 7
REASONING_TOKENS = 2


def tool_call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    """A function call item, as the model would emit it."""
    return ResponseFunctionToolCall(
        type="function_call",
        name=name,
        call_id=call_id,
        arguments=json.dumps(arguments),
        id=f"fc_{call_id}",
        status="completed",
    )


def message(text: str) -> ResponseOutputMessage:
    """An assistant message item."""
    return ResponseOutputMessage(
        type="message",
        id="msg_1",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


def usage_of_one_call() -> Usage:
    """What every scripted call reports."""
    return Usage(
        requests=1,
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        total_tokens=INPUT_TOKENS + OUTPUT_TOKENS,
        input_tokens_details=InputTokensDetails(cached_tokens=CACHED_TOKENS, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=REASONING_TOKENS),
    )


class ScriptModel(Model):
    """Answers each call with the next step of ``steps``; ``model`` is the name it reports.

    A step that is a callable is awaited first if it returns an awaitable (to block a
    call until a test cancels it), then its result is used as the step.
    """

    def __init__(self, steps: Sequence[Step], *, model: str = "script-1") -> None:
        self.steps = list(steps)
        self.model = model
        self.calls = 0

    async def _next(self) -> Sequence[TResponseOutputItem]:
        self.calls += 1
        step = self.steps.pop(0)
        if callable(step) and not isinstance(step, BaseException):
            step = step()
            if asyncio.iscoroutine(step):
                step = await step
        if isinstance(step, BaseException):
            raise step
        return list(step)

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        output = await self._next()
        return ModelResponse(
            output=list(output), usage=usage_of_one_call(), response_id=f"resp_{self.calls}"
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        output = await self._next()
        seq = 0
        for item in output:
            if isinstance(item, ResponseOutputMessage):
                for part in item.content:
                    if isinstance(part, ResponseOutputText):
                        for word in part.text.split(" "):
                            seq += 1
                            yield ResponseTextDeltaEvent(
                                type="response.output_text.delta",
                                item_id=item.id,
                                output_index=0,
                                content_index=0,
                                delta=word + " ",
                                logprobs=[],
                                sequence_number=seq,
                            )
        usage = usage_of_one_call()
        response = Response(
            id=f"resp_{self.calls}",
            created_at=0,
            model=self.model,
            object="response",
            output=list(output),
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
            status="completed",
            usage=ResponseUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                total_tokens=usage.total_tokens,
                input_tokens_details=usage.input_tokens_details,
                output_tokens_details=usage.output_tokens_details,
            ),
        )
        yield ResponseCompletedEvent(
            type="response.completed", response=response, sequence_number=seq + 1
        )
