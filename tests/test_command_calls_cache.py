"""The process-wide memory of command calls (``repetition._COMMAND_CALLS``): a call found
there is keyed, judged and labelled exactly as the same call made anew."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loopobs.contract.events import ToolCallReceivedContext
from loopobs.detectors import RepetitionDetector, clear_caches, repetition
from tests._real_trajectories import needs_real_trajectories, real_calls

_RUN = uuid.uuid4()


def _pending(detector: RepetitionDetector, tool: str, args: Mapping[str, Any]) -> Any:
    """What ``detector``'s received hook holds for one call of ``tool`` (``args`` as they
    are if they are not a dict, else a copy)."""
    given = dict(args) if isinstance(args, dict) else args
    detector.on_tool_call_received(
        ToolCallReceivedContext(
            run_id=_RUN, time_ns=0, turn=0, tool=tool, tool_call_id="c", input=given
        )
    )
    return detector._pending[_RUN.int].pop("c")


def _anew(tool: str, args: Mapping[str, Any]) -> Any:
    clear_caches()
    return _pending(RepetitionDetector(), tool, args)


def _check(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """Each call, held after all of them went through once, is what it is made anew."""
    expected = [_anew(tool, args) for tool, args in calls]
    clear_caches()
    warm = RepetitionDetector()
    for tool, args in calls:
        _pending(warm, tool, args)
    assert repetition._COMMAND_CALLS, "nothing was remembered: the test checks no hit"
    for (tool, args), want in zip(calls, expected, strict=True):
        assert _pending(RepetitionDetector(), tool, args) == want, (tool, args)


def test_calls_that_differ_only_in_other_arguments_are_held_apart() -> None:
    """The same line with another program, directory, value type or argument order, and
    lines beside long or non-string arguments (never held), each keep their own identity."""
    line = "cd /testbed && python -m pytest -q tests/test_app.py"
    calls: list[tuple[str, Mapping[str, Any]]] = [
        ("bash", {"command": line}),
        ("bash", {"command": line, "program": "bash"}),
        ("bash", {"command": line, "program": "sh"}),
        ("bash", {"program": "bash", "command": line}),
        ("bash", {"command": line, "cwd": "bash"}),
        ("bash", {"command": line, "cwd": "/w", "program": "bash"}),
        ("bash", {"command": line, "program": "bash", "cwd": "/w"}),
        ("bash", {"command": line, "timeout": 1}),
        ("bash", {"command": line, "timeout": "1"}),
        ("bash", {"command": line, "note": "x" * 300}),
        ("execute_bash", {"command": "sed -i 's/a/b/' src/app.py", "is_input": "false"}),
        ("python", {"command": "print(1)", "program": "python"}),
        ("python", {"code": "open('f', 'w').write('x')"}),
        ("str_replace_editor", {"command": "view", "path": "/a.py"}),
        ("bash", {"command": "echo 'unclosed", "program": "bash"}),
        ("bash", {"command": "x" * 3000, "program": "bash"}),
        # Not a dict: call_effect judges no command, held or not.
        ("bash", MappingProxyType({"command": line, "program": "bash"})),
    ]
    _check(calls + calls[::-1])


def test_narration_and_budgets_are_held_as_the_line() -> None:
    """A line described anew each call, or re-run with another timeout, is found again
    without being parsed again, and keyed as it is made anew (the held key leaves out what
    the identity leaves out; a name in another case is held apart, and keyed the same)."""
    line = "python -m pytest -q tests/test_app.py"
    calls: list[tuple[str, Mapping[str, Any]]] = [
        ("Bash", {"command": line}),
        ("Bash", {"command": line, "description": "Run the tests"}),
        ("Bash", {"command": line, "description": "Run them again"}),
        ("Bash", {"command": line, "Description": "Once more"}),
        ("execute_bash", {"command": line, "timeout": 30}),
        ("execute_bash", {"command": line, "timeout": 60, "security_risk": "LOW"}),
        ("run_shell_command", {"command": line, "description": "x", "directory": "/w"}),
        ("run_shell_command", {"command": line, "description": "y", "directory": "/w"}),
    ]
    _check(calls)
    clear_caches()
    detector = RepetitionDetector()
    for i in range(5):
        _pending(detector, "Bash", {"command": line, "description": f"attempt {i}"})
        _pending(detector, "execute_bash", {"command": line, "timeout": 30 * (i + 1)})
    # One entry, the line's own: each call after the first found it (no parse again).
    assert list(repetition._COMMAND_CALLS) == [("command", line)]


_WORDS = st.sampled_from(["ls", "cat a.py", "rm -f x", "sed -i s/a/b/ f", "pytest", "'", "> f"])
_VALUES = st.one_of(st.sampled_from(["bash", "sh", "/w", "1"]), st.integers(0, 2), st.none())


@given(
    st.sampled_from(["bash", "python", "terminal", "run"]),
    st.lists(_WORDS, min_size=1, max_size=3).map(" && ".join),
    st.dictionaries(st.sampled_from(["program", "cwd", "timeout", "command2"]), _VALUES),
)
def test_any_command_call_held_equals_it_made_anew(
    tool: str, line: str, others: dict[str, Any]
) -> None:
    calls = [(tool, {"command": line, **others}), (tool, {**others, "command": line})]
    expected = [_anew(t, a) for t, a in calls]
    clear_caches()
    for (t, a), want in zip(calls * 2, expected * 2, strict=True):
        assert _pending(RepetitionDetector(), t, a) == want


@needs_real_trajectories
def test_every_real_call_held_equals_it_made_anew() -> None:
    calls = [(op["tool"], dict(op.get("args") or {})) for op in real_calls()]
    _check(calls)
