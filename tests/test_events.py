"""The event contract: one frozen, slotted, keyword-only context class per hook."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import typing
import uuid

import pytest

from loopobs import (
    CONTEXT_TYPES,
    HOOKS,
    DisplayHint,
    EventContext,
    HookName,
    LoopObserver,
    ObserverSet,
    Usage,
)
from loopobs.testing import RecordingObserver
from tests.conftest import SAMPLE_FIELDS, MakeContext

# design.md's table: the fields each context must carry.
DESIGN_FIELDS: dict[str, set[str]] = {
    "on_run_start": {"session_id", "agent", "model", "resumed_from"},
    "on_run_end": {
        "success",
        "error",
        "total_turns",
        "duration_ms",
        "status",
        "input_tokens",
        "output_tokens",
        "cost_usd",
    },
    "on_turn_start": {"turn", "query"},
    "on_turn_end": {
        "turn",
        "success",
        "error",
        "duration_ms",
        "input_tokens",
        "output_tokens",
        "cost_usd",
    },
    "on_stream_start": {"turn", "model", "provider", "attempt"},
    "on_stream_success": {
        "turn",
        "model",
        "input_tokens",
        "output_tokens",
        "provider",
        "attempt",
        "duration_ms",
        "time_to_first_token_ms",
        "finish_reason",
        "response_id",
        "cache_read_input_tokens",
        "reasoning_output_tokens",
        "cost_usd",
    },
    "on_stream_failure": {"turn", "model", "error", "provider", "attempt", "duration_ms"},
    "on_response": {"turn", "text", "usage"},
    "on_text_delta": {"turn", "delta"},
    "on_thinking_delta": {"turn", "delta"},
    "on_tool_call_received": {"turn", "tool", "tool_call_id", "input"},
    "on_tool_pre": {"turn", "tool", "tool_call_id", "attempt"},
    "on_tool_post": {
        "tool_call_id",
        "turn",
        "tool",
        "result_hash",
        "is_error",
        "duration_ms",
        "display_hint",
        "attempt",
        "outcome",
    },
    "on_compaction": {
        "tokens_before",
        "tokens_after",
        "tokens_saved",
        "messages_removed",
        "reason",
    },
    "on_fallback": {"from_model", "to_model", "turn"},
    "on_model_switched": {"from_model", "to_model"},
    "on_loop_detected": {"pattern", "repetitions", "tool", "action"},
    "on_convergence_detected": {"action", "similarity", "consecutive"},
    "on_suspended": {"turn", "tool", "tool_call_id", "reason", "input_schema", "kind"},
    "on_sleep": {"turn", "tool", "tool_call_id", "wake_at"},
    # context providers, session queues and resets
    "on_context_provider": {"turn", "provider", "outcome", "duration_ms", "chars", "error", "text"},
    "on_backpressure": {"queue", "outcome", "capacity", "policy"},
    "on_session_reset": {"epoch", "discarded"},
    "on_budget_exceeded": {"limit", "value", "budget", "scope", "action"},
    "on_budget_unpriced": {"model", "provider", "scope", "budget"},
    "on_shared_budget": {
        "operation",
        "outcome",
        "store",
        "duration_ms",
        "reserved_usd",
        "committed_usd",
        "expired",
        "scope_key",
    },
}


def _field_names(cls: type[EventContext]) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_hooks_match_the_design_table_in_order() -> None:
    """HOOKS, the HookName literal and CONTEXT_TYPES agree, in design.md's order (26 hooks)."""
    assert list(HOOKS) == list(DESIGN_FIELDS)
    assert typing.get_args(HookName) == HOOKS
    assert tuple(CONTEXT_TYPES) == HOOKS
    assert len(set(CONTEXT_TYPES.values())) == 26


@pytest.mark.parametrize("hook", HOOKS)
def test_context_class_carries_its_hook_and_the_design_fields(hook: HookName) -> None:
    """Each context names its hook and has run_id, time_ns and every design.md field."""
    cls = CONTEXT_TYPES[hook]
    assert cls.hook == hook
    assert issubclass(cls, EventContext)
    assert {"run_id", "time_ns"} | DESIGN_FIELDS[hook] <= _field_names(cls)
    hints = typing.get_type_hints(cls)
    assert hints["run_id"] is uuid.UUID
    assert hints["time_ns"] is int


@pytest.mark.parametrize("hook", HOOKS)
def test_sample_sets_every_field(hook: HookName) -> None:
    """The shared samples cover every field, so round-trip tests exercise all of them."""
    assert set(SAMPLE_FIELDS[hook]) | {"run_id", "time_ns"} == _field_names(CONTEXT_TYPES[hook])


@pytest.mark.parametrize("hook", HOOKS)
def test_context_is_frozen_slotted_keyword_only(hook: HookName, make_context: MakeContext) -> None:
    """Contexts cannot be changed, carry no __dict__ and refuse positional arguments."""
    cls = CONTEXT_TYPES[hook]
    ctx: EventContext = make_context(hook)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.time_ns = 5  # type: ignore[misc]
    assert not hasattr(ctx, "__dict__")
    assert "__slots__" in cls.__dict__
    with pytest.raises(TypeError):
        cls(uuid.uuid4(), 1)  # type: ignore[call-arg]
    assert all(f.kw_only for f in dataclasses.fields(cls))


@pytest.mark.parametrize("hook", HOOKS)
def test_context_equality_copy_and_pickle(hook: HookName, make_context: MakeContext) -> None:
    """Contexts compare by value, and survive copy and pickle unchanged."""
    ctx = make_context(hook)
    assert ctx == make_context(hook)
    assert ctx != make_context(hook, time_ns=2)
    assert ctx != make_context(hook, run_id=uuid.uuid4())
    assert copy.deepcopy(ctx) == ctx
    assert pickle.loads(pickle.dumps(ctx)) == ctx


def test_usage_totals_and_addition() -> None:
    """Usage adds field by field; total is input plus output (cached/reasoning already inside)."""
    a = Usage(
        input_tokens=10,
        output_tokens=5,
        cache_read_input_tokens=4,
        cache_write_input_tokens=3,
        reasoning_output_tokens=2,
    )
    b = Usage(
        input_tokens=1,
        output_tokens=2,
        cache_read_input_tokens=3,
        cache_write_input_tokens=4,
        reasoning_output_tokens=5,
    )
    assert a + b == Usage(
        input_tokens=11,
        output_tokens=7,
        cache_read_input_tokens=7,
        cache_write_input_tokens=7,
        reasoning_output_tokens=7,
    )
    assert a.total_tokens == 15
    assert Usage().total_tokens == 0


@pytest.mark.parametrize(
    ("hint", "kind", "language"),
    [
        (DisplayHint.text(), "text", None),
        (DisplayHint.diff(), "diff", None),
        (DisplayHint.json(), "json", None),
        (DisplayHint.code("rust"), "code", "rust"),
        (DisplayHint.suppress(), "suppress", None),
        (DisplayHint.markdown(), "markdown", None),
        (DisplayHint(), "text", None),
    ],
)
def test_display_hint_variants(hint: DisplayHint, kind: str, language: str | None) -> None:
    """Every seed variant has a constructor; only code carries a language."""
    assert (hint.type, hint.language) == (kind, language)


@pytest.mark.parametrize(("kind", "language"), [("code", None), ("text", "python")])
def test_display_hint_language_only_for_code(kind: typing.Any, language: str | None) -> None:
    """A language without code, or code without a language, is refused."""
    with pytest.raises(ValueError, match="language"):
        DisplayHint(type=kind, language=language)


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_has_a_documented_no_op_and_a_fan_out(hook: HookName) -> None:
    """LoopObserver documents each hook; ObserverSet and RecordingObserver implement each."""
    base = getattr(LoopObserver, hook)
    assert base.__doc__
    assert LoopObserver().__getattribute__(hook)(None) is None  # a no-op
    assert getattr(ObserverSet, hook) is not base
    assert getattr(RecordingObserver, hook) is not base


def test_context_repr_names_class_and_fields(make_context: MakeContext) -> None:
    """The dataclass repr is readable in assertion failures and logs."""
    text = repr(make_context("on_tool_pre"))
    assert text.startswith("ToolPreContext(")
    assert "tool='weather'" in text
