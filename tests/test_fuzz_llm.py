"""What the SSE fuzzing in ``tests/test_sse.py`` and ``tests/test_llm_*.py`` does not reach:
JSON nested past the parser's recursion limit, from a broken or hostile server, in a data
line, in tool-call arguments, or in an error body. Each gives a ``LoopError`` (or raw
arguments the loop answers with ``InvalidToolInput``), never a ``RecursionError``."""

from __future__ import annotations

import json

import pytest

from loopobs import LoopError
from loopobs.contract.model import ToolCallReady
from loopobs.llm._http import server_message
from loopobs.llm.anthropic import MessagesDecoder
from loopobs.llm.openai import ChatCompletionsDecoder

DEEP = "[" * 100_000
DEEP_OBJECT = '{"a":' * 5_000 + "1" + "}" * 5_000


@pytest.mark.parametrize("payload", [DEEP, DEEP_OBJECT])
@pytest.mark.parametrize("decoder", [ChatCompletionsDecoder, MessagesDecoder])
def test_deep_data_line_is_a_loop_error(decoder: type, payload: str) -> None:
    """A data line nested too deeply is a StreamError (a LoopError)."""
    with pytest.raises(LoopError, match="invalid JSON"):
        decoder().feed("message", payload)


def test_openai_deep_tool_arguments_stay_raw() -> None:
    """Tool-call arguments nested too deeply are kept raw, for an InvalidToolInput result."""
    d = ChatCompletionsDecoder()
    chunk = {
        "id": "r",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "t", "arguments": DEEP},
                        }
                    ]
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    events = d.feed("message", json.dumps(chunk)) + d.end()
    ready = [e for e in events if isinstance(e, ToolCallReady)]
    assert len(ready) == 1
    assert ready[0].call.raw_arguments == DEEP


def test_anthropic_deep_tool_input_stays_raw() -> None:
    """A tool_use block whose streamed input is nested too deeply is kept raw."""
    d = MessagesDecoder()
    feed = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "m",
                    "model": "c",
                    "usage": {"input_tokens": 1, "output_tokens": 0},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "t1", "name": "t", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": DEEP},
            },
        ),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ]
    events = []
    for name, payload in feed:
        events += d.feed(name, json.dumps(payload))
    ready = [e for e in events if isinstance(e, ToolCallReady)]
    assert len(ready) == 1
    assert ready[0].call.raw_arguments == DEEP


def test_deep_error_body_is_quoted() -> None:
    """An error body nested too deeply is quoted as text, not a crash."""
    message = server_message(DEEP.encode())
    assert message.startswith("'[[[")
