"""The normaliser's fast paths give exactly what its general (slow) paths give: masking a
result, the words of a query, the timestamp check, plain JSON arguments walked directly,
and remembered argument keys. The references are kept here, written the general way."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loopobs.contract.hashing import canonical_json, encode, result_hash, text_key
from loopobs.detectors import Normaliser, ToolNormalisation
from loopobs.detectors import normalise as N
from tests._real_trajectories import needs_real_trajectories, real_calls

_ALPHABET = "0123456789\u0663abcdefABCDEFmsunhirTZ-:._,+ <>/\t\n\x1c\u00a0µé"
_PIECES = [
    "2024-05-01T10:00:00Z",
    "2024-05-01",
    "1234-56-78s",
    "12:30:45",
    "9:05:00.5",
    "1712345678",
    "1712345678901.5",
    "0.53s",
    "12 ms",
    "3µs",
    "5 minutes",
    "10 hours",
    "2.5\u2003h",
    "550e8400-e29b-41d4-a716-446655440000",
    "deadbeefcafe0123",
    "deadbeefcafebabe",
    "0123456789",
    "3 passed",
    "line 42:",
    "v1.2",
    "x.0h",
    "<time>",
    "<5ms>",
    "abc",
    "tv_series",
    "queries",
    "class",
    " ",
    "\n",
    "-",
    ":",
    ".",
    "_",
    "é",
]
_TEXTS = st.one_of(
    st.text(alphabet=_ALPHABET, max_size=120),
    st.lists(st.sampled_from(_PIECES + list(_ALPHABET)), max_size=16).map("".join),
)


def _reference_masked(text: str) -> str:
    """What _masked is: the whole pattern, on a text with a digit."""
    return N._VOLATILE.sub("<v>", text) if N._DIGIT.search(text) else text


def _reference_query_words(low: str) -> set[str]:
    return {
        N._stem(w if w.isalpha() and len(w) < 15 else N.mask_volatile(w))
        for w in N._QUERY_WORD.findall(N.mask_volatile(low))
        if w not in N._STOP_WORDS
    }


def _reference_arguments_key(
    n: Normaliser, tool: str, arguments: Mapping[str, Any]
) -> tuple[int, frozenset[str], str | None, str]:
    """:meth:`Normaliser.arguments_key` the general way: every value through ``_walk``,
    then canonical JSON."""
    if not n.enabled:
        text = canonical_json(arguments)
        return text_key(text), frozenset(), None, text
    applied: set[str] = set()
    page: list[str] = []
    rules = n._rules(tool)
    text = canonical_json(n._walk(arguments, rules, applied, page, None))
    return text_key(text), frozenset(applied), page[0] if page else None, text


def _check_text(text: str) -> None:
    assert N._masked(text) == _reference_masked(text)
    if text.isascii():
        classes = text.encode("ascii").translate(N._CLASSES)
        assert N._digit_led_masked(text, classes) == N._DIGIT_LED.sub("<v>", text)
        hexes = classes.translate(N._HEXES)
        starts = {m.start() for m in N._DIGIT_LED_AT.finditer(classes)}
        starts.update(N._id_starts(hexes))
        assert N._masked_at(text, sorted(starts), N._VOLATILE.match) == N._VOLATILE.sub("<v>", text)
        if not N._may_match(classes, hexes):
            assert N._VOLATILE.search(text) is None
    low = text.casefold()
    assert N._query_words(low) == _reference_query_words(low)
    expected = N.mask_volatile(text) if N._TIMESTAMP_TEXT.search(text) else text
    assert N._timestamps_masked(text) == expected


@settings(deadline=None, max_examples=1500)
@given(_TEXTS)
def test_the_fast_masking_and_word_paths_are_the_general_ones(text: str) -> None:
    """Masking by byte classes (where a digit-led match can start), the words of a query
    split by translation, and the timestamps of a string argument masked, on text of the
    characters that matter."""
    _check_text(text)


@settings(deadline=None, max_examples=300)
@given(_TEXTS, st.sampled_from([None, "2", "10"]), st.sampled_from([16_384, 8]))
def test_result_text_and_key_are_the_general_ones(text: str, page: str | None, limit: int) -> None:
    """result_text and result_key (remembered or not) against the masking written out."""
    n = Normaliser(max_result_chars=limit)
    head = text[:limit]
    masked = _reference_masked(head)
    if page is not None and page in masked:
        import re

        masked = re.sub(rf"(?<![\w.]){re.escape(page)}(?![\w.])", "<n>", masked)
    expected = text if masked == head else masked + text[limit:]
    assert n.result_text("t", text, page) == expected
    raw = result_hash(text) or 0
    key = raw if expected == text else text_key(expected)
    N.clear_result_keys()
    assert n.result_key("t", text, raw, page) == key
    assert n.result_key("t", text, raw, page) == key


@settings(deadline=None, max_examples=500)
@given(
    st.one_of(_TEXTS, st.text(), st.sampled_from(["", '"', "\\", "\x00", "\ud800", "\u2028"])),
    st.one_of(_TEXTS, st.text(), st.sampled_from(["", '"', "\\", "\x7f", "\udfff", "é"])),
)
def test_one_string_argument_is_encoded_as_the_encoder_does(key: str, value: str) -> None:
    """The single string argument written out is the encoder's text of it."""
    assert N._encoded({key: value}) == encode({key: value})
    assert N._encoded({key: [value]}) == encode({key: [value]})


class _Text(str):
    pass


class _Mapping(collections.UserDict):  # type: ignore[type-arg]
    pass


class _Thing:
    def __str__(self) -> str:
        return "a thing"


_NAMES = st.sampled_from(
    [
        "query",
        "q",
        "page",
        "pageno",
        "timeout",
        "path",
        "file",
        "nonce",
        "id",
        "date",
        "Name",
        "command",
        "old_str",
    ]
)
_LEAVES = st.one_of(
    _TEXTS,
    st.sampled_from(["./src//a.py", "/tmp/x/../y/", " a  b ", "a\tb", "HAT023", "1960-11-26"]),
    st.integers(-(2**60), 2**60),
    st.sampled_from([0, 1, 2, 3, 1712345678, 1712345678901, 2**53, 2**53 + 1]),
    st.floats(allow_nan=False),
    st.sampled_from([1.0, 2.5, -0.0, 1712345678.0, 2.0**53, 1e16, float("inf")]),
    st.booleans(),
    st.none(),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    keys = st.one_of(_NAMES, st.sampled_from([1, True, 1.0, None, "1", "true"]))
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(keys, children, max_size=5),
    )


_VALUES = st.recursive(_LEAVES, _containers, max_leaves=12)
_ODD = st.one_of(
    st.just(_Text("2024-05-01 x")),
    st.just(_Mapping({"page": 3})),
    st.just(collections.OrderedDict([("query", "how to")])),
    st.just(_Thing()),
)


@settings(deadline=None, max_examples=800)
@given(
    st.dictionaries(st.one_of(_NAMES, st.sampled_from([1, True])), st.one_of(_VALUES, _ODD)),
    st.sampled_from(["t", "ci", "exact"]),
)
def test_arguments_key_is_the_general_walk(arguments: dict[Any, Any], tool: str) -> None:
    """Plain JSON walked directly (and a value that is not plain JSON walked the general
    way) gives the general walk's key, rules applied, page and text; asked again (now
    remembered), the same."""
    n = Normaliser(
        tools={
            "ci": ToolNormalisation(case_insensitive=True, paths=frozenset({"id"})),
            "exact": ToolNormalisation(free_text=frozenset({"command"})),
        }
    )
    expected = _reference_arguments_key(n, tool, arguments)
    assert n.arguments_key(tool, arguments) == expected
    assert n.arguments_key(tool, arguments) == expected
    assert Normaliser().arguments_key(tool, arguments) == _reference_arguments_key(
        Normaliser(), tool, arguments
    )


@needs_real_trajectories
def test_the_fast_paths_on_every_real_result_and_argument_set() -> None:
    """The same on every result and every argument set of a set of real trajectories
    (read where it is, as the real-trajectory benchmark reads it)."""
    calls = real_calls()
    assert calls
    n = Normaliser()
    for op in calls:
        text = op.get("result") or ""
        _check_text(text)
        arguments = op.get("args") or {}
        assert n.arguments_key(op["tool"], arguments) == _reference_arguments_key(
            n, op["tool"], arguments
        )
        for value in arguments.values():
            if isinstance(value, str):
                _check_text(value)


def test_remembered_argument_keys_are_kept_apart_by_rules_and_types() -> None:
    """Keys are remembered process-wide for normalisers of equal rules only, and arguments
    equal as Python values but normalised differently (``1``, ``1.0``, ``True``; ``0.0`` and
    ``-0.0`` as names; the order of two page numbers) are remembered apart."""
    N.clear_result_keys()
    arguments = {"id": "A1", "page": 2, "when": "2024-05-01"}
    plain, ignoring = Normaliser(), Normaliser(ignore={"id"})
    cased = Normaliser(tools={"t": ToolNormalisation(case_insensitive=True)})
    for n in (plain, ignoring, cased, Normaliser(path_roots=["/srv"]), plain):
        assert n.arguments_key("t", arguments) == _reference_arguments_key(n, "t", arguments)
    assert plain.arguments_key("t", arguments) != ignoring.arguments_key("t", arguments)
    alike: list[dict[Any, Any]] = [
        {"n": 1},
        {"n": 1.0},
        {"n": True},
        {"n": [1]},
        {"n": (1,)},
        {1: "x"},
        {1.0: "x"},
        {True: "x"},
        {0.0: "x"},
        {-0.0: "x"},
        {"n": {"page": 1, "pageno": 2}},
        {"n": {"pageno": 2, "page": 1}},
        {"n": 2.0**60},
        {"n": 2**60},
    ]
    for _ in range(2):
        for a in alike:
            assert plain.arguments_key("t", a) == _reference_arguments_key(plain, "t", a)
    assert len(N._ARGUMENT_KEYS) <= N._ARGUMENT_KEYS_HELD
    N.clear_result_keys()
    assert not N._ARGUMENT_KEYS


def test_an_id_like_value_under_a_name_with_rules_still_gets_them() -> None:
    """A value of letters, digits and "_" only has nothing to fold, unless its argument
    name has a rule of its own: a page number is masked, free text and case-insensitive
    names are case-folded, whatever the shortcut for plain ids."""
    N.clear_result_keys()
    n = Normaliser(tools={"t": ToolNormalisation(case_insensitive=frozenset({"user"}))})
    _, applied, _, canonical = n.arguments_key("t", {"page": "12", "user": "Ada_Lovelace"})
    assert canonical == '{"page":"<n>","user":"ada_lovelace"}'
    assert applied == {"number", "case"}
    _, applied, _, canonical = Normaliser().arguments_key("search", {"query": "Lovelace"})
    assert canonical == '{"query":"lovelace"}'
    assert applied == {"words"}
    _, applied, _, canonical = Normaliser().arguments_key("get", {"id": "Ada_Lovelace2"})
    assert canonical == '{"id":"Ada_Lovelace2"}'
    assert not applied
    every = Normaliser(tools={"t": ToolNormalisation(case_insensitive=True)})
    _, applied, _, canonical = every.arguments_key("t", {"id": "Ada_Lovelace2"})
    assert canonical == '{"id":"ada_lovelace2"}'
    assert applied == {"case"}
