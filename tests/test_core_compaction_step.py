"""compact_if_needed: the compaction step before a model call."""

from __future__ import annotations

import uuid

import pytest

from loopobs import AssistantMessage, ContextExceeded, Conversation, Message, UserMessage
from loopobs.contract.compaction import estimate_tokens
from loopobs.loop.compaction import compact_if_needed, estimate_request
from loopobs.testing import RecordingObserver
from tests._core_deps import make_deps


def long_session(messages: int = 20) -> Conversation:
    history: list[Message] = [UserMessage(content="start")]
    for i in range(messages):
        history.append(AssistantMessage(content=f"answer {i} " + "x" * 400))
        history.append(UserMessage(content=f"question {i} " + "y" * 400))
    return Conversation(messages=history)


def test_without_a_window_or_a_request_nothing_happens() -> None:
    """No context window and no detector request: the session is left alone."""
    rec = RecordingObserver()
    session = long_session()
    before = list(session.messages)
    compact_if_needed(make_deps(observers=[rec]), uuid.uuid4(), session)
    assert session.messages == before
    assert rec.hooks() == []


def test_reaching_the_threshold_compacts_and_reports() -> None:
    """At the threshold the oldest messages go and on_compaction says how much."""
    rec = RecordingObserver()
    session = long_session()
    size = estimate_request(session)
    deps = make_deps(observers=[rec], context_window=size + 100, compaction_threshold=0.5)
    compact_if_needed(deps, uuid.uuid4(), session)
    event = rec.of("on_compaction")[0]
    assert event.reason == "threshold"
    assert event.tokens_before == size
    assert event.tokens_after == estimate_tokens(session.messages)
    assert event.tokens_after < event.tokens_before
    assert event.messages_removed == 41 - len(session.messages)


def test_a_detector_request_compacts_once_by_half() -> None:
    """compact_requested compacts toward half the size, even without a window, and is cleared."""
    rec = RecordingObserver()
    session = long_session()
    session.compact_requested = True
    compact_if_needed(make_deps(observers=[rec]), uuid.uuid4(), session)
    event = rec.of("on_compaction")[0]
    assert event.reason == "detector"
    assert event.tokens_after <= event.tokens_before // 2 + 200
    assert not session.compact_requested


def test_the_providers_count_is_the_base_of_the_estimate() -> None:
    """After a call the estimate is the provider's count plus the messages added since."""
    session = long_session(2)
    session.last_input_tokens = 10_000
    session.messages_at_last_usage = len(session.messages) - 1
    assert estimate_request(session) == 10_000 + estimate_tokens(session.messages[-1:])


def test_a_conversation_that_cannot_fit_fails_the_run() -> None:
    """Still over the window after compaction: ContextExceeded."""
    session = Conversation(messages=[UserMessage(content="z" * 4000)])
    with pytest.raises(ContextExceeded):
        compact_if_needed(make_deps(context_window=100), uuid.uuid4(), session)
