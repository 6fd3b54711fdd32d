"""Fuzzing resume inputs: a parked run's checkpoint as random and mutated JSON, and random
resume inputs. Bad checkpoints fail validation (pydantic ``ValidationError``, a
``ValueError``); bad inputs raise ``InvalidResumeInput`` (a ``LoopError``) and change
nothing, so the same checkpoint still resumes afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import json
from functools import cache
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from loopobs import AgentLoop, Checkpoint, InvalidResumeInput, RunStatus
from loopobs.llm import Reply, ScriptedClient, ToolCall
from loopobs.loop.parking import CLAIMS
from loopobs.testing import RecordingObserver, assert_contract
from tests._loop_parking_tools import SCHEMA, approve

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def _loop(rec: RecordingObserver | None = None) -> AgentLoop:
    client = ScriptedClient(
        lambda request: (
            Reply(text="done")
            if len(request.messages) > 2
            else Reply(tool_calls=(ToolCall("approve", {"amount": 5}, id="call_1"),))
        )
    )
    return AgentLoop(client, model="m1", tools=[approve], observers=[rec] if rec else [])


@cache
def parked() -> str:
    """A suspended run's checkpoint, as JSON."""
    result = asyncio.run(_loop().run("pay"))
    assert result.status is RunStatus.SUSPENDED
    assert result.checkpoint is not None
    return result.checkpoint.model_dump_json()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_checkpoint_json_fails_validation_only(data: st.DataObject) -> None:
    """Byte-mutated checkpoint JSON either loads or raises ValidationError, nothing else."""
    buf = bytearray(parked().encode())
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(buf) - 1))
        action = data.draw(st.integers(0, 2))
        if action == 0:
            buf[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == 1:
            buf[at:at] = data.draw(st.binary(min_size=1, max_size=6))
        else:
            del buf[at : at + data.draw(st.integers(1, 20))]
    with contextlib.suppress(ValidationError):
        Checkpoint.model_validate_json(bytes(buf))


@settings(max_examples=300)
@given(blob=st.binary(max_size=300))
def test_random_bytes_are_no_checkpoint(blob: bytes) -> None:
    """Arbitrary bytes never load as a checkpoint and raise only ValidationError."""
    with contextlib.suppress(ValidationError):
        Checkpoint.model_validate_json(blob)


@settings(max_examples=200)
@given(
    field=st.sampled_from(
        [
            "run_id",
            "session_id",
            "turn",
            "messages",
            "kind",
            "parked",
            "results",
            "input_schema",
            "wake_at",
            "trace_context",
            "version",
        ]
    ),
    value=json_values,
)
def test_checkpoint_with_a_field_replaced_validates_or_fails_cleanly(
    field: str, value: Any
) -> None:
    """Any JSON value in any checkpoint field: a checkpoint or a ValidationError."""
    doc = json.loads(parked())
    doc[field] = value
    with contextlib.suppress(ValidationError):
        Checkpoint.model_validate_json(json.dumps(doc))


@settings(max_examples=150, deadline=None)
@given(value=json_values)
def test_random_resume_inputs_are_validated_and_change_nothing(value: Any) -> None:
    """Random inputs: InvalidResumeInput without side effects, or a valid resume."""
    CLAIMS.reset()  # each example resumes the one cached checkpoint afresh
    checkpoint = Checkpoint.model_validate_json(parked())
    rec = RecordingObserver()
    loop = _loop(rec)
    valid = (
        isinstance(value, dict)
        and isinstance(value.get("approved"), bool)
        and set(value) <= {"approved", "note"}
        and isinstance(value.get("note", ""), str)
    )
    rejected: InvalidResumeInput | None = None
    try:
        result = asyncio.run(loop.resume(checkpoint, value))
    except InvalidResumeInput as err:
        rejected = err
    assert (rejected is None) == valid
    if rejected is not None:
        assert rejected.errors
        assert rec.events == []  # nothing ran
        # The checkpoint still resumes with a valid input.
        result = asyncio.run(loop.resume(checkpoint, {"approved": True}))
    assert result.ok
    assert_contract(rec.events)
    assert SCHEMA["required"] == ["approved"]
