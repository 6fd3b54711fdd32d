"""RepetitionDetector: runaway tool loops, told apart from polling and re-reads between writes."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Mapping
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Final, NamedTuple
from uuid import UUID

from mypy_extensions import mypyc_attr

from loopobs.contract.events import (
    CompactionContext,
    LoopAction,
    LoopDetectedContext,
    StreamFailureContext,
    StreamSuccessContext,
    ToolAnnotations,
    ToolCallReceivedContext,
    ToolPostContext,
)
from loopobs.contract.hashing import (
    arguments_hash,
    canonical_json,
    result_hash,
    stable_hash64,
    text_key,
)
from loopobs.detectors._session import DEFAULT_MAX_SESSIONS, SessionDetector, SnapshotRejected
from loopobs.detectors.commands import (
    CommandEffect,
    ToolRole,
    call_effect,
    command_line_effect,
    failed_output,
    role_by_arguments,
    tool_role,
)
from loopobs.detectors.normalise import CALL_NARRATION, Normaliser

__all__ = [
    "NARRATION_ARGUMENTS",
    "RUN_BUDGET_ARGUMENTS",
    "RepetitionDetector",
    "clear_call_effects",
]

_MAX_PENDING_CALLS: Final = 1024
"""Tool calls per run awaiting their ``on_tool_post``; older ones are forgotten."""

_LABEL_CHARS: Final = 60
_MAX_IDS: Final = 8
_ID_SCAN: Final = 64
_MAX_CANDIDATES: Final = 4
_LONG_CYCLE_STEPS: Final = 6
_PATTERN_STEPS: Final = 6
_SHORT_CYCLE: Final = 4
_THIRD_PASS_STEPS: Final = 2
"""Steps of a short cycle's third pass that stop it (a 2-step cycle: the whole pass)."""

_NONE: Final = 0
_WARN: Final = 1
_STOP: Final = 2
_ACTIONS: Final[dict[int, LoopAction]] = {_WARN: "warn", _STOP: "stop"}

_OpKey = tuple[str, int | None, int | None]  # tool, normalised arguments hash, result hash
_CallKey = tuple[str, int | None]
_CallResult = tuple[int | None, int, int | None]  # result key, generation, raw result hash
# (side_effecting, read_only, waits, inert: a thinking tool, never new work)
_Kind = tuple[bool, bool, bool, bool]


class _Finding(NamedTuple):
    """What a signal found: the fields of the ``LoopDetectedContext`` it becomes."""

    signal: str
    pattern: str
    repetitions: int
    tool: str | None
    level: int
    """``_WARN`` or ``_STOP``."""
    call_ids: list[str]
    reason: str


class _Pending(NamedTuple):
    """A received call awaiting its result: what the post needs of it."""

    tool: str
    ahash: int | None
    args: Mapping[str, Any]
    kind: _Kind
    applied: frozenset[str]
    page: str | None
    canonical: str
    parsed: bool
    """The effect was read from the command (or editor command): its output tells failure."""
    target: int | None
    """What a parsed write acts on (its identity as progress), else ``None``."""


class _Tool(NamedTuple):
    """What a tool's name (and the detector's settings) say of its calls: looked up once
    per call, in one dict, rather than kind, declared command argument and role apart."""

    kind: _Kind
    """From ``annotations`` or the name; an event's own annotations override it."""
    command_arg: str | None
    """The argument holding its command line, when declared in ``command_tools``."""
    role: ToolRole | None
    """Its command, code or editor role by name (``infer_commands``), else ``None``."""


_new_tuple: Final[Any] = tuple.__new__
"""A named tuple made of a tuple of all its fields, in order: without the keyword-taking
``__new__`` of :class:`_Pending` (a Python call, once per tool call)."""


_EFFECT_KINDS: Final[dict[tuple[str, bool], _Kind]] = {
    (effect, waits): (effect == "write", effect == "read", waits, False)
    for effect in ("read", "run", "write")
    for waits in (False, True)
}
"""A parsed call's kind by its effect and whether its tool waits: one tuple each, not
one per call."""

_UNKNOWN_CALL_ARGS: Final[Mapping[str, Any]] = {}
_NO_RULES: Final[frozenset[str]] = frozenset()
_EFFECT_CACHE_CHARS: Final = 2048
"""Command lines (up to this long) whose calls are remembered (:data:`_COMMAND_CALLS`)."""
_EAGER_RESULT_CHARS: Final = 512
"""Results up to this long are always normalised; a longer one only when its call was seen
before (masking costs about 16 ns a character, and only a repeat needs it)."""
_OTHER_ARGS_HELD: Final = 1024
_OTHER_ARGS_CHARS: Final = 256
_OTHER_ARGS_ITEMS: Final = 8
"""A command call's other arguments are remembered (process-wide, 1,024 sets) when there
are at most 8 of them and each is a string up to 256 characters long."""
_TOOLS_HELD: Final = 4096
"""Tool names whose kind and role are remembered per detector."""
_FAILURES_HELD: Final = 256
"""Writes' outputs (by raw hash) whose failure or success is remembered per detector."""
_NEW_CONTENT: Final = frozenset(
    {
        "new_str",
        "new_string",
        "file_text",
        "content",
        "new_content",
        "replacement",
        "replacement_text",
    }
)
"""Arguments of an editor call that hold the text it would write."""
_SAME_ARGS: Final = 16
"""Arguments remembered per same-result streak, to tell a recurring call from new ones."""


_STREAK_FIELDS: Final = (
    "count",
    "epoch",
    "first_ns",
    "first_pos",
    "gen",
    "last_gap",
    "last_ns",
    "last_pos",
    "level",
    "level_pos",
    "novel_mark",
    "paced",
    "polls",
    "start_epoch",
    "wait_mark",
)
"""An :class:`_OpStat`'s fields (its slots), in a snapshot's order; read from here, since a
compiled class has no ``__slots__`` to read."""


class _OpStat:
    """One operation's current streak: how often, how paced, what was reported."""

    __slots__ = _STREAK_FIELDS
    count: int
    epoch: int
    first_ns: int
    first_pos: int
    gen: int
    last_gap: int
    last_ns: int
    last_pos: int
    level: int
    level_pos: int
    novel_mark: int
    paced: bool
    polls: int
    start_epoch: int
    wait_mark: int

    @classmethod
    def first(cls, time_ns: int, pos: int, epoch: int, gen: int, wait: int, novel: int) -> _OpStat:
        """A streak of one, begun at step ``pos`` and last seen there, marked with the
        session's counters then (a snapshot's restored streaks set every field instead)."""
        st = cls()
        st.count, st.polls, st.level, st.last_gap, st.paced = 1, 0, _NONE, 0, False
        st.first_ns = st.last_ns = time_ns
        st.first_pos = st.last_pos = pos
        st.start_epoch = st.epoch = epoch
        st.gen, st.wait_mark, st.novel_mark, st.level_pos = gen, wait, novel, 0
        return st

    def start(self, first_ns: int, first_pos: int, start_epoch: int) -> None:
        """Begin the streak again at ``first_pos``: nothing counted, paced or reported."""
        self.count, self.polls, self.level, self.last_gap, self.paced = 1, 0, _NONE, 0, False
        self.first_ns, self.first_pos, self.start_epoch = first_ns, first_pos, start_epoch


class _SameStat:
    """One (tool, result) pair: how many different arguments gave it, and how often one of
    them came back."""

    __slots__ = (
        "args",
        "changed",
        "distinct",
        "epoch",
        "first",
        "first_pos",
        "last_pos",
        "level",
        "recurred",
        "seen",
    )

    def __init__(
        self, args: int | None = None, epoch: int = 0, pos: int = 0, first: str = ""
    ) -> None:
        self.start(args, epoch, pos, first)

    def start(self, args: int | None, epoch: int, pos: int, first: str) -> None:
        """Begin a streak of one call (``args``, ``first`` its canonical text) at ``pos``."""
        self.args = args
        self.first = first  # the first arguments' canonical text, keyed once a second comes
        self.distinct, self.epoch, self.first_pos, self.last_pos = 1, epoch, pos, pos
        self.level = self.recurred = 0
        self.changed = False  # the arguments differed at least once
        # The loose keys of the streak's arguments: made when a second kind comes (most
        # results are seen once, and a set is one more object for the collector to track).
        self.seen: set[int | None] | None = None


_FirstOp = tuple[int, int, int, int, int, int]
"""An operation seen once: :meth:`_OpStat.first`'s arguments (the step's time, position,
epoch, call generation, wait total and novelty count)."""

_Others = tuple[str, int]
"""A command call's other arguments: their canonical JSON and its ``text_key``."""

_FirstSame = tuple[int | None, int, int, str]
"""A result seen once: its call's arguments key, the epoch, the position and the arguments'
canonical text (what :class:`_SameStat` is made of when the result comes again)."""


class _Repetitions:
    """One session's bounded memory: operation streaks, calls, same results, a ring for cycles."""

    __slots__ = (
        "calls",
        "cands",
        "cycle_level",
        "cycle_period",
        "cycle_start",
        "epoch",
        "floor",
        "last_end",
        "model_ns",
        "novel",
        "ops",
        "pos",
        "ring",
        "ring_calls",
        "run",
        "run_pos",
        "same",
        "wait_ns",
        "wait_pos",
        "written",
    )

    def __init__(self, ring: int) -> None:
        self.pos = self.epoch = self.floor = self.wait_ns = self.novel = self.wait_pos = 0
        self.last_end = 0
        # The time the session's model calls took: the session's clock runs without it, so
        # a slow model's thinking between two calls is no wait between them.
        self.model_ns = 0
        self.run = self.run_pos = 0  # the current run, and the position it began at
        # A streak object is made when an operation comes again; until then it is the
        # plain tuple _OpStat.first is made of (most operations happen once: a tuple costs
        # a fraction of a streak to make, and the garbage collector soon stops tracking it).
        self.ops: OrderedDict[_OpKey, _OpStat | _FirstOp] = OrderedDict()
        # call → (latest result key, generation, raw hash); the generation moves when the
        # result changes (a new tuple in the same place: the garbage collector soon stops
        # tracking a tuple of numbers, and a peek without the lock reads one whole).
        self.calls: OrderedDict[_CallKey, _CallResult] = OrderedDict()
        # (tool, result key) → its streak; a result seen once holds its call's _FirstSame
        # (most results are seen once: a plain tuple costs a fraction of a streak to make,
        # and the garbage collector soon stops tracking it).
        self.same: OrderedDict[tuple[str, int], _SameStat | _FirstSame] = OrderedDict()
        self.written: OrderedDict[_CallKey, None] = OrderedDict()
        self.ring: list[_OpKey | None] = [None] * ring
        self.ring_calls: list[tuple[str, Mapping[str, Any], str] | None] = [None] * ring
        self.cands: dict[int, int] = {}  # candidate period → steps equal to the one p back
        self.cycle_period = self.cycle_start = 0
        self.cycle_level = _NONE

    def progress(self) -> None:
        """Start a new epoch: read counts and cycle evidence before this point stop counting."""
        self.epoch += 1
        self.floor = self.pos
        self.cands = {}
        self.cycle_period = 0
        self.cycle_level = _NONE


_SIDE_VERBS: Final = frozenset(
    [
        "write",
        "edit",
        "create",
        "delete",
        "remove",
        "rm",
        "mv",
        "move",
        "rename",
        "commit",
        "push",
        "apply",
        "patch",
        "update",
        "insert",
        "upsert",
        "put",
        "post",
        "send",
        "set",
        "add",
        "install",
        "deploy",
        "save",
        "append",
        "replace",
        "merge",
        "submit",
        "upload",
        "drop",
        "truncate",
        "mkdir",
        "touch",
        "kill",
        "restart",
        "publish",
    ]
)
_READ_VERBS: Final = frozenset(
    [
        "read",
        "glob",
        "get",
        "list",
        "ls",
        "search",
        "find",
        "grep",
        "fetch",
        "query",
        "lookup",
        "show",
        "view",
        "cat",
        "status",
        "describe",
        "inspect",
        "head",
        "tail",
        "stat",
        "diff",
        "log",
        "count",
        "check",
        "browse",
        "open",
        "test",
        "tests",
        "lint",
        "typecheck",
        "validate",
        "verify",
    ]
)
_WAIT_VERBS: Final = frozenset({"sleep", "wait"})
# Tools where the model thinks aloud: a different thought between two repeats is no new work.
_THINK_WORDS: Final = frozenset(
    {"think", "thought", "thoughts", "reflect", "reflection", "scratchpad"}
)
# Words of a tool name: snake_case, kebab-case and camelCase alike.
_NAME_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")

_NAMES_HELD: Final = 4096


@lru_cache(maxsize=_NAMES_HELD)
def _name_words(tool: str) -> frozenset[str]:
    """The lower-cased words of a tool's name (remembered process-wide: names are few)."""
    return frozenset(w.lower() for w in _NAME_PARTS.findall(tool))


_Identity = tuple[CommandEffect | None, int | None, frozenset[str], str | None, str, int | None]
"""What the received hook makes of a call's arguments: the effect its command says (``None``:
not parsed), its arguments key, the normalising rules applied, a masked page number, the
canonical text and a write's target key."""

_COMMAND_CALLS_HELD: Final = 1024
_COMMAND_CALLS: Final[dict[tuple[Any, ...], _Identity]] = {}
"""(role, command line, the call's other arguments as items …) → the :data:`_Identity` of a
command call whose line was parsed, process-wide: it depends on the line and those
arguments alone, not on a detector's settings, and runs share their calls (``ls``,
``git diff``, a re-run test). Held for lines up to 2 KB beside short string arguments."""


NARRATION_ARGUMENTS: Final = CALL_NARRATION | {
    "description",
    "reason",
    "purpose",
    "intent",
    "thought",
    "thoughts",
    "security_risk",
}
"""Names of a command call's arguments that say why the model runs the line, not what runs
(Claude Code's and Gemini CLI's ``description``, Cursor's ``explanation``, OpenHands'
``security_risk``): left out of the call's identity (compared case-folded), so that the same
line re-run with other words about it is the same call. Wider than the normaliser's
:data:`~loopobs.detectors.normalise.CALL_NARRATION`, which every tool's arguments lose: of a
command, a ``description`` is never what runs; of another tool (``create_issue``) it may be."""

RUN_BUDGET_ARGUMENTS: Final = frozenset(
    {
        "timeout",
        "timeout_s",
        "timeout_ms",
        "timeout_sec",
        "timeout_secs",
        "timeout_seconds",
        "yield_time_ms",
        "max_output_tokens",
    }
)
"""Names of a command call's arguments that bound the run rather than say what runs
(OpenHands' ``timeout``, Codex's ``timeout_ms``, ``yield_time_ms`` and ``max_output_tokens``):
left out of the call's identity like :data:`NARRATION_ARGUMENTS`, so that a line re-run
with a longer timeout (an agent's usual answer to a hang) is the same call."""

_NOT_THE_COMMAND: Final = NARRATION_ARGUMENTS | RUN_BUDGET_ARGUMENTS

_OTHER_ARGS: Final[dict[tuple[tuple[str, str], ...], _Others]] = {}
"""A command call's other arguments (as items) → their canonical JSON and its key,
process-wide: agents pass the same ones call after call (a program, a working directory)."""


def clear_call_effects() -> None:
    """Forget the remembered command calls and the keys of command calls' other arguments
    (a benchmark's first sight)."""
    _COMMAND_CALLS.clear()
    _OTHER_ARGS.clear()


def _streak(st: _OpStat | _FirstOp) -> _OpStat:
    """The streak of an operation: made of its first step's tuple if it was seen once."""
    return _OpStat.first(*st) if isinstance(st, tuple) else st


def _held_call(role: str, command: str, args: Mapping[Any, Any]) -> tuple[Any, ...] | None:
    """The key :data:`_COMMAND_CALLS` holds a call under: its role, its ``command`` line
    and its other arguments' items but narration and budgets (:data:`NARRATION_ARGUMENTS`,
    :data:`RUN_BUDGET_ARGUMENTS`, by their exact names), when they are at most 8 strings of
    up to 256 characters; else ``None``. (The received hook makes the key of a call with one other
    argument itself, the same way.)"""
    n = len(args)
    if n == 1:
        return (role, command)
    if n > _OTHER_ARGS_ITEMS + 1:
        return None
    held: list[Any] = [role, command]
    for item in args.items():
        # Narration and budgets are no part of the call's identity, so none of its key: a
        # line described anew each call is found again.
        if item[0] != "command" and item[0] not in _NOT_THE_COMMAND:
            if type(item[1]) is not str or len(item[1]) > _OTHER_ARGS_CHARS:
                return None
            held.append(item)
    return tuple(held)


def _mix(key: int, other: int) -> int:
    """One 64-bit key of two keys (the same in every process): a command line's and its
    call's other arguments', without hashing their concatenation (a heredoc line is
    kilobytes long)."""
    return (key * 0x9E3779B97F4A7C15 + other) & 0xFFFFFFFFFFFFFFFF


_DIGITS: Final = re.compile(r"\d+")


_SCALARS: Final = (
    "pos",
    "epoch",
    "floor",
    "wait_ns",
    "novel",
    "wait_pos",
    "last_end",
    "run",
    "run_pos",
    "cycle_period",
    "cycle_start",
    "cycle_level",
    "model_ns",
)
"""The counters of a session's state, in snapshot order (``model_ns`` last: a version 2
snapshot, which has the others, is read with none)."""
_RESTORED_ARGS: Final[Mapping[str, Any]] = MappingProxyType({"": "…"})
"""The arguments of a step restored from a snapshot (kept behind): its label is ``tool(…)``."""


def _int(value: Any) -> int:
    if type(value) is not int:
        raise SnapshotRejected(f"{value!r} is not an integer")
    return value


def _key(value: Any) -> int | None:
    return None if value is None else _int(value)


def _text(value: Any) -> str:
    if type(value) is not str:
        raise SnapshotRejected(f"{value!r} is not text")
    return value


def _bounded(rows: Any, limit: int) -> list[Any]:
    if not isinstance(rows, list) or len(rows) > limit:
        raise SnapshotRejected("a table is not a list within the detector's memory")
    return rows


def _loose(canonical: str) -> int:
    """A key of arguments up to their digits and letter case."""
    return text_key(_DIGITS.sub("#", canonical).casefold())


def _truncate(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def _recent_ids(
    s: _Repetitions, size: int, since: int, tool: str, ahash: int | bool | None, rkey: int | None
) -> list[str]:
    """Call ids of the latest steps (still in the ring, from ``since``) matching the
    operation; ``ahash=False`` matches any arguments. Only run for a detection."""
    ids: list[str] = []
    lowest = max(since, s.pos - min(size, _ID_SCAN) + 1, 1)
    for position in range(s.pos, lowest - 1, -1):
        op = s.ring[position % size]
        call = s.ring_calls[position % size]
        if (
            op is not None
            and call is not None
            and op[0] == tool
            and op[2] == rkey
            and (ahash is False or op[1] == ahash)
        ):
            ids.append(call[2])
            if len(ids) == _MAX_IDS:
                break
    ids.reverse()
    return ids


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py), yet subclassable
class RepetitionDetector(SessionDetector[_Repetitions]):
    """Detects runaway tool loops, and leaves polling, retries and re-reads between writes alone.

    An *operation* is one completed tool call attempt: ``(tool, arguments,
    result)``, each hashed after normalisation (:class:`~loopobs.detectors.Normaliser`:
    path spellings, whitespace, nonces, timestamps, rising timeouts, reworded
    queries in arguments; timestamps, durations and ids in results). Hooks read:
    ``on_tool_call_received`` (arguments and :class:`~loopobs.contract.events.ToolAnnotations`),
    ``on_tool_post`` (result, duration, error) and ``on_compaction``; a post whose
    call was never received counts with unknown arguments. A call with neither
    arguments nor a result (content capture off, in a span-bridged app) is not
    counted: its tool's name alone is no evidence of a loop.

    Signals, checked after every ``on_tool_post`` (each emits ``on_loop_detected``
    with ``action="warn"`` at ``warn_after`` and ``action="stop"`` at ``stop_after``,
    each escalation once, and the reason on the event):

    - ``repeat``: the same operation again. Identical errors warn one repeat later
      (``warn_after + 1``: a retry budget of three is not a loop). A repeat after more
      than ``novelty`` operations never seen before starts the count over (for a
      read-only call, after more than ``read_novelty``: any new read between): a
      re-read amid new work, where a loop's steps are themselves repeats. A thinking
      tool (``think``, ``reflect``) is never new work. The same call with the same
      result and nothing side-effecting since is unambiguous: it stops at
      ``sure_stop_after`` (5) repeats, before ``stop_after``.
    - ``cycle``: a sequence of 2 to ``max_period`` steps repeated in a row. Up to 4
      steps it warns after two passes and stops at the second step of the third
      (unambiguous; a 2-step cycle after three passes) within one run; a longer
      one warns as soon as ``min(period, 6)`` steps match the previous pass and stops
      after ``max(3, ceil(stop_after / period))`` passes, so a long loop stops after
      about ``stop_after`` looping steps. A cycle with a wait in it (a waiting tool,
      or an idle ``poll_gap_s`` between two of its steps) is polling.
    - ``same_result``: a tool that is not side-effecting returns the same result
      (at least ``same_result_min_chars`` long, not an error) for different arguments
      *and* arguments come back (equal up to digits and case: a reworded search run
      again, "draft v3" after "draft v2"). The same result for new arguments only
      (empty, "OK", a fixed failure after each real fix) is constant feedback, not a
      loop. It stops at ``stop_after`` calls, or at ``sure_stop_after`` once arguments
      came back twice.
    - ``poll_budget``: a repeat that is *paced* does not count as a repeat: a waiting
      tool ran ``min_wait_s`` or more since the previous one (``waits`` annotation, or
      ``sleep``/``wait`` in the name), the idle gap since the previous one was
      ``poll_gap_s`` or more (the call's own duration is not idle), or it grew
      ×1.8 from the previous gap (back-off; at least ``backoff_min_s``, and steady
      gaps after it; gaps are compared per step between the two occurrences, so a
      read between two repeats is no back-off). The streak warns when it has lasted
      ``poll_warn_s`` seconds and stops at ``poll_stop_s``.

    Progress, which ends streaks: the same call with a different (normalised)
    result; a successful side-effecting call with arguments not seen before, in more
    than their numbers (clears every count of tools that are not side-effecting,
    and cycle evidence);
    a compaction (the agent may re-read what it lost). Whether a tool is
    side-effecting, read-only or waits comes from the event's annotations, else
    from ``annotations``, else (``infer_annotations``) from verbs in its name
    (``write_file``, ``git_commit`` …).

    Command, code and editor tools are judged per call (:mod:`.commands`): a
    ``bash``/``shell``/``execute_bash``/``run_command``/``terminal`` tool (or an MCP
    shell tool) with a ``command``/``cmd`` argument, or a tool declared in
    ``command_tools``, or a tool whose name says nothing but whose ``command``/``cmd``
    holds a shell line (:func:`~.commands.role_by_arguments`), has its command line
    parsed (pipelines, ``&&``/``;`` chains, ``cd X &&``, wrappers, ``bash -lc "…"``
    scripts, heredocs, redirections) into a read (``cat``, ``grep``,
    ``sed -n``, ``git diff`` …), a run (``pytest``, ``python x.py``) or a write
    (``sed -i``, ``> file``, ``rm``, ``git commit``, installs …); ``python`` tools'
    code likewise; ``str_replace_editor``-style tools by their ``command`` (``view``
    reads, ``str_replace``/``create``/``insert`` write). A parsed call's effect beats
    its tool's annotations; an unparseable command falls back to them. A parsed write
    whose output says it failed (a non-zero ``<returncode>``, ``ERROR:``, "No such
    file or directory" …) is no progress, and spellings of one write (``rm -f X``,
    ``rm -rf X``) are one operation.

    Memory per session is bounded, whatever the session's length: at most
    ``memory`` operations, calls, results and writes (the oldest first in are
    forgotten) and a ring of ``2 × max_period + 2`` steps; per detector, whether 256
    writes' outputs said they failed and the kind of 4,096 tool names; process-wide,
    shared by every detector, the effects of at most 1,024 command lines (twice: parsed,
    and as a call's effect) and 32 longer ones, the keys of 1,024 sets of command calls'
    other arguments and of 1,024 sets of other tools' arguments (by the normaliser's
    rules), the masked keys of at most 4,096 results and the words and roles of 4,096
    tool names (each depends on its inputs alone). An operation not seen
    for ``horizon`` calls starts over. Cycle search keeps at most four candidate
    periods (found from the distance to an operation's previous occurrence), so
    each call costs the same whatever ``max_period`` is. A stop clears the
    session, so its next run starts afresh.

    Args:
        warn_after: repetitions (or cycles, or arguments) that warn; at least 2.
        stop_after: repetitions that stop; 0 never stops.
        max_period: longest cycle detected; 1 detects plain repetition only.
        horizon: calls after which an operation not seen again is forgotten.
        memory: distinct operations (and calls, results, writes) kept per session.
        normaliser: normalisation rules; ``Normaliser(enabled=False)`` hashes exactly.
        annotations: tool name → annotations, for tools whose events carry none.
        infer_annotations: guess side effects and waiting from tool names.
        same_result_min_chars: shortest result the ``same_result`` signal considers.
        poll_warn_s: seconds a paced poll may return the same result before a warning.
        poll_stop_s: seconds before a stop (0: never).
        min_wait_s: time in waiting tools that paces a repeat.
        backoff_min_s: shortest grown gap read as back-off.
        poll_gap_s: an idle gap this long (previous end to this start) paces a repeat.
        novelty: never-seen operations between two repeats after which the count
            starts over.
        primary_params: tool name → the argument shown in the pattern.
        max_sessions: sessions remembered; the least recently active are dropped.
        sure_stop_after: repeats of the same call and result with nothing changed
            since that stop (0: only ``stop_after``; nothing stops if that is 0).
        command_tools: tool name → the argument holding the command line it runs.
        infer_commands: recognise command, code and editor tools by name, and by
            their arguments when the name says nothing.
        read_novelty: ``novelty`` for read-only calls.
        window: deprecated alias of ``horizon``.
    """

    name = "RepetitionDetector"

    def __init__(
        self,
        window: int | None = None,
        warn_after: int = 3,
        stop_after: int = 10,
        max_period: int = 64,
        primary_params: Mapping[str, str] | None = None,
        *,
        horizon: int = 200,
        memory: int = 512,
        normaliser: Normaliser | None = None,
        annotations: Mapping[str, ToolAnnotations] | None = None,
        infer_annotations: bool = True,
        same_result_min_chars: int = 24,
        poll_warn_s: float = 1800.0,
        poll_stop_s: float = 7200.0,
        min_wait_s: float = 1.0,
        backoff_min_s: float = 3.0,
        poll_gap_s: float = 30.0,
        novelty: int = 3,
        read_novelty: int = 0,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        sure_stop_after: int = 5,
        command_tools: Mapping[str, str] | None = None,
        infer_commands: bool = True,
    ) -> None:
        if window is not None:
            horizon = window
        if horizon < 1:
            raise ValueError("window (horizon) must be at least 1")
        if warn_after < 2:
            raise ValueError("warn_after must be at least 2")
        if stop_after and stop_after < warn_after:
            raise ValueError("stop_after must be 0 (never stop) or at least warn_after")
        if max_period < 1:
            raise ValueError("max_period must be at least 1")
        if memory < 1:
            raise ValueError("memory must be at least 1")
        if sure_stop_after and sure_stop_after < warn_after:
            raise ValueError("sure_stop_after must be 0 (only stop_after) or at least warn_after")
        if poll_stop_s and poll_stop_s < poll_warn_s:
            raise ValueError("poll_stop_s must be 0 (never stop) or at least poll_warn_s")
        super().__init__(max_sessions=max_sessions)
        self.horizon = horizon
        self.warn_after = warn_after
        self.stop_after = stop_after
        self.max_period = max_period
        self.memory = memory
        self.normaliser = normaliser if normaliser is not None else Normaliser()
        self.annotations: Mapping[str, ToolAnnotations] = dict(annotations or {})
        self.infer_annotations = infer_annotations
        self.same_result_min_chars = same_result_min_chars
        self.poll_warn_ns = int(poll_warn_s * 1e9)
        self.poll_stop_ns = int(poll_stop_s * 1e9)
        self.min_wait_ns = int(min_wait_s * 1e9)
        self.backoff_min_ns = int(backoff_min_s * 1e9)
        self.poll_gap_ns = int(poll_gap_s * 1e9)
        self.novelty = novelty
        self.read_novelty = read_novelty
        self.primary_params: Mapping[str, str] = dict(primary_params or {})
        self.sure_stop_after = sure_stop_after
        self.command_tools: Mapping[str, str] = dict(command_tools or {})
        self.infer_commands = infer_commands
        self._ring = 2 * max_period + 2
        self._pending: OrderedDict[int, dict[str, _Pending]] = OrderedDict()
        self._tools: dict[str, _Tool] = {}
        self._failures: dict[int, bool] = {}

    @property
    def window(self) -> int:
        """The horizon (kept under its former name)."""
        return self.horizon

    def __repr__(self) -> str:
        return (
            f"RepetitionDetector(warn_after={self.warn_after}, stop_after={self.stop_after}, "
            f"max_period={self.max_period}, horizon={self.horizon}, memory={self.memory})"
        )

    def _new_state(self) -> _Repetitions:
        return _Repetitions(self._ring)

    # -- a session's state as plain data (it moves between workers with its session) -------
    snapshot_kind = "repetition"

    def _config(self) -> list[Any]:
        return [self._ring, self.memory]

    def _dump(self, s: _Repetitions) -> dict[str, Any]:
        same = []
        for (tool, rkey), entry in s.same.items():
            sr = entry if isinstance(entry, _SameStat) else _SameStat(*entry)
            seen = list(sr.seen or ())
            if not seen and sr.first:
                seen = [_loose(sr.first)]  # the key of the first arguments, never their text
            counts = [sr.distinct, sr.epoch, sr.first_pos, sr.last_pos, sr.level, sr.recurred]
            same.append([tool, rkey, sr.args, *counts, sr.changed, seen])
        return {
            "scalars": [getattr(s, name) for name in _SCALARS],
            "ops": [
                [op[0], op[1], op[2], [getattr(st, name) for name in _STREAK_FIELDS]]
                for op, st in ((k, _streak(v)) for k, v in s.ops.items())
            ],
            "calls": [[k[0], k[1], *c] for k, c in s.calls.items()],
            "same": same,
            "written": [list(k) for k in s.written],
            "ring": [None if op is None else list(op) for op in s.ring],
            # A step's tool and call id; its arguments stay behind (a pattern spanning the
            # move names the earlier steps as tool(…)).
            "ring_calls": [None if c is None else [c[0], c[2]] for c in s.ring_calls],
            "cands": [[k, v] for k, v in s.cands.items()],
        }

    def _load(self, data: Any) -> _Repetitions:
        if not isinstance(data, dict):
            raise SnapshotRejected("no state")
        memory, size = self.memory, self._ring
        s = _Repetitions(size)
        scalars = data["scalars"]
        if len(scalars) == len(_SCALARS) - 1:
            scalars = [*scalars, 0]  # a version 2 snapshot: no model time counted yet
        if len(scalars) != len(_SCALARS):
            raise SnapshotRejected("the counters do not match")
        for name, value in zip(_SCALARS, scalars, strict=True):
            setattr(s, name, _int(value))
        for tool, ahash, rkey, fields in _bounded(data["ops"], memory):
            st = _OpStat()
            if len(fields) != len(_STREAK_FIELDS):
                raise SnapshotRejected("an operation does not match")
            for name, value in zip(_STREAK_FIELDS, fields, strict=True):
                # (Two statements: compiled, a bool in an int-typed expression becomes 0 or 1.)
                if name == "paced":
                    st.paced = bool(value)
                else:
                    setattr(st, name, _int(value))
            s.ops[(_text(tool), _key(ahash), _key(rkey))] = st
        for tool, ahash, rkey, gen, raw in _bounded(data["calls"], memory):
            s.calls[(_text(tool), _key(ahash))] = (_key(rkey), _int(gen), _key(raw))
        for row in _bounded(data["same"], memory):
            tool, rkey, args, distinct, epoch, first_pos, last_pos, level, recurred = row[:9]
            sr = _SameStat()
            sr.args, sr.distinct, sr.epoch = _key(args), _int(distinct), _int(epoch)
            sr.first_pos, sr.last_pos, sr.level = _int(first_pos), _int(last_pos), _int(level)
            sr.recurred, sr.changed = _int(recurred), bool(row[9])
            sr.seen = {_key(k) for k in row[10][:_SAME_ARGS]}
            s.same[(_text(tool), _int(rkey))] = sr
        for tool, shape in _bounded(data["written"], memory):
            s.written[(_text(tool), _key(shape))] = None
        ring, ring_calls = data["ring"], data["ring_calls"]
        if len(ring) != size or len(ring_calls) != size:
            raise SnapshotRejected("the ring does not match")
        s.ring = [None if op is None else (_text(op[0]), _key(op[1]), _key(op[2])) for op in ring]
        s.ring_calls = [
            None if c is None else (_text(c[0]), _RESTORED_ARGS, _text(c[1])) for c in ring_calls
        ]
        s.cands = {_int(k): _int(v) for k, v in _bounded(data["cands"], max(size, 1))}
        return s

    def reset(self) -> None:
        """Forget every session's state and every call awaiting its result."""
        with self._lock:
            self._pending.clear()
            self._failures.clear()
        super().reset()

    def _run_ended(self, run_id: int) -> None:
        self._pending.pop(run_id, None)

    def label(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """The pattern text of one call: ``tool(primary)``."""
        primary: Any = None
        name = self.primary_params.get(tool)
        if name is not None:
            primary = arguments.get(name)
        else:
            for value in arguments.values():
                if type(value) is str:
                    primary = value
                    break
        if primary is None:
            primary = canonical_json(arguments) if arguments else ""
        elif type(primary) is not str:
            primary = canonical_json(primary)
        return f"{tool}({_truncate(primary)})"

    def _kind(self, tool: str, given: ToolAnnotations | None) -> _Kind:
        """(side_effecting, read_only, waits, inert) of ``tool``: event, then settings, then
        name (remembered per tool by :meth:`_tool` when the event has no annotations)."""
        if given is None:
            given = self.annotations.get(tool)
        side = ro = waits = None
        if given is not None:
            side, ro, waits = given.side_effecting, given.read_only, given.waits
            if side is None and ro is not None:
                side = not ro
        parts = _name_words(tool) if self.infer_annotations else frozenset()
        if self.infer_annotations and (side is None or waits is None):
            if side is None and ro is None:
                side = bool(parts & _SIDE_VERBS) and not parts & _WAIT_VERBS
                ro = not side and bool(parts & _READ_VERBS)
            if waits is None:
                waits = bool(parts & _WAIT_VERBS)
        inert = bool(self.infer_annotations and not side and parts & _THINK_WORDS)
        return (bool(side), bool(ro), bool(waits), inert)

    # -- hooks -----------------------------------------------------------------------------
    def _tool(self, tool: str) -> _Tool:
        """What the detector's settings and the name say of ``tool`` (:class:`_Tool`),
        remembered per name (a race only computes the same entry twice)."""
        info = self._tools.get(tool)
        if info is None:
            role = tool_role(tool) if self.infer_commands else None
            info = _Tool(self._kind(tool, None), self.command_tools.get(tool), role)
            if len(self._tools) < _TOOLS_HELD:
                self._tools[tool] = info
        return info

    def on_tool_call_received(self, ctx: ToolCallReceivedContext) -> None:
        """Normalise and hash the call's arguments, to pair with its result at ``on_tool_post``."""
        # Keys of any type: compiled, a key that is no string (against the contract) must be
        # no error in the hook, as it is none interpreted.
        args: Mapping[Any, Any] = ctx.input
        tool = ctx.tool
        info = self._tools.get(tool) or self._tool(tool)
        kind = info.kind if ctx.annotations is None else self._kind(tool, ctx.annotations)
        held: tuple[Any, ...] | None = None
        found = None
        if info.role is not None and info.command_arg is None and info.role != "editor":
            command = args.get("command")
            # (call_effect judges the arguments of a dict only.)
            if (
                type(command) is str
                and len(command) <= _EFFECT_CACHE_CHARS
                and isinstance(args, dict)
            ):
                if len(args) == 2:
                    # _held_call's common case, without its call: a line and one argument.
                    first, second = args.items()
                    item = second if first[0] == "command" else first
                    if item[0] in _NOT_THE_COMMAND:
                        held = (info.role, command)  # the line's own identity (_held_call)
                    elif type(item[1]) is str and len(item[1]) <= _OTHER_ARGS_CHARS:
                        held = (info.role, command, item)
                else:
                    held = _held_call(info.role, command, args)
                if held is not None:
                    found = _COMMAND_CALLS.get(held)
        if found is None:
            found = self._identity(tool, args, info, held)
        effect, ahash, applied, page, canonical, target = found
        if effect is not None:
            # The command says what this call does, whatever the tool's name says.
            kind = _EFFECT_KINDS[effect, kind[2]]
        entry: _Pending = _new_tuple(
            _Pending,
            (tool, ahash, args, kind, applied, page, canonical, effect is not None, target),
        )
        rid = ctx.run_id.int
        calls = self._pending.get(rid)
        if calls is None:
            with self._lock:
                calls = self._pending.setdefault(rid, {})
                if len(self._pending) > self._max_sessions:
                    self._pending.popitem(last=False)
        # One assignment (atomic): a run's calls need no lock once its dict exists.
        calls[ctx.tool_call_id] = entry
        if len(calls) > _MAX_PENDING_CALLS:
            calls.pop(next(iter(calls)), None)

    def _identity(
        self, tool: str, args: Mapping[Any, Any], info: _Tool, held: tuple[Any, ...] | None
    ) -> _Identity:
        """The :data:`_Identity` of a call, made anew; remembered under ``held`` (its
        :func:`_held_call` key, if any) when its command line was parsed."""
        effect = None
        if info.command_arg is not None:
            effect = call_effect(tool, args, info.command_arg)
        elif held is not None:
            # call_effect's answer for the line (held[1]), judged anew: the call's identity
            # is remembered here, so its line need not be in call_effect's caches too.
            effect = command_line_effect(held[1], "command")
        elif info.role is not None:
            effect = call_effect(tool, args, None, info.role)
        elif self.infer_commands and (
            "command" in args
            or "cmd" in args
            or "old_string" in args
            or "old_str" in args
            or "edits" in args
        ):
            # A name that says nothing ("mytool", an MCP server's "run", Claude Code's
            # "Edit" and "MultiEdit"), but a command line, an editor's sub-command or a text
            # replacement (or a list of them) in its arguments: judged as such a call.
            role = role_by_arguments(args)
            if role is not None:
                effect = call_effect(tool, args, None, role)
        if effect is None:
            ahash, applied, page, canonical = self.normaliser.arguments_key(tool, args)
            return None, ahash, applied, page, canonical, None
        target = None
        if effect.target is not None:
            # Spellings of one write (rm -f X, rm -rf X) are one operation.
            target = (
                effect.target_hash
                if effect.target_hash is not None
                else text_key("\x1f".join(sorted(effect.target)))
            )
        if effect.key is None:
            # An editor's or a code tool's call: its arguments are its identity.
            ahash, applied, page, canonical = self.normaliser.arguments_key(tool, args)
            return (
                effect.effect,
                ahash if target is None else target,
                applied,
                page,
                canonical,
                target,
            )
        # A command line is keyed on its tokens (whitespace and quoting folded), the
        # other arguments (a working directory, a program) on their canonical JSON.
        canonical = effect.key
        ahash = effect.key_hash if effect.key_hash is not None else text_key(canonical)
        if len(args) > 1:
            others = self._other_arguments(args, effect.arg)
            if others is not None:  # (None: all narration and budgets, keyed as the line)
                canonical += "\x1d" + others[0]
                ahash = _mix(ahash, others[1])
        found: _Identity = (
            effect.effect,
            ahash if target is None else target,
            _NO_RULES,
            None,
            canonical,
            target,
        )
        if held is not None:
            if len(_COMMAND_CALLS) >= _COMMAND_CALLS_HELD:
                _COMMAND_CALLS.clear()  # all at once: a dict store and clear are each atomic
            _COMMAND_CALLS[held] = found
        return found

    def _other_arguments(self, args: Mapping[Any, Any], command_arg: str | None) -> _Others | None:
        """The canonical JSON of a command call's arguments but its command line, its
        narration and its budgets (:data:`NARRATION_ARGUMENTS`, :data:`RUN_BUDGET_ARGUMENTS`):
        a program, a working directory, an environment; and its
        :func:`~loopobs.contract.hashing.text_key`. ``None`` when none is left. Agents pass
        the same ones call after call: when they are short strings, both are remembered
        process-wide (at most 1,024 sets of them)."""
        if len(args) == 2 and command_arg in args:
            # The common call (a command line and a program or a directory), looked up
            # without copying the arguments; a miss is keyed below as any other set.
            first, second = args.items()
            item = second if first[0] == command_arg else first
            if type(item[1]) is str:
                found = _OTHER_ARGS.get((item,))
                if found is not None:
                    return found
                if type(item[0]) is str and item[0].lower() in _NOT_THE_COMMAND:
                    return None
        others = {
            k: v
            for k, v in args.items()
            if k != command_arg and not (type(k) is str and k.lower() in _NOT_THE_COMMAND)
        }
        if not others:
            return None
        if len(others) > _OTHER_ARGS_ITEMS:
            text = canonical_json(others)  # an entry of the cache stays small
            return text, text_key(text)
        for value in others.values():
            if type(value) is not str or len(value) > _OTHER_ARGS_CHARS:
                text = canonical_json(others)  # numbers (1 == 1.0 == True) or long text
                return text, text_key(text)
        key = tuple(others.items())
        found = _OTHER_ARGS.get(key)
        if found is None:
            text = canonical_json(others)
            found = (text, text_key(text))
            if len(_OTHER_ARGS) >= _OTHER_ARGS_HELD:
                _OTHER_ARGS.clear()  # all at once: a dict store and clear are each atomic
            _OTHER_ARGS[key] = found
        return found

    def on_stream_success(self, ctx: StreamSuccessContext) -> None:
        """A model call of the session ended: its time is not idle time between tool calls."""
        self._model_time(ctx.run_id, ctx.duration_ms)

    def on_stream_failure(self, ctx: StreamFailureContext) -> None:
        """A model call attempt failed: its time is the model's too, not the agent's."""
        self._model_time(ctx.run_id, ctx.duration_ms)

    def _model_time(self, run_id: UUID, duration_ms: float) -> None:
        """Take a model call's time off the clock of a session that has made a tool call:
        before its first, no gap is judged, and a session without tools keeps no state."""
        if not (duration_ms > 0 and math.isfinite(duration_ms)):
            return  # (NaN and infinities too: a clock never moves by them)
        rid = run_id.int
        with self._lock:
            state = self._sessions.get(self._run_sessions.get(rid, rid))
            if state is not None:
                state.model_ns += int(duration_ms * 1e6)

    def on_compaction(self, ctx: CompactionContext) -> None:
        """The conversation lost context: re-reading from here on is not a repeat."""
        with self._lock:
            _, state = self._state(ctx.run_id)
            state.progress()

    def on_tool_post(self, ctx: ToolPostContext) -> None:
        """Record the operation and emit ``on_loop_detected`` if it escalates a signal.

        Fires after the attempt's result is known; every attempt counts as one operation.
        """
        raw = ctx.result_hash
        text = ctx.result
        if raw is None and text:
            raw = result_hash(text)
        rid = ctx.run_id.int
        # dict.get and dict.pop are atomic: no lock needed to take the pending call.
        calls = self._pending.get(rid)
        pending = calls.pop(ctx.tool_call_id, None) if calls is not None else None
        if pending is None:
            pending = _Pending(
                ctx.tool,
                None,
                _UNKNOWN_CALL_ARGS,
                self._tool(ctx.tool).kind,
                _NO_RULES,
                None,
                "",
                False,
                None,
            )
        if raw is None and not ctx.is_error and not pending.args:
            # No arguments and no result to tell this call from the last (content capture
            # off in a span-bridged app): the tool's name alone is no evidence of a loop.
            return
        rkey = raw
        last = None
        if text:
            # The session's entry for this call, if it made the call before: a peek without
            # the lock (a stale answer only decides whether a result is normalised again).
            state = self._sessions.get(self._run_sessions.get(rid, rid))
            if state is not None:
                last = state.calls.get((pending.tool, pending.ahash))
        if last is not None and last[2] == raw:
            rkey = last[0]  # the call's text as last time: its key, without normalising again
        elif raw is not None and text and (len(text) <= _EAGER_RESULT_CHARS or last is not None):
            # An in-process key, like the arguments'; the same text again (a re-read, a
            # loop, another run's output) is not masked again.
            rkey = self.normaliser.result_key(pending.tool, text, raw, pending.page)
        duration_ms = ctx.duration_ms
        duration_ns = int(duration_ms * 1e6) if duration_ms > 0 else 0
        # A write is new work only if it differs in more than its numbers (a revision
        # counter or a timestamp in an otherwise identical write is not progress), and
        # only if it worked: a command or an edit whose output says it failed changed nothing.
        side = pending.kind[0]
        failed = ctx.is_error or bool(side and pending.parsed and text and self._failed(text, raw))
        if (
            failed
            and side
            and pending.parsed
            and pending.target is None
            and (not _NEW_CONTENT.isdisjoint(pending.args) or "edits" in pending.args)
        ):
            pending = self._rejected_edit(pending)
        shape = None
        if side and not failed:
            shape = (
                pending.target
                if pending.target is not None
                else self.normaliser.shape_key(pending.canonical)
            )
        with self._lock:
            key, state = self._state_of(rid)
            if state.run != rid:
                # A new run is a new request: surer stops need their evidence within one run.
                state.run, state.run_pos = rid, state.pos + 1
            detection = self._record(
                state,
                pending,
                rkey,
                raw,
                ctx.tool_call_id,
                ctx.time_ns,
                duration_ns,
                ctx.is_error,
                failed,
                len(text) if text else 0,
                shape,
            )
            if detection is not None and detection.level == _STOP:
                self._clear_session(key)
            targets = self._targets
        if detection is None:
            return
        signal, pattern, repetitions, tool, level, ids, reason = detection
        applied = sorted(
            pending.applied
            | (
                self.normaliser.result_kinds(pending.tool, text, pending.page)
                if text and rkey != raw
                else set()
            )
        )
        event = LoopDetectedContext(
            run_id=ctx.run_id,
            time_ns=ctx.time_ns,
            pattern=pattern,
            repetitions=repetitions,
            tool=tool,
            action=_ACTIONS[level],
            signal=signal,
            reason=reason + (f" (normalised: {', '.join(applied)})" if applied else ""),
            call_ids=tuple(ids),
            normalised=tuple(applied),
            arguments_hash=(
                stable_hash64(pending.canonical.encode("utf-8", "surrogatepass"))
                if pending.args is not _UNKNOWN_CALL_ARGS
                else None
            ),
            raw_arguments_hash=(
                arguments_hash(pending.args) if pending.args is not _UNKNOWN_CALL_ARGS else None
            ),
            # The key used was the raw text's (nothing masked, or not normalised): no need
            # to mask a long result again for the event.
            result_hash=(
                result_hash(self.normaliser.result_text(pending.tool, text, pending.page))
                if text and rkey != raw
                else raw
            ),
            raw_result_hash=raw,
        )
        for target in targets:
            target.on_loop_detected(event)

    def _failed(self, text: str, raw: int | None) -> bool:
        """:func:`failed_output` of a write's output, remembered per detector by its raw
        hash (256 of them): a session's writes answer in few ways ("File updated",
        "No such file or directory"), and the scan for failure reads the whole text.
        Outside the lock: dict.get, a store and clear are each atomic, and a race only
        scans an output twice."""
        if raw is None:
            return failed_output(text)
        found = self._failures.get(raw)
        if found is None:
            found = failed_output(text)
            if len(self._failures) >= _FAILURES_HELD:
                self._failures.clear()
            self._failures[raw] = found
        return found

    def _rejected_edit(self, p: _Pending) -> _Pending:
        """A rejected edit keyed on where it would have written, not on what: an editor
        refuses a ``str_replace`` for its ``old_str`` (not found, not unique), so a retry
        with the same ``old_str`` and other new text is the same failed call."""
        where = {k: v for k, v in p.args.items() if k not in _NEW_CONTENT}
        edits = where.get("edits")
        if type(edits) is list:  # MultiEdit: each replacement keyed on its old text alone
            where["edits"] = [
                {k: v for k, v in e.items() if k not in _NEW_CONTENT} if isinstance(e, dict) else e
                for e in edits
            ]
        ahash, _, _, canonical = self.normaliser.arguments_key(p.tool, where)
        return p._replace(ahash=ahash, canonical=canonical)

    # -- the session's memory --------------------------------------------------------------
    def _record(
        self,
        s: _Repetitions,
        p: _Pending,
        rkey: int | None,
        raw: int | None,
        call_id: str,
        time_ns: int,
        duration_ns: int,
        is_error: bool,
        failed: bool,
        result_len: int,
        shape: int | None,
    ) -> _Finding | None:
        """Add one operation; the detection it completes, if any. Lock held.

        Times are on the session's clock, which runs without its model calls' time: the
        gaps that tell a wait (an idle gap, back-off, the polling budget) are the agent's
        own, not its model's thinking."""
        time_ns -= s.model_ns
        s.pos += 1
        pos = s.pos
        tool = p.tool
        side, read_only, waits, inert = p.kind
        if waits:
            s.wait_ns += duration_ns
            if duration_ns >= self.min_wait_ns:
                s.wait_pos = pos
        start = time_ns - duration_ns
        if s.last_end and start - s.last_end >= self.poll_gap_ns:
            s.wait_pos = pos  # idle before this step: the agent waited
        s.last_end = time_ns
        memory = self.memory

        call = (tool, p.ahash)
        c = s.calls.get(call)
        if c is None:
            c = s.calls[call] = (rkey, 0, raw)
            if len(s.calls) > memory:
                s.calls.popitem(last=False)
        elif c[2] == raw:
            rkey = c[0]  # the same text: the same key, normalised or not
        elif c[0] != rkey:
            c = s.calls[call] = (rkey, c[1] + 1, raw)
        epoch_before = s.epoch
        if side and not failed:
            written = (tool, shape)
            if written not in s.written:
                s.written[written] = None
                if len(s.written) > memory:
                    s.written.popitem(last=False)
                s.progress()

        op = (tool, p.ahash, rkey)
        st = s.ops.get(op)
        prev_pos = 0
        if st is None:
            if not inert and (not side or (shape is not None and s.epoch != epoch_before)):
                s.novel += 1  # new work; a write only if it was progress
            s.ops[op] = (time_ns, pos, s.epoch, c[1], s.wait_ns, s.novel)
            if len(s.ops) > memory:
                s.ops.popitem(last=False)
            st = None
        else:
            if isinstance(st, tuple):
                st = s.ops[op] = _OpStat.first(*st)  # seen again: a streak, in the same place
            prev_pos = st.last_pos
            if (
                st.gen != c[1]
                or (not side and st.epoch != s.epoch)
                or pos - st.last_pos > self.horizon
                or s.novel - st.novel_mark > (self.read_novelty if read_only else self.novelty)
            ):
                # Seen again, but after more than a few operations never seen before: a
                # re-read amid new work, not a loop (a loop's steps are themselves repeats).
                st.start(time_ns, pos, s.epoch)
            elif self._paced(s, st, time_ns, duration_ns):
                st.polls += 1
            else:
                st.count += 1
            st.gen, st.epoch, st.last_pos, st.last_ns, st.wait_mark, st.novel_mark = (
                c[1],
                s.epoch,
                pos,
                time_ns,
                s.wait_ns,
                s.novel,
            )

        if s.cands or (prev_pos > s.floor and pos - prev_pos <= self.max_period):
            cycle = self._cycle(s, op, (tool, p.args, call_id), pos, prev_pos)
        else:
            # No candidate period to extend and none to start (most steps): the step only
            # goes into the ring.
            idx = pos % self._ring
            s.ring[idx] = op
            s.ring_calls[idx] = (tool, p.args, call_id)
            cycle = None
        # A cycle with a wait in it (poll, sleep, poll …; or an idle gap between two of its
        # steps) is polling: its steps answer to the budget.
        if cycle is not None and s.wait_pos <= pos - cycle[0]:
            return self._cycle_detection(s, cycle[0], cycle[1], pos)
        if cycle is None:
            s.cycle_period = 0
            s.cycle_level = _NONE

        # (A streak of one never warns: warn_after is at least 2.)
        if st is not None and (st.count >= self.warn_after or st.polls):
            detection = self._repeat_detection(s, st, p, rkey, is_error, time_ns)
            if detection is not None:
                return detection
        if side or failed or rkey is None or result_len < self.same_result_min_chars:
            return None
        same = (tool, rkey)
        if same not in s.same:
            # A result this session has not had (most): a streak of one, nothing to tell.
            s.same[same] = (p.ahash, s.epoch, pos, p.canonical)
            if len(s.same) > memory:
                s.same.popitem(last=False)
            return None
        return self._same_result(s, p, rkey, call_id, pos)

    def _paced(self, s: _Repetitions, st: _OpStat, time_ns: int, duration_ns: int) -> bool:
        """Whether this repeat of ``st`` waited: a waiting tool ran since, a long idle gap,
        or back-off (the gap grew ×1.8, or held steady after growing). Records the gap.

        The gap runs from the end of the previous occurrence to the start of this one:
        a call that itself takes long (a rising timeout) is not a wait between polls.
        Back-off compares gaps per step between the two: a repeat with a read between
        (P P R P) takes two steps' time, which is no longer wait per step.
        """
        gap = time_ns - duration_ns - st.last_ns
        per_step = gap // max(1, s.pos - st.last_pos)
        last = st.last_gap
        st.last_gap = per_step
        paced = (
            s.wait_ns - st.wait_mark >= self.min_wait_ns
            or gap >= self.poll_gap_ns
            or (
                last > 0
                and per_step >= self.backoff_min_ns
                and (per_step * 10 >= last * 18 or (st.paced and per_step * 10 >= last * 9))
            )
        )
        st.paced = paced
        return paced

    def _level(self, n: int, warn_at: int) -> int:
        if self.stop_after and n >= self.stop_after:
            return _STOP
        return _WARN if n >= warn_at else _NONE

    def _repeat_detection(
        self,
        s: _Repetitions,
        st: _OpStat,
        p: _Pending,
        rkey: int | None,
        is_error: bool,
        time_ns: int,
    ) -> _Finding | None:
        warn_at = self.warn_after + 1 if is_error else self.warn_after
        level = self._level(st.count, warn_at)
        sure = self.sure_stop_after
        if (
            sure
            and self.stop_after
            and level == _WARN
            and not st.polls
            and st.count >= max(sure, warn_at)
            and st.start_epoch == s.epoch
            and st.first_pos >= s.run_pos
        ):
            # The same call, the same result, nothing changed since: no need to wait longer.
            level = _STOP
        signal = "repeat"
        if st.polls:
            elapsed = time_ns - st.first_ns
            budget = (
                _STOP
                if self.poll_stop_ns and elapsed >= self.poll_stop_ns
                else _WARN
                if elapsed >= self.poll_warn_ns
                else _NONE
            )
            if budget > level:
                level, signal = budget, "poll_budget"
        if level <= st.level:
            return None
        st.level, st.level_pos = level, st.last_pos
        label = self.label(p.tool, p.args)
        n = st.count + st.polls
        if signal == "poll_budget":
            reason = (
                f"{label} was polled {n} times over {(time_ns - st.first_ns) / 1e9:.0f} s "
                f"with the same result, past the "
                f"{(self.poll_stop_ns if level == _STOP else self.poll_warn_ns) / 1e9:.0f} s "
                f"polling budget"
            )
        else:
            what = "failed with the same error" if is_error else "returned the same result"
            reason = f"{label} {what} {n} times"
            if st.polls:
                reason += f" ({st.count} of them without waiting)"
        return _Finding(
            signal,
            label,
            st.count if signal == "repeat" else n,
            p.tool,
            level,
            _recent_ids(s, self._ring, st.first_pos, p.tool, p.ahash, rkey),
            reason,
        )

    def _same_result(
        self, s: _Repetitions, p: _Pending, rkey: int, call_id: str, pos: int
    ) -> _Finding | None:
        """Count a result the session had before (for these arguments or others) into its
        streak; the detection it completes, if any. Lock held."""
        key = (p.tool, rkey)
        entry = s.same[key]  # the hook made the entry when the result was first seen
        if isinstance(entry, _SameStat):
            sr = entry
        else:
            sr = s.same[key] = _SameStat(*entry)  # seen again: a streak (in the same place)
        if sr.epoch != s.epoch or pos - sr.last_pos > self.horizon:
            sr.start(p.ahash, s.epoch, pos, p.canonical)
            return None
        if sr.args != p.ahash:
            # Arguments come back when they were seen in the streak up to their digits and
            # case ("Draft v2 (round 1)" → "Draft v3 (round 2)" is the same message).
            seen = sr.seen
            if not seen:
                seen = sr.seen = {_loose(sr.first)}
            shape = _loose(p.canonical)
            sr.args, sr.changed = p.ahash, True
            if shape in seen:
                sr.recurred += 1
            else:
                sr.distinct += 1
                if len(seen) < _SAME_ARGS:
                    seen.add(shape)
        else:
            sr.recurred += 1
        sr.last_pos = pos
        # The same result for new arguments each time (empty, "OK", a fixed failure) is
        # constant feedback, not a loop: it counts once arguments come back as well.
        if not sr.recurred or not sr.changed:
            return None  # new arguments only: constant feedback; one only: a plain repeat
        calls = sr.distinct + sr.recurred
        level = self._level(calls, self.warn_after)
        if (
            level == _WARN
            and self.sure_stop_after
            and self.stop_after
            and sr.recurred >= 2
            and calls >= self.sure_stop_after
            and sr.first_pos >= s.run_pos
        ):
            level = _STOP  # calls came back twice with the same result, nothing changed since
        if level <= sr.level:
            return None
        sr.level = level
        label = self.label(p.tool, p.args)
        reason = (
            f"{p.tool} returned the same result {sr.distinct + sr.recurred} times in a "
            f"row of calls, for {sr.distinct} kinds of arguments that came back "
            f"{sr.recurred} times (the same up to digits and case), latest {label}"
        )
        ids = _recent_ids(s, self._ring, sr.first_pos, p.tool, False, rkey)
        return _Finding("same_result", label, sr.distinct + sr.recurred, p.tool, level, ids, reason)

    # -- cycles ----------------------------------------------------------------------------
    def _cycle(
        self,
        s: _Repetitions,
        op: _OpKey,
        call: tuple[str, Mapping[str, Any], str],
        pos: int,
        prev_pos: int,
    ) -> tuple[int, int] | None:
        """Put ``op`` into the ring and update the candidate periods with it; the cycle the
        tail is in, if any. Called when there is a candidate to extend or one to start (the
        op was seen within ``max_period`` steps, since the floor)."""
        ring, size, floor = s.ring, self._ring, s.floor
        idx = pos % size
        ring[idx] = op
        s.ring_calls[idx] = call
        cands: dict[int, int] = {}
        for period, run in s.cands.items():
            back = pos - period
            if back > floor and ring[back % size] == op:
                cands[period] = run + 1
        if prev_pos > floor:
            d = pos - prev_pos
            if d <= self.max_period and d not in cands:
                # The run may have started before d became a candidate: count it back.
                run, i, lowest = 1, pos - 1, max(floor, pos - size)
                while i - d > lowest and ring[i % size] == ring[(i - d) % size]:
                    run += 1
                    i -= 1
                cands[d] = run
        if len(cands) > _MAX_CANDIDATES:
            cands = dict(sorted(cands.items(), key=lambda kv: -kv[1])[:_MAX_CANDIDATES])
        s.cands = cands
        best = 0
        for period, run in cands.items():
            if run >= min(period, _LONG_CYCLE_STEPS) and (not best or period < best):
                best = period
        if best < 2:
            return None
        return best, cands[best]

    def _cycle_levels(self, period: int, one_run: bool = True) -> tuple[int, int]:
        """Cycles that warn and cycles that stop (0: never) for ``period``."""
        if period <= _SHORT_CYCLE and one_run:
            # Two passes of a short cycle within one run warn, three stop: unambiguous.
            return 2, 3 if self.stop_after else 0
        warn = 2
        stop = max(warn + 1, math.ceil(self.stop_after / period)) if self.stop_after else 0
        return warn, stop

    def _cycle_detection(self, s: _Repetitions, period: int, run: int, pos: int) -> _Finding | None:
        if s.cycle_period != period:
            s.cycle_period = period
            s.cycle_level = _NONE
            s.cycle_start = pos - period + 1
        cycles = (run + period) // period
        one_run = pos - run - period + 1 >= s.run_pos
        warn, stop = self._cycle_levels(period, one_run)
        if stop and (
            cycles >= stop
            or (period <= _SHORT_CYCLE and one_run and run >= period + _THIRD_PASS_STEPS)
        ):
            # A short cycle's third pass need not finish: two of its steps repeating the
            # two passes before, nothing changed since, is as sure (A B C D A B C D A B).
            level = _STOP
        elif cycles >= warn or (period > 4 and run >= min(period, _LONG_CYCLE_STEPS)):
            level = _WARN
        else:
            level = _NONE
        if level <= s.cycle_level:
            return None
        s.cycle_level = level
        size = self._ring
        # The block as first seen (A → B, not B → A), its latest full pass.
        first = pos - period + 1
        start = first + (s.cycle_start - first) % period
        if start > first:
            start -= period
        members = [s.ring[(start + i) % size] for i in range(period)]
        calls = [s.ring_calls[(start + i) % size] for i in range(period)]
        # A step of the cycle may already have been reported as a plain repeat while the
        # cycle was forming: that report was this escalation.
        began = pos - run - period
        reported = False
        for member in members:
            if member is None:
                continue
            stat = s.ops.get(member)
            if stat is None:
                continue
            if isinstance(stat, tuple):
                stat = s.ops[member] = _OpStat.first(*stat)
            if stat.level >= level:
                reported = reported or stat.level_pos > began
            else:
                stat.level, stat.level_pos = level, pos
        if reported:
            return None
        labels = [self.label(c[0], c[1]) for c in calls if c is not None]
        shown = labels if period <= _PATTERN_STEPS else [*labels[: _PATTERN_STEPS - 1], "…"]
        pattern = " → ".join(shown)
        tools = {c[0] for c in calls if c is not None}
        ids = [c[2] for c in calls if c is not None][-_MAX_IDS:]
        reason = (
            f"a {period}-step sequence of calls repeated with the same results "
            f"({run} steps in a row equal to the step {period} before)"
        )
        tool = tools.pop() if len(tools) == 1 else None
        return _Finding("cycle", pattern, max(cycles, 2), tool, level, ids, reason)
