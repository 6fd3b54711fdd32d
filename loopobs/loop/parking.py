"""Parking a run on a tool's ``Suspend`` or ``Sleep``, and taking it up again.

When a call of the tool phase parks, :func:`park` emits ``on_suspended`` or
``on_sleep`` (for the first parking call) and builds the
:class:`~loopobs.loop.run.Checkpoint`: the conversation, the results of the
wave so far, the parked call and the other calls of the wave that parked too.

Resuming is checked before a run starts (:func:`check_resume`: valid input,
awake) and then planned (:func:`plan_resume`): a suspended call gets the
input as its result; a sleeping call, and every other parked call of the
wave, runs again.
"""

from __future__ import annotations

import datetime as _dt
import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from loopobs.contract.errors import InvalidResumeInput, NotYetAwake, schema_error_reasons
from loopobs.contract.events import RunStatus, SleepContext, SuspendedContext
from loopobs.contract.model import AssistantMessage, ToolResultMessage
from loopobs.contract.observer import ObserverSet
from loopobs.contract.tools import Suspend, render_result
from loopobs.contract.trace_links import TraceLinks
from loopobs.loop.run import Conversation
from loopobs.loop.runtime import now_ns
from loopobs.loop.tool_phase import ToolAttempt

if TYPE_CHECKING:
    from loopobs.loop.checkpoint import Checkpoint, ParkedCall

__all__ = [
    "CLAIMS",
    "Parked",
    "ResumeClaims",
    "ResumePlan",
    "check_resume",
    "checkpoint_problems",
    "park",
    "plan_resume",
    "resumed_session",
    "with_trace_context",
]


@dataclass(frozen=True, slots=True)
class Parked:
    """A run that parked: its final ``status`` (suspended or sleeping) and its checkpoint."""

    status: RunStatus
    checkpoint: Checkpoint


def park(
    observers: ObserverSet,
    run_id: uuid.UUID,
    session: Conversation,
    turn: int,
    model: str,
    outcomes: Sequence[ToolAttempt],
    wave_results: Sequence[ToolResultMessage | None] | None = None,
) -> Parked | None:
    """If a call of ``outcomes`` parked, emit the park event and return the checkpoint.

    ``model`` is recorded when the session has none yet. ``wave_results`` are
    the results of the whole parked wave when ``outcomes`` covers only part of
    it (calls re-run on resume). Returns None when no call parked.
    """
    parks = [o for o in outcomes if o.park is not None]
    if not parks:
        return None
    # Imported here: the checkpoint classes load pydantic, which only parking runs need.
    from loopobs.loop.checkpoint import Checkpoint, ParkedCall

    first = parks[0]
    assert first.call is not None
    assert first.park is not None
    parked = ParkedCall(
        id=first.call.id,
        name=first.call.name,
        arguments=dict(first.call.arguments),
        attempt=first.attempt,
    )
    rerun = [
        ParkedCall(
            id=o.call.id, name=o.call.name, arguments=dict(o.call.arguments), attempt=o.attempt
        )
        for o in parks[1:]
        if o.call is not None
    ]
    common: dict[str, Any] = {
        "run_id": run_id,
        "session_id": session.id,
        "turn": session.turn,
        "model": session.last_model or model,
        "messages": list(session.messages),
        "parked": parked,
        "rerun": rerun,
        "results": (
            list(wave_results) if wave_results is not None else [o.message for o in outcomes]
        ),
    }
    how = first.park
    if isinstance(how, Suspend):
        if observers.listens("on_suspended"):
            observers.on_suspended(
                SuspendedContext(
                    run_id=run_id,
                    time_ns=now_ns(),
                    turn=turn,
                    tool=parked.name,
                    tool_call_id=parked.id,
                    reason=how.reason,
                    input_schema=dict(how.input_schema),
                    kind=how.kind,
                )
            )
        return Parked(
            RunStatus.SUSPENDED,
            Checkpoint(
                kind="suspend",
                reason=how.reason,
                input_schema=dict(how.input_schema),
                suspension_kind=how.kind,
                **common,
            ),
        )
    if observers.listens("on_sleep"):
        observers.on_sleep(
            SleepContext(
                run_id=run_id,
                time_ns=now_ns(),
                turn=turn,
                tool=parked.name,
                tool_call_id=parked.id,
                wake_at=how.wake_at,
            )
        )
    return Parked(RunStatus.SLEEPING, Checkpoint(kind="sleep", wake_at=how.wake_at, **common))


def with_trace_context(checkpoint: Checkpoint, links: TraceLinks, run_id: uuid.UUID) -> Checkpoint:
    """``checkpoint`` carrying the W3C trace context of ``run_id``'s span, when it is traced."""
    carrier = links.carrier(run_id)
    if carrier is None:
        return checkpoint
    return checkpoint.model_copy(update={"trace_context": carrier})


def check_resume(checkpoint: Checkpoint, input: Any, now: _dt.datetime | None) -> None:
    """Check that ``checkpoint`` may resume now with ``input``; changes nothing.

    The checkpoint itself is checked first (it may have been edited where it was
    stored): its parked calls must belong to its last wave of tool calls, its
    results must fit that wave, a sleep needs an aware ``wake_at``, and a
    suspension's ``input_schema`` must be a usable JSON Schema whose ``$ref``-s
    stay inside it (nothing is ever fetched).

    Raises:
        InvalidResumeInput: the checkpoint is inconsistent, the input fails the
            recorded schema, or ``now`` is a naive datetime.
        NotYetAwake: a sleeping run's ``wake_at`` is after ``now`` (default: the wall clock).
    """
    problems = checkpoint_problems(checkpoint)
    if problems:
        raise InvalidResumeInput(
            f"the checkpoint cannot be resumed: {'; '.join(problems)}", errors=problems
        )
    if checkpoint.kind == "suspend":
        errors = _schema_errors(checkpoint.input_schema or {}, input)
        if errors:
            raise InvalidResumeInput(errors=errors)
        return
    assert checkpoint.wake_at is not None  # checked above
    if now is not None and now.utcoffset() is None:
        raise InvalidResumeInput(
            errors=[
                "now: a naive datetime cannot be compared with wake_at; pass an aware one, "
                "e.g. datetime.now(timezone.utc)"
            ]
        )
    current = now or _dt.datetime.now(_dt.timezone.utc)
    if current < checkpoint.wake_at:
        raise NotYetAwake(wake_at=checkpoint.wake_at)


def checkpoint_problems(checkpoint: Checkpoint) -> list[str]:
    """What makes ``checkpoint`` impossible to resume (empty when it is consistent)."""
    problems: list[str] = []
    wave = _wave_ids(checkpoint)
    if not wave:
        return ["messages: no tool calls for the parked call to belong to"]
    if len(checkpoint.results) != len(wave):
        problems.append(f"results: {len(checkpoint.results)} for a wave of {len(wave)} calls")
    known = set(wave)
    parked = [checkpoint.parked, *checkpoint.rerun]
    for where, call in zip(
        ["parked", *(f"rerun[{i}]" for i in range(len(checkpoint.rerun)))], parked, strict=True
    ):
        if call.id not in known:
            problems.append(f"{where}.id: not a call of the parked wave")
    if len({call.id for call in parked}) != len(parked):
        problems.append("rerun: a call is listed twice")
    if checkpoint.kind == "sleep":
        if checkpoint.wake_at is None:
            problems.append("wake_at: missing for a sleeping run")
        elif checkpoint.wake_at.utcoffset() is None:
            problems.append("wake_at: not timezone-aware")
    return problems


def _schema_errors(schema: dict[str, Any], value: Any) -> list[str]:
    """Why ``value`` fails ``schema``; a schema that cannot be used is itself the error."""
    # Imported here: only a resume with an input schema needs them, and they cost about
    # as much to import as the rest of the package.
    import jsonschema
    from referencing import Registry

    try:
        validator_cls = jsonschema.validators.validator_for(schema)
        validator_cls.check_schema(schema)
        # An empty registry resolves only references inside the schema and retrieves
        # nothing (jsonschema's own default may still fetch remote URLs).
        validator = validator_cls(schema, registry=Registry())
        # Paths and rules only: the input may be huge, or private.
        return schema_error_reasons(validator.iter_errors(value))
    except jsonschema.exceptions.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(schema)"
        return [f"input_schema: not a valid JSON Schema at {where}: {exc.message}"]
    except Exception as exc:  # an unresolvable $ref, a pattern re cannot compile, …
        return [f"input_schema: cannot be used ({type(exc).__name__})"]


def resumed_session(checkpoint: Checkpoint, session: Conversation | None) -> Conversation:
    """The session the resumed run continues: ``session``, or one rebuilt from the checkpoint.

    Raises:
        ValueError: ``session`` is not the parked run's session.
    """
    if session is None:
        session = Conversation(
            id=checkpoint.session_id, messages=list(checkpoint.messages), turn=checkpoint.turn
        )
        session.last_model = checkpoint.model
    elif session.id != checkpoint.session_id:
        raise ValueError("the session given is not the parked run's session")
    return session


@dataclass(slots=True)
class ResumePlan:
    """How to settle a parked wave: known results, and the calls that must run again."""

    results: list[ToolResultMessage | None]
    """The wave's results in the model's order; None where a call still has to run."""
    slots: dict[str, int]
    """Call id → index in :attr:`results`."""
    to_run: list[ParkedCall]


def plan_resume(checkpoint: Checkpoint, resume_input: Any) -> ResumePlan:
    """A suspended call gets ``resume_input`` as its result; parked calls run again."""
    results: list[ToolResultMessage | None] = list(checkpoint.results)
    slots = {cid: i for i, cid in enumerate(_wave_ids(checkpoint))}
    to_run = list(checkpoint.rerun)
    if checkpoint.kind == "suspend":
        results[slots[checkpoint.parked.id]] = ToolResultMessage(
            tool_call_id=checkpoint.parked.id,
            name=checkpoint.parked.name,
            content=render_result(resume_input),
        )
    else:
        to_run.insert(0, checkpoint.parked)
    return ResumePlan(results, slots, to_run)


def _wave_ids(checkpoint: Checkpoint) -> list[str]:
    for message in reversed(checkpoint.messages):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            return [c.id for c in message.tool_calls]
    return []


class ResumeClaims:
    """The parked runs (by run id) whose checkpoints this process has resumed.

    Bounded: past ``capacity`` claims the oldest are forgotten, so a checkpoint
    that old could resume again here; a claim hook backed by a store has no such
    limit. Thread-safe.
    """

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._claimed: OrderedDict[uuid.UUID, None] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, run_id: uuid.UUID) -> bool:
        """Claim ``run_id``'s checkpoint; False if it was claimed before."""
        with self._lock:
            if run_id in self._claimed:
                return False
            self._claimed[run_id] = None
            while len(self._claimed) > self.capacity:
                self._claimed.popitem(last=False)
            return True

    def release(self, run_id: uuid.UUID) -> None:
        """Give a claim back (the resume did not start)."""
        with self._lock:
            self._claimed.pop(run_id, None)

    def reset(self) -> None:
        """Forget every claim (for tests)."""
        with self._lock:
            self._claimed.clear()


CLAIMS = ResumeClaims()
"""The process's claims: every AgentLoop of the process checks here."""
