"""Streamed chunks' event-log lines, written directly, are byte for byte the general encoder's."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopobs.contract.events import EventContext, TextDeltaContext, ThinkingDeltaContext
from loopobs.exporters import jsonl
from loopobs.exporters.jsonl import decode_event, encode_event


def general(ctx: EventContext) -> str:
    """The line the adapter-based encoder writes for ``ctx``."""
    saved = dict(jsonl._FAST)
    jsonl._FAST.clear()
    try:
        return encode_event(ctx)
    finally:
        jsonl._FAST.update(saved)


def test_both_chunk_types_have_a_direct_encoder() -> None:
    assert set(jsonl._FAST) == {TextDeltaContext, ThinkingDeltaContext}


@pytest.mark.parametrize("cls", [TextDeltaContext, ThinkingDeltaContext])
@given(delta=st.text(), time_ns=st.integers(0, 2**63 - 1), turn=st.integers(0, 10**9),
       run_id=st.uuids())
def test_a_chunk_line_is_the_general_encoders_line(cls: Any, delta: str, time_ns: int,
                                                    turn: int, run_id: uuid.UUID) -> None:
    ctx = cls(run_id=run_id, time_ns=time_ns, turn=turn, delta=delta)
    line = encode_event(ctx)
    assert line == general(ctx)
    assert decode_event(line) == ctx


def test_every_ascii_character_is_escaped_as_the_general_encoder_does() -> None:
    ctx = TextDeltaContext(run_id=uuid.uuid4(), time_ns=1, turn=0,
                           delta="".join(map(chr, range(127))))  # DEL: see below
    assert jsonl._FAST[TextDeltaContext](ctx) == general(ctx)


def test_one_run_after_another_writes_each_runs_own_id() -> None:
    first, second = uuid.uuid4(), uuid.uuid4()
    for run_id in (first, second, first):
        line = encode_event(TextDeltaContext(run_id=run_id, time_ns=1, turn=0, delta="x"))
        assert f'"run_id":"{run_id}"' in line


@pytest.mark.parametrize("delta", ["caf\u00e9", "line\u2028break", "\x7f", "\ud800"])
def test_text_the_direct_encoder_leaves_to_the_general_path(delta: str) -> None:
    """Beyond ASCII (line breaks to escape, lone surrogates) and DEL, which only json escapes."""
    ctx = TextDeltaContext(run_id=uuid.uuid4(), time_ns=1, turn=0, delta=delta)
    assert jsonl._FAST[TextDeltaContext](ctx) is None
    assert encode_event(ctx) == general(ctx)


def test_a_changed_chunk_type_gets_no_direct_encoder() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class Wider(TextDeltaContext):
        index: int = 0

    assert jsonl._delta_encoder(Wider) is None


@pytest.mark.parametrize("field", ["time_ns", "turn"])
def test_a_number_that_is_not_an_int_takes_the_general_path(field: str) -> None:
    values: dict[str, Any] = {"time_ns": 1, "turn": 0, field: 1.5}
    ctx = TextDeltaContext(run_id=uuid.uuid4(), delta="x", **values)
    assert jsonl._FAST[TextDeltaContext](ctx) is None
    with pytest.warns(UserWarning, match="Expected `int`"):  # pydantic's, on the general path
        assert encode_event(ctx) == general(ctx)
