"""Request bodies built from cached message encodings are byte-identical to a full encode.

``build_content`` reuses each message's JSON from earlier requests; whatever the
conversation, its bytes must equal ``json_body(build_body(request))``, the full
encoding every request used before, and a turn must encode only its new messages.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopobs.contract.model import (
    AssistantMessage,
    Message,
    ModelRequest,
    SystemMessage,
    ThinkingBlock,
    ToolCallPart,
    ToolDefinition,
    ToolResultMessage,
    UserMessage,
)
from loopobs.llm import AnthropicClient, OpenAIClient
from loopobs.llm._encoded import EncodedMessages
from loopobs.llm._http import HttpModelClient, json_body

TOOLS = (
    ToolDefinition(
        name="search",
        description="Find things",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
    ),
)

_text = st.text(
    alphabet=st.characters(codec=None, min_codepoint=0, max_codepoint=0x1F600), max_size=12
)


def _message(kind: int, text: str, n: int) -> Message:
    if kind == 0:
        return SystemMessage(content=text)
    if kind == 1:
        return UserMessage(content=text)
    if kind == 2:
        return AssistantMessage(
            content=text,
            tool_calls=(ToolCallPart(id=f"c{n}", name="search", arguments={"q": text, "n": n}),),
            thinking_blocks=(
                ThinkingBlock(thinking=text, signature="sig"),
                ThinkingBlock(redacted="opaque"),
            ),
        )
    if kind == 3:
        return AssistantMessage(content=text)
    if kind == 4:
        return AssistantMessage()
    return ToolResultMessage(
        tool_call_id=f"c{n}", name="search", content=text, is_error=bool(n % 2)
    )


def _clients() -> list[HttpModelClient]:
    return [OpenAIClient(api_key="k"), AnthropicClient(api_key="k")]


def _grow(client: HttpModelClient, history: list[Message], options: dict[str, Any]) -> None:
    for end in range(1, len(history) + 1):
        request = ModelRequest(
            model='m"x', messages=tuple(history[:end]), tools=TOOLS, options=options
        )
        assert client.build_content(request) == json_body(client.build_body(request))


@pytest.mark.slow  # one of the longest of the suite: `make unit-fast` leaves it out
@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), _text), max_size=14),
    st.sampled_from(
        [{}, {"temperature": 0.5, "stream": False}, {"stream_options": {"x": 1}, "max_tokens": 9}]
    ),
)
def test_cached_bodies_equal_full_encoding(
    steps: list[tuple[int, str]], options: dict[str, Any]
) -> None:
    history = [_message(kind, text, n) for n, (kind, text) in enumerate(steps)]
    for client in _clients():
        _grow(client, history, options)


def test_lone_surrogates_and_odd_text_equal_full_encoding() -> None:
    history: list[Message] = [
        SystemMessage(content="be brief"),
        UserMessage(content="a\ud83d"),
        AssistantMessage(
            content='\ude00 \u2028 "q" ,"messages":[]',
            tool_calls=(ToolCallPart(id="1", name="search", arguments={"q": "\ud83d\ude00"}),),
        ),
        ToolResultMessage(tool_call_id="1", name="search", content="\ud800"),
        UserMessage(content="after the result"),
        AssistantMessage(content="done"),
    ]
    for client in _clients():
        _grow(client, history, {})


@pytest.mark.parametrize("make", [OpenAIClient, AnthropicClient])
def test_a_turn_encodes_only_its_new_messages(make: Any) -> None:
    client = make(api_key="k")
    history: list[Message] = [SystemMessage(content="s"), UserMessage(content="go")]
    cache: EncodedMessages[bytes] = client._encoded
    for turn in range(200):
        before = cache.encoded
        client.build_content(ModelRequest(model="m", messages=tuple(history)))
        # Only the two messages added since the last request are encoded.
        if turn:
            assert cache.encoded - before == 2
        history += [
            AssistantMessage(
                content=f"t{turn}",
                tool_calls=(ToolCallPart(id=f"c{turn}", name="search", arguments={"q": turn}),),
            ),
            ToolResultMessage(tool_call_id=f"c{turn}", name="search", content="r"),
        ]


def test_options_that_replace_the_messages_are_encoded_whole() -> None:
    for client in _clients():
        request = ModelRequest(
            model="m",
            messages=(UserMessage(content="hi"),),
            options={"messages": [{"role": "user", "content": "other"}]},
        )
        assert client.build_content(request) == json_body(client.build_body(request))
        assert b"other" in client.build_content(request)


def test_the_cache_is_bounded_in_bytes() -> None:
    cache: EncodedMessages[bytes] = EncodedMessages(
        lambda m: m.content.encode(), len, max_bytes=1000
    )
    kept = [UserMessage(content="x" * 100) for _ in range(50)]
    for message in kept:
        assert cache.get(message) == b"x" * 100
    assert cache._bytes <= 1000
    assert cache.encoded == 50
    assert cache.get(kept[-1]) == b"x" * 100
    assert cache.encoded == 50
    assert cache.get(kept[0]) == b"x" * 100
    assert cache.encoded == 51
