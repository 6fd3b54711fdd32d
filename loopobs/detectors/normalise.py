"""Normalisation before hashing: cosmetic differences in arguments and results do not count.

Two calls that differ only in how a path is spelled, in whitespace, in a nonce
or a timestamp, or in a rising timeout are the same call; two results that
differ only in a server timestamp, a duration or a request id are the same
result. :class:`Normaliser` holds the rules (defaults plus per-tool
:class:`ToolNormalisation` overrides) and reports which rules changed a value,
so a detection can say *why* two calls were taken as equal.

Rules for arguments (applied by argument name, at any depth):

- ``ignore``: dropped (nonces, cache-busters, request ids, ``since``, the model's
  ``explanation`` of the call …);
- ``mask_numbers``: numeric value replaced by a placeholder (timeouts, retry
  counters, page numbers …); a masked page number is masked in the result too,
  so a page past the last one reads as the same empty page;
- ``paths`` (or, by default, any single-line string that looks like a path):
  ``./``, ``..``, doubled and trailing slashes resolved, absolute paths under
  one of ``path_roots`` made relative;
- ``free_text`` (queries): compared as a set of case-folded words without
  stop words and plural ``s``, so a reworded search is the same search;
- ``case_insensitive``: case-folded;
- every other single-line string: surrounding and repeated whitespace folded;
  ISO 8601 timestamps in any string, and numbers that read as epoch seconds or
  milliseconds, are masked.

Results: ISO 8601 dates and times, times of day, durations (``0.53s``,
``12 ms``), UUIDs, long hex ids and epoch timestamps are masked. Only the first
``max_result_chars`` characters are normalised; the rest is hashed as is.
"""

from __future__ import annotations

import io
import json.encoder
import os
import pickle
import posixpath
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from loopobs.contract.hashing import canonical_json, encode, text_key

__all__ = [
    "CALL_NARRATION",
    "DEFAULT_FREE_TEXT",
    "DEFAULT_IGNORE",
    "DEFAULT_MASK_NUMBERS",
    "DEFAULT_PATH_KEYS",
    "Normaliser",
    "ToolNormalisation",
    "clear_result_keys",
    "mask_dates",
    "mask_volatile",
]

CALL_NARRATION: Final = frozenset({"explanation", "rationale", "reasoning", "justification"})
"""Argument names of what the model says of why it makes a call (Cursor sends an
``explanation`` with every tool call): narration, never the operation, so part of
:data:`DEFAULT_IGNORE`, and of what a command call's key leaves out."""

DEFAULT_IGNORE: Final = frozenset(
    {
        "nonce",
        "cache_buster",
        "cachebuster",
        "cache_bust",
        "cb",
        "_",
        "_t",
        "ts",
        "timestamp",
        "now",
        "request_id",
        "requestid",
        "idempotency_key",
        "trace_id",
        "correlation_id",
        "since",
        "random",
        "rand",
        "salt",
        *CALL_NARRATION,
    }
)
"""Argument names dropped before hashing: they vary per call by design."""

DEFAULT_MASK_NUMBERS: Final = frozenset(
    {
        "timeout",
        "timeout_s",
        "timeout_ms",
        "timeout_seconds",
        "wait",
        "wait_s",
        "wait_ms",
        "wait_seconds",
        "delay",
        "delay_s",
        "backoff",
        "retry",
        "retries",
        "attempt",
        "attempts",
        "max_wait",
        "poll_interval",
        "interval",
        "page",
        "page_number",
        "pageno",
    }
)
"""Argument names whose numeric values are masked: budgets, retry counters, page numbers."""

_PAGE_KEYS: Final = frozenset({"page", "page_number", "pageno"})

DEFAULT_PATH_KEYS: Final = frozenset(
    {
        "path",
        "file",
        "filename",
        "file_path",
        "filepath",
        "dir",
        "directory",
        "folder",
        "cwd",
        "dest",
        "destination",
        "src",
        "source",
        "target_path",
    }
)
"""Argument names always treated as paths (other strings are, when they look like one)."""

DEFAULT_FREE_TEXT: Final = frozenset(
    {
        "query",
        "q",
        "search",
        "search_query",
        "question",
        "keywords",
        "terms",
        "topic",
    }
)
"""Argument names compared as a set of words: a reworded query is the same query."""

_STOP_WORDS: Final = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "how",
        "i",
        "in",
        "is",
        "it",
        "me",
        "of",
        "on",
        "or",
        "the",
        "to",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "with",
        "about",
        "can",
        "could",
        "should",
        "would",
        "my",
        "our",
        "this",
        "that",
        "these",
        "those",
        "find",
        "search",
        "show",
        "get",
        "look",
        "up",
        "please",
    ]
)

# One pass over the text for everything volatile; each alternative is a named
# group so the kinds that matched can be reported. The pattern starts with a
# character set (the first digit or hex letter, at a word start) so the engine
# scans for it quickly instead of trying every branch at every position; the
# branches then check what that first character was.
_TIME_BRANCH: Final = (
    r"(?P<time>\d{3}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d\d:?\d\d)?)?|\d?:\d\d:\d\d(?:[.,]\d+)?|(?<=1)[5-9]\d{8}(?:\d{3})?(?:\.\d+)?)"
)
_DURATION_BRANCH: Final = (
    r"(?P<duration>\d*(?:\.\d+)?\s?(?:ms|µs|us|ns|s|sec|secs|seconds?|mins?|minutes?"
    r"|h|hrs?|hours?))"
)
_VOLATILE = re.compile(
    r"[0-9a-fA-F](?<![\w.][0-9a-fA-F])(?:"
    rf"(?<=\d){_TIME_BRANCH}"
    rf"|(?<=\d){_DURATION_BRANCH}"
    r"|(?P<id>[0-9a-fA-F]{7}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|[0-9a-f]{15,})"
    r")(?!\w)"
)
# _VOLATILE without its id branch: led by an ASCII digit, so the engine tries it at digits
# only, not at every hex letter of a text. On a text that holds no id (see _may_hold_id)
# it matches exactly where _VOLATILE does.
_DIGIT_LED = re.compile(rf"[0-9](?<![\w.][0-9])(?:{_TIME_BRANCH}|{_DURATION_BRANCH})(?!\w)")


# Byte classes for the pre-scans of ASCII text, one translation for every check: an ASCII
# digit is "0", a hex letter "x", a letter a unit can start with ("ms", "us", "ns", "s",
# "h") "u", any other letter and "_" (the rest of what ``\w`` matches) "w", whitespace
# (what ``\s`` matches) a space; "-", ":" and "." stay; anything else is "#". From those
# classes, _HEXES gives the shape of ids: a hex digit or letter is "x", "-" stays, the rest
# is a space.
def _ascii_class(b: int) -> int:
    c = chr(b)
    if b >= 128:
        return ord("#")
    if c.isdigit():
        return ord("0")
    if c in "abcdefABCDEF":
        return ord("x")
    if c in "munsh":
        return ord("u")
    if c.isalpha() or c == "_":
        return ord("w")
    if c.isspace():
        return ord(" ")
    if c in "-:.":
        return b
    return ord("#")


_CLASSES: Final = bytes(_ascii_class(b) for b in range(256))
_HEXES: Final = bytes(
    ord("x") if b in b"0x" else b if b == ord("-") else ord(" ") for b in range(256)
)
# The same shape for any text's UTF-8 (its other bytes are spaces).
_HEX_CLASSES: Final = bytes(
    ord("x") if chr(b) in "0123456789abcdefABCDEF" else b if b == ord("-") else ord(" ")
    for b in range(256)
)
_UUID_CLASSES: Final = b"xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
_HEX_RUN: Final = b"x" * 15
_HEX_RUN_16: Final = b"x" * 16
_TEN_HEX: Final = b"x" * 10
_DIGIT_LED_NEEDS: Final = re.compile(rb"0(?:u| u|000-00-00|:00:00)")
"""In _CLASSES, what a date, a time of day or a duration holds: a digit before a unit
("12ms", "0.5 s"), a date, a time of day. A literal first byte: the engine looks for it at
memchr speed."""
_DIGIT_LED_AT: Final = re.compile(rb"0(?<![0xuw.]0)(?=0*+(?:\.0++)? ?u|000-00-00|0?:00:00|0{9})")
"""In _CLASSES, every place a match of _DIGIT_LED can start: a digit after no word
character and no ".", then a date, a time of day, ten digits (an epoch timestamp) or a
number before a unit ("12ms", "0.5 s"). Zero-width after its digit, so that every such
place is found, overlapping ones too. A literal first byte: the engine looks for it at
memchr speed."""


def _may_hold_id(data: bytes) -> bool:
    """Whether text (its UTF-8) has what an id of _VOLATILE is, in classes: a UUID's shape
    or 15 hex characters in a row. ``False`` is exact: no id matches."""
    classes = data.translate(_HEX_CLASSES)
    return classes.find(_HEX_RUN) >= 0 or classes.find(_UUID_CLASSES) >= 0


def _may_match(classes: bytes, hexes: bytes) -> bool:
    """Whether _VOLATILE can match an ASCII text, ``classes`` being its _CLASSES and
    ``hexes`` their _HEXES. ``False`` is exact: a date, a time of day or a duration has
    what _DIGIT_LED_NEEDS finds; an epoch timestamp, a UUID and a hex id have ten hex
    characters in a row (digits are hex)."""
    # find(), not ``in``: with bytes, ``in`` first tries its operand as an int, and the
    # exception it clears costs more than the search.
    return _DIGIT_LED_NEEDS.search(classes) is not None or hexes.find(_TEN_HEX) >= 0


def _masked(text: str) -> str:
    """``text`` with every match of _VOLATILE replaced by ``<v>``; ``text`` itself (the same
    object) when nothing matched, or when it holds no digit (everything masked holds one).

    Most results hold digits but nothing volatile: cheap, exact pre-scans (translations
    to byte classes and searches there) tell when nothing can match; when something can,
    in ASCII text, the pattern (the digit-led one when no id can match) is tried only
    where the classes say a match can start.
    """
    if text.isascii():
        classes = text.encode("ascii").translate(_CLASSES)
        if 48 not in classes:  # no digit
            return text
        hexes = classes.translate(_HEXES)
        if _DIGIT_LED_NEEDS.search(classes) is None and hexes.find(_TEN_HEX) < 0:
            return text  # see _may_match
        ids = _id_starts(hexes)
        if ids:
            starts = {m.start() for m in _DIGIT_LED_AT.finditer(classes)}
            starts.update(ids)
            return _masked_at(text, sorted(starts), _VOLATILE.match)
        return _digit_led_masked(text, classes)
    if _DIGIT.search(text) is None:
        return text
    if _may_hold_id(text.encode("utf-8", "surrogatepass")):
        return _VOLATILE.sub("<v>", text)
    return _DIGIT_LED.sub("<v>", text)


def _digit_led_masked(text: str, classes: bytes) -> str:
    """``_DIGIT_LED.sub("<v>", text)`` for ASCII ``text`` (``classes`` its _CLASSES), the
    pattern tried only where _DIGIT_LED_AT says a match can start; ``text`` itself when
    nothing matched."""
    found = _DIGIT_LED_AT.search(classes)
    if found is None:
        return text
    starts = (m.start() for m in _DIGIT_LED_AT.finditer(classes, found.start()))
    return _masked_at(text, starts, _DIGIT_LED.match)


def _id_starts(hexes: bytes) -> list[int]:
    """Every place an id of _VOLATILE can start in an ASCII text, ``hexes`` being its
    _HEXES: where a run of 16 hex characters or more starts (no id starts inside a run:
    a hex character before it is a word character), and every UUID's shape."""
    starts: list[int] = []
    at = hexes.find(_HEX_RUN_16)
    while at >= 0:
        starts.append(at)  # searched for from outside a run: where the run starts
        ends = [e for e in (hexes.find(b" ", at), hexes.find(b"-", at)) if e >= 0]
        if not ends:
            break
        at = hexes.find(_HEX_RUN_16, min(ends))
    at = hexes.find(_UUID_CLASSES) if 45 in hexes else -1
    while at >= 0:
        starts.append(at)
        at = hexes.find(_UUID_CLASSES, at + 1)
    return starts


def _masked_at(
    text: str, starts: Iterable[int], match: Callable[[str, int], re.Match[str] | None]
) -> str:
    """``pattern.sub("<v>", text)``, ``match`` being the pattern's ``match`` and
    ``starts`` (ascending) every place a match can start; ``text`` itself when nothing
    matched.

    Exact: sub() takes the leftmost match, then the next from its end; trying the places
    in order, from the last match's end on, finds the same matches, as every place a match
    can start is among them (``match`` at a position sees the text before it, for the
    look-behind, as a search does)."""
    parts: list[str] = []
    end = 0
    for start in starts:
        if start < end:
            continue
        m = match(text, start)
        if m is not None:
            parts.append(text[end:start])
            parts.append("<v>")
            end = m.end()
    if not parts:
        return text
    parts.append(text[end:])
    return "".join(parts)


_JSON_STRING: Final[Callable[[str], str]] = json.encoder.encode_basestring
"""The string escape of :func:`~loopobs.contract.hashing.encode` (its encoder's, with
``ensure_ascii`` off)."""
_PLACEHOLDER: Final = {"time": "<time>", "duration": "<duration>", "id": "<id>"}
_SPACES = re.compile(r"\s+")
_DIGIT = re.compile(r"\d")
_BLANKS: Final = frozenset(" \t\r\f\v")
_NOTHING: Final[frozenset[str]] = frozenset()
# A number written as text, with an optional unit: "30", "1.5 min", "30s".
_NUMERIC_TEXT = re.compile(r"[\d.,:/\s]*\d[\d.,:/\s]*[a-zA-Zµ]{0,7}\s*")
_QUERY_WORD = re.compile(r"<\w+>|\w+")  # placeholders (<time>) stay whole
# For ASCII text's bytes: every character \w does not match (all but letters, digits, "_")
# a space.
_NOT_WORD: Final = bytes(
    b if chr(b).isascii() and (chr(b).isalnum() or b == ord("_")) else ord(" ") for b in range(256)
)
_TIMESTAMP_TEXT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?"
)


def _placeholder(m: re.Match[str]) -> str:
    return _PLACEHOLDER[m.lastgroup or "time"]


def mask_volatile(text: str, kinds: set[str] | None = None) -> str:
    """``text`` with timestamps, durations and ids replaced by placeholders.

    The names of the kinds that were masked (``time``, ``duration``, ``id``) are
    added to ``kinds`` when given.
    """
    if _VOLATILE.search(text) is None:
        return text
    if kinds is None:
        return _VOLATILE.sub(_placeholder, text)

    def repl(m: re.Match[str]) -> str:
        kind = m.lastgroup or "time"
        if kinds is not None:
            kinds.add(kind)
        return _PLACEHOLDER[kind]

    return _VOLATILE.sub(repl, text)


# The time branch of _VOLATILE alone, led by a digit: a scan for dates stops at digits
# only, not at every hex letter of a text.
_DATES = re.compile(
    r"\d(?<![\w.]\d)(?:\d{3}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?"
    r"(?:Z|[+-]\d\d:?\d\d)?)?|\d?:\d\d:\d\d(?:[.,]\d+)?|(?<=1)[5-9]\d{8}(?:\d{3})?(?:\.\d+)?)"
    r"(?!\w)"
)


def mask_dates(text: str) -> str:
    """``text`` with ISO 8601 dates and times, times of day and epoch timestamps masked."""
    return _DATES.sub("<time>", text)


def _is_epoch(value: float) -> bool:
    return 1.5e9 <= value < 2e9 or 1.5e12 <= value < 2e12


def _looks_like_path(value: str) -> bool:
    if not value or len(value) > 512 or "\n" in value or " " in value or "://" in value:
        return False
    return value[0] in "./~" or "/" in value


@dataclass(frozen=True, slots=True)
class ToolNormalisation:
    """Argument rules for one tool, replacing the :class:`Normaliser` defaults it names.

    Each set holds argument names (case-insensitive); ``None`` keeps the default.
    ``case_insensitive=True`` folds the case of every string argument.
    ``normalise_results=False`` hashes the tool's results exactly.
    """

    ignore: frozenset[str] | None = None
    mask_numbers: frozenset[str] | None = None
    paths: frozenset[str] | None = None
    free_text: frozenset[str] | None = None
    case_insensitive: frozenset[str] | bool = False
    normalise_results: bool = True


@dataclass(frozen=True, slots=True)
class _Rules:
    ignore: frozenset[str]
    mask_numbers: frozenset[str]
    paths: frozenset[str]
    free_text: frozenset[str]
    case_all: bool
    case_keys: frozenset[str]
    results: bool
    special: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Names with a rule of their own, checked once per string argument.
        object.__setattr__(self, "special", self.mask_numbers | self.free_text | self.case_keys)


_ArgumentsKey = tuple[int, frozenset[str], str | None, str]
"""What :meth:`Normaliser.arguments_key` returns (immutable: it may be handed out again)."""
_ARGUMENT_KEYS_HELD: Final = 1024
_ARGUMENT_CHARS_HELD: Final = 2048
"""Flat string arguments are remembered when their values are this long in all, at most."""
_ARGUMENT_BYTES_HELD: Final = 4096
"""Other plain arguments are remembered when they pickle to this many bytes, at most."""
_ARGUMENT_KEYS: Final[dict[tuple[object, str, Any], _ArgumentsKey]] = {}
"""(the normaliser's rules, tool, the arguments frozen) → :meth:`Normaliser.arguments_key`."""
_RULE_SETS_HELD: Final = 64
_RULE_SETS: Final[dict[tuple[Any, ...], object]] = {}
"""Every rule set a normaliser was made with → one token for it (equal rules, one token)."""


def _held_key(
    token: object, tool: str, arguments: Mapping[str, Any]
) -> tuple[object, str, Any] | None:
    """The key ``arguments`` are remembered under: the rules' token, the tool and the
    arguments frozen, when they are a dict of plain JSON values (a dict of strings to
    strings as its items), not long in all; else ``None`` (not remembered)."""
    if type(arguments) is not dict:
        return None
    size = 0
    for k, v in arguments.items():
        if type(k) is not str or type(v) is not str:
            break
        size += len(v)
    else:
        if size > _ARGUMENT_CHARS_HELD:
            return None
        return token, tool, tuple(arguments.items())
    frozen = _frozen(arguments)
    return None if frozen is None else (token, tool, frozen)


def _encoded(tree: dict[str, Any]) -> str:
    """:func:`~loopobs.contract.hashing.encode` of a tree :meth:`Normaliser._tree` made.

    A single string argument (a query, an id, a thought), the common set, is written out
    with the encoder's own string escape: the same text, without the C encoder's set-up."""
    if len(tree) == 1:
        for k, v in tree.items():
            if type(v) is str:
                return "{" + _JSON_STRING(k) + ":" + _JSON_STRING(v) + "}"
    return encode(tree)


class _Pickler(pickle.Pickler):
    """Pickles plain values only: exact dicts, lists, tuples, str, int, float, bool and
    ``None`` (and sets and bytes) are pickled in C without this hook; every other object
    (a subclass, another Mapping, an object) reaches it and is refused, unread."""

    def reducer_override(self, obj: Any) -> Any:
        raise _NotPlain


def _frozen(arguments: dict[Any, Any]) -> bytes | None:
    """``arguments`` pickled, when they are plain and short: equal bytes only for equal
    values of equal types in the same order (``1``, ``1.0`` and ``True`` apart; ``0.0`` and
    ``-0.0`` apart; the first masked page is the one reported), no memo (equal strings
    written out each time, whatever their identity); else ``None``."""
    out = io.BytesIO()
    pickler = _Pickler(out, 5)
    pickler.fast = True
    try:
        pickler.dump(arguments)
    except (_NotPlain, ValueError, RecursionError, pickle.PicklingError):
        return None  # not plain, or cyclic (refused in fast mode), or too deep
    data = out.getvalue()
    return data if len(data) <= _ARGUMENT_BYTES_HELD else None


class _NotPlain(Exception):
    """Arguments hold a value that is not plain JSON (a subclass, another Mapping, an
    object): they are walked the general way."""


def _masked_number(
    value: float, key: str, rules: _Rules, applied: set[str], page: list[str]
) -> str | None:
    """The placeholder of a number under argument name ``key``: ``<n>`` where the rules
    mask its numbers (a page number is kept in ``page``), ``<time>`` for an epoch
    timestamp; ``None`` when the number stays (the mask's kind is added to ``applied``)."""
    if key in rules.mask_numbers:
        applied.add("number")
        if key in _PAGE_KEYS:
            page.append(
                str(int(value)) if type(value) is float and value.is_integer() else str(value)
            )
        return "<n>"
    if _is_epoch(value):
        applied.add("time")
        return "<time>"
    return None


def _lower(names: Iterable[str]) -> frozenset[str]:
    return frozenset(n.lower() for n in names)


class Normaliser:
    """The normalisation rules a :class:`~loopobs.RepetitionDetector` applies before hashing.

    Its rules are immutable once made (the detectors share it between threads). The keys
    of the latest arguments given to any normaliser are remembered process-wide, by the
    rules they were made with (a bounded cache whose every operation is one atomic dict
    call).

    Args:
        ignore: argument names dropped.
        mask_numbers: argument names whose numbers are masked.
        paths: argument names always treated as paths.
        free_text: argument names compared as a set of words.
        path_roots: absolute directories that relative paths are relative to
            (an agent's workspace): ``/work/repo/src/a.py`` equals ``src/a.py``. ``None``
            (the default) means the process's working directory when the normaliser
            is made, where tools resolve relative paths unless told otherwise.
        tools: per-tool overrides.
        max_result_chars: how much of a result is normalised (the rest is hashed as is).
        enabled: ``False`` hashes arguments (canonical JSON) and results exactly.
    """

    __slots__ = (
        "_config",
        "_default",
        "_per_tool",
        "_roots",
        "enabled",
        "free_text",
        "ignore",
        "mask_numbers",
        "max_result_chars",
        "path_roots",
        "paths",
        "tools",
    )

    def __init__(
        self,
        *,
        ignore: Iterable[str] = DEFAULT_IGNORE,
        mask_numbers: Iterable[str] = DEFAULT_MASK_NUMBERS,
        paths: Iterable[str] = DEFAULT_PATH_KEYS,
        free_text: Iterable[str] = DEFAULT_FREE_TEXT,
        path_roots: Iterable[str] | None = None,
        tools: Mapping[str, ToolNormalisation] | None = None,
        max_result_chars: int = 16_384,
        enabled: bool = True,
    ) -> None:
        self.ignore = _lower(ignore)
        self.mask_numbers = _lower(mask_numbers)
        self.paths = _lower(paths)
        self.free_text = _lower(free_text)
        self.path_roots = tuple(path_roots) if path_roots is not None else None
        self.tools: Mapping[str, ToolNormalisation] = dict(tools or {})
        self.max_result_chars = max_result_chars
        self.enabled = enabled
        default = _Rules(
            self.ignore, self.mask_numbers, self.paths, self.free_text, False, frozenset(), True
        )
        per_tool = {}
        for name, t in self.tools.items():
            case_all = t.case_insensitive is True
            case_keys = (
                frozenset() if isinstance(t.case_insensitive, bool) else _lower(t.case_insensitive)
            )
            per_tool[name] = _Rules(
                default.ignore if t.ignore is None else _lower(t.ignore),
                default.mask_numbers if t.mask_numbers is None else _lower(t.mask_numbers),
                default.paths if t.paths is None else _lower(t.paths),
                default.free_text if t.free_text is None else _lower(t.free_text),
                case_all,
                case_keys,
                t.normalise_results,
            )
        given = self.path_roots if self.path_roots is not None else (os.getcwd(),)
        self._default = default
        self._per_tool = per_tool
        self._roots = tuple(
            sorted(
                (
                    posixpath.normpath(r).rstrip("/") + "/"
                    for r in given
                    if r.startswith("/") and r.rstrip("/")
                ),
                key=len,
                reverse=True,
            )
        )
        # Keys are remembered process-wide, by the rules they depend on.
        rules = (type(self), enabled, default, tuple(sorted(per_tool.items())), self._roots)
        token = _RULE_SETS.get(rules)
        if token is None:
            token = object()
            if len(_RULE_SETS) < _RULE_SETS_HELD:
                token = _RULE_SETS.setdefault(rules, token)
        self._config = token

    def __repr__(self) -> str:
        return (
            f"Normaliser(path_roots={self.path_roots!r}, tools={sorted(self.tools)!r}, "
            f"enabled={self.enabled})"
        )

    def _rules(self, tool: str) -> _Rules:
        return self._per_tool.get(tool, self._default)

    # -- arguments -------------------------------------------------------------------------
    def arguments_key(self, tool: str, arguments: Mapping[str, Any]) -> _ArgumentsKey:
        """The hash of ``arguments`` after normalisation, the rules that changed them,
        the masked page number's text (if any, to be masked in the result as well) and
        the normalised arguments' canonical JSON.

        The hash is a key (:func:`~loopobs.contract.hashing.text_key` of the canonical
        JSON, the same in every process), never recorded:
        :func:`~loopobs.contract.hashing.stable_hash64` of the text is the stable form,
        equal to :func:`~loopobs.contract.hashing.arguments_hash` when no rule changed
        anything.

        Arguments of plain JSON values, 2,048 characters (and list and dict items) at
        most in all, are remembered process-wide for every normaliser with the same rules:
        1,024 sets at most, forgotten all at once when that many are held
        (:func:`clear_result_keys` forgets them too). A call made again, the case that
        matters in a loop, or the same call in another session, is not normalised again.
        """
        held = _held_key(self._config, tool, arguments)
        if held is None:
            return self._arguments_key(tool, arguments)
        found = _ARGUMENT_KEYS.get(held)
        if found is None:
            found = self._arguments_key(tool, arguments)
            if len(_ARGUMENT_KEYS) >= _ARGUMENT_KEYS_HELD:
                _ARGUMENT_KEYS.clear()
            _ARGUMENT_KEYS[held] = found
        return found

    def _arguments_key(self, tool: str, arguments: Mapping[str, Any]) -> _ArgumentsKey:
        """:meth:`arguments_key`, computed."""
        if not self.enabled:
            text = canonical_json(arguments)
            return text_key(text), _NOTHING, None, text
        applied: set[str] = set()
        page: list[str] = []
        rules = self._per_tool.get(tool, self._default)
        if type(arguments) is dict:
            try:
                # Plain JSON (what a model sends): walked and encoded as it is.
                text = _encoded(self._tree(arguments, rules, applied, page))
            except _NotPlain:
                applied.clear()
                page.clear()
                text = canonical_json(self._walk(arguments, rules, applied, page, None))
        else:
            text = canonical_json(self._walk(arguments, rules, applied, page, None))
        # A key the same in every process (a session's detector state moves between
        # workers); the stable digest of ``text`` is computed for a detection's event.
        return (
            text_key(text),
            frozenset(applied) if applied else _NOTHING,
            page[0] if page else None,
            text,
        )

    @staticmethod
    def shape_key(canonical: str) -> int:  # a key, like arguments_key's
        """The hash of normalised arguments (their canonical JSON, from :meth:`arguments_key`)
        with standalone numbers masked too.

        Two writes with the same shape differ only in counters or figures
        ("revision 3" → "revision 4", ``"retries": 2``); numbers inside
        identifiers and paths (``job/3``, ``v2``) still tell writes apart.
        """
        return text_key(_NUMBER_TOKEN.sub("<n>", canonical))

    def _tree(
        self, value: dict[Any, Any], rules: _Rules, applied: set[str], page: list[str]
    ) -> dict[str, Any]:
        """:meth:`_walk` of a dict of plain JSON values, its integral floats (below 2**53)
        made ints: a value :func:`~loopobs.contract.hashing.canonical_json` would encode as
        it is. Raises :class:`_NotPlain` at a value not exactly a dict, list, tuple, str,
        int, float, bool or ``None`` (what was added to ``applied`` and ``page`` by then
        is partial)."""
        out: dict[str, Any] = {}
        ignore = rules.ignore
        for k, v in value.items():
            if type(k) is not str:
                k = str(k)  # noqa: PLW2901
            name = k.lower()
            if name in ignore:
                applied.add("volatile")
                continue
            t = type(v)
            if t is str:
                out[k] = self._string(v, rules, applied, name)
            elif t is bool or v is None:
                out[k] = v
            else:
                out[k] = self._item(v, rules, applied, page, name)
        return out

    def _item(self, value: Any, rules: _Rules, applied: set[str], page: list[str], key: str) -> Any:
        """:meth:`_tree` of one value under argument name ``key``."""
        t = type(value)
        if t is str:
            return self._string(value, rules, applied, key)
        if t is dict:
            return self._tree(value, rules, applied, page)
        if t is list or t is tuple:
            return [self._item(v, rules, applied, page, key) for v in value]
        if t is int or t is float:
            masked = _masked_number(value, key, rules, applied, page)
            if masked is not None:
                return masked
            if t is float and value.is_integer() and abs(value) < 2**53:
                return int(value)
            return value
        if t is bool or value is None:
            return value
        raise _NotPlain

    def _walk(
        self, value: Any, rules: _Rules, applied: set[str], page: list[str], key: str | None
    ) -> Any:
        t = type(value)
        if t is dict or isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                name = str(k).lower()
                if name in rules.ignore:
                    applied.add("volatile")
                    continue
                out[str(k)] = self._walk(v, rules, applied, page, name)
            return out
        if t is list or t is tuple:
            return [self._walk(v, rules, applied, page, key) for v in value]
        if t is str:
            return self._string(value, rules, applied, key)
        if (t is int or t is float) and key is not None:
            masked = _masked_number(value, key, rules, applied, page)
            if masked is not None:
                return masked
        return value

    def _string(self, value: str, rules: _Rules, applied: set[str], key: str | None) -> str:
        special = key is not None and key in rules.special
        if not special and not rules.case_all and (value.isalnum() or value.isidentifier()):
            # Letters, digits and "_" only (an id, a name, a code) under a name with no rule
            # of its own: nothing to fold, mask or case-fold (no blank, path or "-" in it).
            return value
        if special:
            if key in rules.free_text:
                # Masked whole (dates span words) and word by word ("0h" after a ".").
                # A word of letters only, shorter than a hex id, has nothing to mask.
                words = sorted(_query_words(value.casefold()))
                # "|" between words: a space could join "0" and "h" into a duration.
                folded = "|".join(words) if words else _SPACES.sub(" ", value.strip())
                if folded != value:
                    applied.add("words")
                return folded
            if key in rules.case_keys:
                folded = value.casefold()
                if folded != value:
                    applied.add("case")
                    value = folded
        if not value:
            return value
        # Letters, digits and "_" only (an id, a name, a code): no whitespace and no path
        # to fold, found by two scans in C rather than the eight checks below.
        if (
            not (value.isalnum() or value.isidentifier())
            and ("\n" not in value)
            and (
                value[0] in _BLANKS
                or value[-1] in _BLANKS
                or "  " in value
                or "\t" in value
                or value[0] in "/."
                or "./" in value
                or "//" in value
                or value[-1] == "/"
            )
        ):
            # Folding whitespace and resolving a path can each expose work for the other
            # ("a/ ./" → "a/ " → "a/" → "a"): repeat to a fixpoint.
            for _ in range(8):  # each pass shortens the text; 8 is far more than needed
                folded = self._fold_line(value, rules, applied, key)
                if folded is value:
                    break
                value = folded
                if not value:
                    return value
        if special and key in rules.mask_numbers and _NUMERIC_TEXT.fullmatch(value):
            applied.add("number")
            return "<n>"
        if rules.case_all:
            folded = value.casefold()
            if folded != value:
                applied.add("case")
                value = folded
        if "-" in value:
            masked = _timestamps_masked(value)
            if masked != value:
                applied.add("time")
                value = masked
        return value

    def _fold_line(self, value: str, rules: _Rules, applied: set[str], key: str | None) -> str:
        """One pass of whitespace and path folding over a non-empty single-line string;
        ``value`` itself (the same object) when nothing changed."""
        if value[0] in _BLANKS or value[-1] in _BLANKS or "  " in value or "\t" in value:
            folded = _SPACES.sub(" ", value.strip())
            applied.add("whitespace")
            return folded if folded != value else value
        # Only these spellings can change under normpath or a root.
        if value[0] in "/." or "./" in value or "//" in value or value[-1] == "/":
            return self._maybe_path(value, rules, applied, key)
        return value

    def _maybe_path(self, value: str, rules: _Rules, applied: set[str], key: str | None) -> str:
        if not ((key is not None and key in rules.paths) or _looks_like_path(value)):
            return value
        path = self._path(value)
        if path != value:
            applied.add("path")
            return path
        return value

    def _path(self, value: str) -> str:
        if not value or "://" in value:
            return value
        path = posixpath.normpath(value)
        if path.startswith("/"):
            for root in self._roots:
                if path.startswith(root) or path + "/" == root:
                    path = path[len(root) :] or "."
                    break
        return path

    # -- results ---------------------------------------------------------------------------
    def result_text(self, tool: str, text: str, page: str | None) -> str:
        """``text`` with volatile parts masked (and ``page`` where the call masked it).

        Returns ``text`` itself (the same object) when nothing was masked.
        """
        if not self.enabled or not self._rules(tool).results:
            return text
        return _masked_result(text, page, self.max_result_chars)

    def result_key(self, tool: str, text: str, raw: int, page: str | None) -> int:
        """A key (the same in every process) of ``text`` as :meth:`result_text` masks
        it, ``raw`` being its :func:`~loopobs.contract.hashing.result_hash`: ``raw``
        itself when nothing is masked, else the masked text's
        :func:`~loopobs.contract.hashing.text_key`.

        The masks depend on the text (and ``page``) alone, so keys are remembered by
        ``raw`` process-wide, for every normaliser: at most 4,096 of them, forgotten all
        at once when that many are held.
        """
        if not self.enabled or not self._rules(tool).results:
            return raw
        key = (raw, page, self.max_result_chars)
        found = _RESULT_KEYS.get(key)
        if found is None:
            masked = _masked_result(text, page, self.max_result_chars)
            found = raw if masked is text else text_key(masked)
            if len(_RESULT_KEYS) >= _RESULT_KEYS_HELD:
                _RESULT_KEYS.clear()
            _RESULT_KEYS[key] = found
        return found

    def result_kinds(self, tool: str, text: str, page: str | None) -> set[str]:
        """What :meth:`result_text` masks in ``text``: ``result:time``, ``result:page`` …"""
        kinds: set[str] = set()
        if not self.enabled or not self._rules(tool).results:
            return kinds
        head = text[: self.max_result_chars]
        mask_volatile(head, kinds)
        if page is not None and re.search(rf"(?<![\w.]){re.escape(page)}(?![\w.])", head):
            kinds.add("page")
        return {f"result:{k}" for k in kinds}


def _masked_result(text: str, page: str | None, limit: int) -> str:
    """:meth:`Normaliser.result_text` of a tool whose results are normalised, ``limit``
    characters of them: ``text`` itself when nothing was masked."""
    head = text if len(text) <= limit else text[:limit]
    masked = _masked(head)
    if page is not None and page in masked:
        masked = re.sub(rf"(?<![\w.]){re.escape(page)}(?![\w.])", "<n>", masked)
    if masked is head or masked == head:
        return text
    return masked if head is text else masked + text[limit:]


_RESULT_KEYS_HELD: Final = 4096
_RESULT_KEYS: Final[dict[tuple[int, str | None, int], int]] = {}
"""(raw result hash, masked page, characters normalised) → :meth:`Normaliser.result_key`."""


def clear_result_keys() -> None:
    """Forget the remembered result keys and argument keys (a benchmark's first sight of
    every result and every set of arguments)."""
    _RESULT_KEYS.clear()
    _ARGUMENT_KEYS.clear()


_NUMBER_TOKEN = re.compile(r"(?<![\w./\-])\d+(?:\.\d+)?(?![\w/\-])")


def _query_words(low: str) -> set[str]:
    """The words a case-folded query is compared by: volatile parts masked (the whole
    text, then each word), stop words dropped, a plural ``s`` cut."""
    if low.isascii() and "<" not in low:
        data = low.encode("ascii")
        classes = data.translate(_CLASSES)
        if not _may_match(classes, classes.translate(_HEXES)):
            # Nothing to mask in the whole text, and no placeholder in it: its words are
            # the runs of ASCII word characters, and none has anything to mask either (what
            # a match needs, in classes, would be in the whole text's).
            return {
                _stem(w)
                for w in data.translate(_NOT_WORD).decode("ascii").split()
                if w not in _STOP_WORDS
            }
    return {
        _stem(w if w.isalpha() and len(w) < 15 else mask_volatile(w))
        for w in _QUERY_WORD.findall(mask_volatile(low))
        if w not in _STOP_WORDS
    }


def _timestamps_masked(value: str) -> str:
    """``mask_volatile(value)`` when ``value`` holds an ISO 8601 date (_TIMESTAMP_TEXT finds
    one), else ``value`` itself (the same object)."""
    if value.isascii():
        classes = value.encode("ascii").translate(_CLASSES)
        if classes == b"0000-00-00":
            # A date alone (the common argument): _VOLATILE's time branch matches it whole.
            return "<time>"
        if classes.find(b"0000-00-00") < 0:
            return value
    elif _TIMESTAMP_TEXT.search(value) is None:
        return value
    return mask_volatile(value)


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word
