"""The LoopError tree: hierarchy, the dict encoding, pickling and value equality."""

from __future__ import annotations

import copy
import datetime as dt
import json
import pickle
import re
from typing import Any

import pytest

import loopobs
from loopobs.contract import errors
from loopobs.contract.errors import (
    BudgetExceeded,
    BudgetUnavailable,
    Cancelled,
    CheckpointAlreadyResumed,
    ContextExceeded,
    FallbackExhausted,
    Interrupted,
    InvalidResumeInput,
    InvalidToolInput,
    LoopDetected,
    LoopError,
    MaxTurnsExceeded,
    McpError,
    ModelError,
    NotYetAwake,
    ProviderFailed,
    QueueFull,
    RateLimited,
    ResumeError,
    SessionBusy,
    SessionClosed,
    StoreUnavailable,
    StreamError,
    ToolError,
    ToolExecutionError,
    ToolNameClash,
    ToolNotFound,
    ToolTimeout,
    ToolWorkersExhausted,
)

WAKE = dt.datetime(2031, 2, 3, 4, 5, 6, 789, tzinfo=dt.timezone(dt.timedelta(hours=-5)))

# One instance per class, every structured field set away from its default.
SAMPLES: dict[type[LoopError], LoopError] = {
    LoopError: LoopError("generic"),
    ModelError: ModelError("bad gateway", retryable=True, status_code=502, provider="openai"),
    RateLimited: RateLimited("slow down", retry_after=1.5, status_code=529, provider="anthropic"),
    StreamError: StreamError("cut off", retryable=False, status_code=200, provider="openai"),
    FallbackExhausted: FallbackExhausted(
        models=["m1", "m2"],
        status_code=500,
        provider="p",
        failures=[
            RateLimited("slow down", retry_after=2.0, provider="p"),
            StreamError("cut off", status_code=200),
        ],
    ),
    ToolError: ToolError("nope", tool="t"),
    ToolNotFound: ToolNotFound(tool="serch", available=["search", "fetch"]),
    InvalidToolInput: InvalidToolInput(tool="search", errors=["q: required", "n: not an int"]),
    ToolExecutionError: ToolExecutionError("disk full", tool="write", error_type="OSError"),
    ToolTimeout: ToolTimeout(tool="slow", timeout_s=2.5),
    ToolWorkersExhausted: ToolWorkersExhausted(tool="slow", workers=4),
    CheckpointAlreadyResumed: CheckpointAlreadyResumed(run_id="6f1c2b7e"),
    ContextExceeded: ContextExceeded(used=130_000, limit=128_000),
    MaxTurnsExceeded: MaxTurnsExceeded(max_turns=12),
    LoopDetected: LoopDetected(pattern="search×5"),
    BudgetExceeded: BudgetExceeded(limit="usd", value=0.0123, budget=0.01, scope="session"),
    StoreUnavailable: StoreUnavailable(store="redis://127.0.0.1:6379/0", reason="ping timed out"),
    BudgetUnavailable: BudgetUnavailable(store="redis://127.0.0.1:6379/0", reason="down"),
    Cancelled: Cancelled("user hit ^C"),
    SessionBusy: SessionBusy(session_id="s-1"),
    ResumeError: ResumeError("run not parked"),
    InvalidResumeInput: InvalidResumeInput(errors=["ok: required"]),
    NotYetAwake: NotYetAwake(wake_at=WAKE),
    McpError: McpError("gone", tool="read", server="files", kind="protocol", code=-32602),
    ToolNameClash: ToolNameClash(tool="search"),
    ProviderFailed: ProviderFailed(context_provider="memory", error_type="timeout"),
    SessionClosed: SessionClosed("closed"),
    QueueFull: QueueFull(queue="inbox", capacity=4),
    Interrupted: Interrupted(),
}

# The tree drawn in the errors module docstring: class → parent.
PARENTS: dict[type[LoopError], type[Exception]] = {
    LoopError: Exception,
    ModelError: LoopError,
    RateLimited: ModelError,
    StreamError: ModelError,
    FallbackExhausted: ModelError,
    ToolError: LoopError,
    ToolNotFound: ToolError,
    InvalidToolInput: ToolError,
    ToolExecutionError: ToolError,
    ToolTimeout: ToolError,
    ContextExceeded: LoopError,
    MaxTurnsExceeded: LoopError,
    LoopDetected: LoopError,
    BudgetExceeded: LoopError,
    Cancelled: LoopError,
    SessionBusy: LoopError,
    ResumeError: LoopError,
    InvalidResumeInput: ResumeError,
    NotYetAwake: ResumeError,
    McpError: ToolError,
    ProviderFailed: LoopError,
    SessionClosed: LoopError,
    QueueFull: LoopError,
    Interrupted: LoopError,
}

ALL = list(SAMPLES.values())
IDS = [type(e).__name__ for e in ALL]


def _all_subclasses(cls: type[LoopError]) -> set[type[LoopError]]:
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _all_subclasses(sub)
    return out


def test_samples_cover_every_class_of_the_module() -> None:
    """Every LoopError class the module defines (and exports) has a sample here."""
    mine = {c for c in _all_subclasses(LoopError) if c.__module__ == errors.__name__}
    assert mine == set(SAMPLES) == {getattr(errors, n) for n in errors.__all__}
    assert {c.__name__ for c in mine} <= set(loopobs.__all__)


@pytest.mark.parametrize(("cls", "parent"), PARENTS.items(), ids=[c.__name__ for c in PARENTS])
def test_tree_matches_the_docstring(cls: type[LoopError], parent: type[Exception]) -> None:
    """Each class sits under the parent the module docstring draws, and the docstring names it."""
    assert cls.__bases__ == (parent,)
    assert cls.__name__ in (errors.__doc__ or "")


@pytest.mark.parametrize("err", ALL, ids=IDS)
def test_dict_round_trip(err: LoopError) -> None:
    """from_dict(to_dict(e)) == e; the encoding is plain JSON and names the class."""
    data = err.to_dict()
    assert data["type"] == type(err).__name__
    assert data["message"] == err.message == str(err)
    assert json.loads(json.dumps(data)) == data
    back = LoopError.from_dict(json.loads(json.dumps(data)))
    assert type(back) is type(err)
    assert back == err
    assert back.to_dict() == data
    for name in type(err)._fields:
        assert getattr(back, name) == getattr(err, name)


@pytest.mark.parametrize("err", ALL, ids=IDS)
def test_pickle_and_copy(err: LoopError) -> None:
    """Errors cross process boundaries (pickle) and copy with their fields intact."""
    for clone in (pickle.loads(pickle.dumps(err)), copy.copy(err), copy.deepcopy(err)):
        assert type(clone) is type(err)
        assert clone == err
        assert clone.to_dict() == err.to_dict()


@pytest.mark.parametrize("err", ALL, ids=IDS)
def test_equality_is_by_class_and_fields(err: LoopError) -> None:
    """Same class and fields: equal with equal hashes; other message or class: not equal."""
    twin = LoopError.from_dict(err.to_dict())
    assert twin == err
    assert hash(twin) == hash(err)
    other = LoopError.from_dict({**err.to_dict(), "message": err.message + "!"})
    assert other != err
    assert err != LoopError(err.message) or type(err) is LoopError
    assert err != err.message


def test_equality_sees_structured_fields() -> None:
    """Two errors that differ only in a structured field are different values."""
    assert ModelError("x", status_code=500) != ModelError("x", status_code=502)
    assert ToolTimeout("x", tool="a", timeout_s=1) != ToolTimeout("x", tool="a", timeout_s=2)
    assert RateLimited("x") != StreamError("x")


def test_retryable_defaults() -> None:
    """Rate limits and broken streams invite another try; a plain model error does not."""
    assert RateLimited().retryable is True
    assert RateLimited().status_code == 429
    assert StreamError().retryable is True
    assert ModelError().retryable is False
    assert FallbackExhausted().retryable is False
    assert LoopError().retryable is False


def test_default_messages_name_their_fields() -> None:
    """Errors built from fields alone still read well."""
    assert str(FallbackExhausted(models=("a", "b"))) == "all models failed: a, b"
    assert "serch" in str(ToolNotFound(tool="serch", available=["search"]))
    assert "(none)" in str(ToolNotFound(tool="x"))
    assert "q: required" in str(InvalidToolInput(tool="s", errors=["q: required"]))
    assert str(ToolTimeout(tool="slow", timeout_s=2.5)) == "tool 'slow' timed out after 2.5s"
    assert "130" in str(ContextExceeded(used=130, limit=100))
    assert "12" in str(MaxTurnsExceeded(max_turns=12))
    assert "s-1" in str(SessionBusy(session_id="s-1"))
    assert WAKE.isoformat() in str(NotYetAwake(wake_at=WAKE))
    assert str(Cancelled()) == "cancelled"


def test_sequences_are_stored_as_tuples_and_encoded_as_lists() -> None:
    """Sequence fields are immutable on the error and JSON lists in the encoding."""
    err = InvalidToolInput(tool="s", errors=["a", "b"])
    assert err.errors == ("a", "b")
    assert err.to_dict()["errors"] == ["a", "b"]


def test_not_yet_awake_accepts_iso_text_and_encodes_it() -> None:
    """wake_at travels as ISO 8601 with its offset and comes back as the same instant."""
    err = NotYetAwake(wake_at=WAKE.isoformat())
    assert err.wake_at == WAKE
    assert err.to_dict()["wake_at"] == WAKE.isoformat()


def test_repr_shows_class_message_and_fields() -> None:
    """repr names the class, the message and each structured field."""
    assert repr(ToolTimeout("late", tool="t", timeout_s=1.0)) == (
        "ToolTimeout('late', tool='t', timeout_s=1.0)"
    )


def test_errors_are_raisable_and_catchable_as_loop_error() -> None:
    """Every error is an Exception callers can catch as LoopError."""
    for err in ALL:
        with pytest.raises(LoopError):
            raise err


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"type": "NoSuchError", "message": "x"}, "unknown error type"),
        ({"message": "x"}, "unknown error type"),
        ({"type": "ToolError", "message": "x", "colour": "red"}, "no field"),
        ({"type": "ToolTimeout", "message": "", "timeout_s": "soon"}, "cannot rebuild"),
        ({"type": "NotYetAwake", "message": "x", "wake_at": "not a date"}, "cannot rebuild"),
        ({"type": "NotYetAwake", "message": "x"}, "cannot rebuild"),
        ({"type": "LoopError", "message": 5}, "message"),
        ({"type": "MaxTurnsExceeded", "message": "x", "max_turns": "many"}, "max_turns"),
        ({"type": "InvalidToolInput", "message": "x", "errors": "not a list"}, "errors"),
        ({"type": "ModelError", "message": "x", "retryable": "yes"}, "retryable"),
    ],
)
def test_from_dict_refuses_what_it_cannot_rebuild(data: dict[str, Any], match: str) -> None:
    """Unknown types, unknown fields and ill-typed values raise ValueError, never a bad object."""
    with pytest.raises(ValueError, match=match):
        LoopError.from_dict(data)


class QuotaError(LoopError):
    """A user's own error with a structured field."""

    _fields = ("quota",)

    def __init__(self, message: str = "", *, quota: int = 0) -> None:
        super().__init__(message or f"over quota {quota}")
        self.quota = quota


def test_user_subclasses_round_trip_under_their_qualified_name() -> None:
    """A subclass defined elsewhere encodes as module.QualName and rebuilds with its fields."""
    err = QuotaError(quota=3)
    data = err.to_dict()
    assert data == {"type": f"{__name__}.QuotaError", "message": "over quota 3", "quota": 3}
    assert LoopError.from_dict(data) == err
    assert pickle.loads(pickle.dumps(err)) == err


def test_user_subclass_cannot_shadow_a_builtin_name() -> None:
    """A user's class called ToolError leaves the built-in ToolError's decoding alone."""

    class ToolError(errors.ToolError):
        """Same class name as the built-in one."""

    mine = ToolError("y", tool="t")
    assert type(LoopError.from_dict(mine.to_dict())) is ToolError
    builtin = LoopError.from_dict({"type": "ToolError", "message": "x", "tool": "t"})
    assert type(builtin) is errors.ToolError


def test_fallback_exhausted_carries_every_attempts_error_through_its_encoding() -> None:
    """Each attempt's error, with its status and message, survives to_dict and from_dict."""
    err = FallbackExhausted(
        models=["m1", "m2"],
        failures=[
            RateLimited("429 from m1", retry_after=3.0, status_code=429, provider="openai"),
            StreamError("m2 cut off", provider="openai"),
        ],
    )
    data = err.to_dict()
    assert data["failures"] == [
        {
            "type": "RateLimited",
            "message": "429 from m1",
            "retryable": True,
            "status_code": 429,
            "provider": "openai",
            "retry_after": 3.0,
        },
        {
            "type": "StreamError",
            "message": "m2 cut off",
            "retryable": True,
            "status_code": None,
            "provider": "openai",
        },
    ]
    assert "m1: RateLimited" in str(err)
    back = LoopError.from_dict(data)
    assert back == err
    assert isinstance(back, FallbackExhausted)
    assert isinstance(back.failures[0], RateLimited)
    assert back.failures[0].status_code == 429


def test_the_module_docstring_draws_every_error() -> None:
    """The exception tree in ``loopobs.contract.errors``'s docstring names every class, each
    under its own base, so it cannot go stale."""
    doc = errors.__doc__ or ""
    tree = [
        line.strip("\n")[4:]
        for line in doc.splitlines()
        if re.match(r"^\s*(LoopError|[│ ]*[├└]── )", line)
    ]
    depth: dict[str, int] = {}
    parents: list[str] = []
    for line in tree:
        name = re.search(r"(\w+)", line.split("── ")[-1]).group(1)  # type: ignore[union-attr]
        level = 0 if "── " not in line else (line.index("── ") - 1) // 4 + 1
        depth[name] = level
        del parents[level:]
        if parents:
            cls = getattr(errors, name)
            assert parents[-1] in {b.__name__ for b in cls.__mro__[1:]}, (name, parents[-1])
        parents.append(name)
    assert set(depth) == set(errors.__all__)
