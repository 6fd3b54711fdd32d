"""ModelCall: one turn's model call, streamed, with the fallback chain."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from loopobs import (
    Conversation,
    FallbackExhausted,
    LlmClient,
    ModelError,
    ModelRequest,
    RateLimited,
    StreamError,
    StreamEvent,
    TextDelta,
    Usage,
    UserMessage,
)
from loopobs.llm import Fail, Reply, ScriptedClient, ToolCall
from loopobs.loop.model_call import ModelCall, note_model
from loopobs.testing import RecordingObserver
from tests._core_deps import make_deps


def call_for(
    client: LlmClient, *fallbacks: str
) -> tuple[ModelCall, Conversation, RecordingObserver]:
    rec = RecordingObserver()
    session = Conversation(messages=[UserMessage(content="hi")])
    deps = make_deps(client, observers=[rec], fallback_models=fallbacks)
    return ModelCall(deps, uuid.uuid4(), session), session, rec


async def test_a_streamed_response_is_assembled_and_reported() -> None:
    """Text, thinking and tool calls come back; start, deltas, success and response fire."""
    client = ScriptedClient(
        [
            Reply(
                text="hello there",
                thinking="hmm",
                tool_calls=(ToolCall("search", {"q": "x"}),),
                usage=Usage(input_tokens=40, output_tokens=7),
            )
        ],
        chunk_size=4,
    )
    call, session, rec = call_for(client)
    response = await call(0, "m1")
    assert response.text == "hello there"
    assert response.thinking == "hmm"
    assert [c.name for c in response.calls] == ["search"]
    assert response.usage == Usage(input_tokens=40, output_tokens=7)
    hooks = rec.hooks()
    assert hooks[0] == "on_stream_start"
    assert hooks[-2:] == ["on_stream_success", "on_response"]
    assert "".join(d.delta for d in rec.of("on_text_delta")) == "hello there"
    assert rec.of("on_response")[0].tool_calls == 1
    # the provider's count is the base of the next estimate
    assert session.last_input_tokens == 40
    assert session.messages_at_last_usage == 1


async def test_pending_notes_go_last_in_the_request_and_are_then_spent() -> None:
    """Detector notes ride on the next request only."""
    client = ScriptedClient([Reply(text="ok")])
    call, session, _ = call_for(client)
    session.pending_notes.append("[loopobs] Note: try something else")
    await call(0, "m1")
    sent = client.requests[0].messages
    assert isinstance(sent[-1], UserMessage)
    assert sent[-1].content.startswith("[loopobs] Note:")
    assert session.pending_notes == []


async def test_a_retryable_failure_falls_back_to_the_next_model() -> None:
    """m1 rate limited → on_fallback and on_model_switched → m2 answers; attempts count."""
    client = ScriptedClient([Fail(RateLimited()), Reply(text="from m2")])
    call, session, rec = call_for(client, "m2")
    session.last_model = "m1"
    response = await call(3, "m1")
    assert response.text == "from m2"
    assert [(s.model, s.attempt) for s in rec.of("on_stream_start")] == [("m1", 0), ("m2", 1)]
    assert isinstance(rec.of("on_stream_failure")[0].error, RateLimited)
    fallback = rec.of("on_fallback")[0]
    assert (fallback.from_model, fallback.to_model, fallback.turn) == ("m1", "m2", 3)
    switched = rec.of("on_model_switched")[0]
    assert (switched.from_model, switched.to_model) == ("m1", "m2")
    assert session.last_model == "m2"


async def test_a_non_retryable_failure_is_not_retried() -> None:
    """A non-retryable error goes up as it is; no fallback is tried."""
    client = ScriptedClient([Fail(ModelError("bad request", retryable=False)), Reply(text="x")])
    call, _, rec = call_for(client, "m2")
    with pytest.raises(ModelError, match="bad request"):
        await call(0, "m1")
    assert rec.of("on_fallback") == []
    assert len(rec.of("on_stream_failure")) == 1


async def test_every_model_failing_exhausts_the_chain() -> None:
    """FallbackExhausted names the models tried, in order, with each attempt's error."""
    client = ScriptedClient([Fail(RateLimited()), Fail(StreamError())])
    call, _, rec = call_for(client, "m2")
    with pytest.raises(FallbackExhausted) as info:
        await call(0, "m1")
    assert list(info.value.models) == ["m1", "m2"]
    assert [type(e) for e in info.value.failures] == [RateLimited, StreamError]
    assert len(rec.of("on_stream_failure")) == 2


class _NoFinish:
    provider = "broken"

    async def _events(self) -> AsyncIterator[StreamEvent]:
        yield TextDelta("half an answer")

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        return self._events()


class _Raises:
    provider = "raising"

    def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        raise OSError("socket closed")


async def test_a_stream_without_its_final_event_is_a_stream_error() -> None:
    """A stream that just stops fails the attempt (retryable), reported as a failure."""
    call, _, rec = call_for(_NoFinish())
    with pytest.raises(StreamError):
        await call(0, "m1")
    failure = rec.of("on_stream_failure")[0]
    assert isinstance(failure.error, StreamError)
    assert failure.provider == "broken"


async def test_a_client_that_raises_becomes_a_model_error() -> None:
    """Whatever the client raises is wrapped in a non-retryable ModelError."""
    call, _, rec = call_for(_Raises())
    with pytest.raises(ModelError, match="OSError: socket closed"):
        await call(0, "m1")
    assert rec.hooks() == ["on_stream_start", "on_stream_failure"]


def test_note_model_reports_changes_only() -> None:
    """The first model and a repeat are silent; a change emits on_model_switched."""
    rec = RecordingObserver()
    deps, session, run = make_deps(observers=[rec]), Conversation(), uuid.uuid4()
    note_model(deps, run, session, "m1")
    note_model(deps, run, session, "m1")
    note_model(deps, run, session, "m2")
    assert [(c.from_model, c.to_model) for c in rec.of("on_model_switched")] == [("m1", "m2")]
    assert session.last_model == "m2"


def test_repeated_ids_are_made_distinct_in_the_response() -> None:
    """Only repeats are renamed, the first keeps its id, a suffix avoids every id used."""
    from loopobs import ToolCallPart
    from loopobs.loop.model_call import distinct_call_ids

    calls = [ToolCallPart(id=i, name="t", arguments={}) for i in ("x", "x", "x_2", "y", "x")]
    assert [c.id for c in distinct_call_ids(calls)] == ["x", "x_3", "x_2", "y", "x_4"]
    unique = [ToolCallPart(id="a", name="t", arguments={})]
    assert distinct_call_ids(unique) == unique
