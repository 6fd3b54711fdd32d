"""ConvergenceDetector's fast paths against the plain code they replace: the same tokens,
sketches, detections and snapshots for every input."""

from __future__ import annotations

import heapq
import json
import os
import re
import zlib
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopobs.detectors import convergence
from loopobs.detectors.normalise import mask_dates

# -- the plain code, as it was before the fast paths -------------------------------------------

_WORD = re.compile(r"\w+")
_DIGIT = re.compile(r"\d")
_NUMBER_OR_WORD = re.compile(r"\d+(?:[.,]\d+)*(?!\w)|\w+")


def reference_tokens(text: str) -> tuple[list[str], tuple[str, ...]]:
    """Case-folded words, dates masked, numbers as "#"; the first 16 numbers."""
    folded = text[:100_000].casefold()
    if _DIGIT.search(folded) is None:
        return _WORD.findall(folded), ()
    found = _NUMBER_OR_WORD.findall(mask_dates(folded))
    words = [
        "#" if (t < ":" or t >= "\x80") and (t.isdecimal() or "." in t or "," in t) else t
        for t in found
    ]
    numbers = tuple([t for t, w in zip(found, words, strict=True) if w == "#"][:16])
    return words, numbers


def reference_sketch(words: list[str], k: int = 128) -> frozenset[int]:
    """Bottom-k of the word multiset's hashes, the n-th repeat offset by n golden steps."""
    hashes: list[int] = []
    for word, count in Counter(words).items():
        data = word.encode("utf-8", "surrogatepass")
        h = zlib.crc32(data) << 32 | zlib.crc32(data, 0x5BD1E995)
        hashes.extend((h + n * 0x9E3779B97F4A7C15) & ((1 << 64) - 1) for n in range(count))
    return frozenset(heapq.nsmallest(k, hashes))


def _as_text(words: list[str] | list[bytes]) -> list[str]:
    return [w.decode("ascii") if isinstance(w, bytes) else w for w in words]


def _check_tokens(text: str) -> None:
    words, numbers = convergence._tokens(text)
    expected = reference_tokens(text)
    assert (_as_text(words), numbers) == expected
    assert convergence._text_tokens(text) == expected
    assert convergence.answer_sketch(text) == reference_sketch(expected[0])


# Characters the number, date and word rules tell apart, many of each.
_ANSWERISH = st.text(alphabet="0123456789.,-:+ TZtzaAbB_#\x00\n\t/<>é²", max_size=120)
_DATEISH = st.lists(
    st.sampled_from(
        [
            "2024-05-06",
            "2024-05-06T10:11:12Z",
            "2024-05-06 10:11:12.5+02:00",
            "10:11:12",
            "1:02:03,25",
            "1712345678",
            "1712345678901.5",
            "1.000,5",
            "12,345.67",
            "v1.2.3",
            "1.2.3x",
            "p95",
            "120ms",
            "3 .5",
            "42",
            "attempt",
            "Done.",
            " ",
            "-",
            ":",
            ".",
            ",",
        ]
    ),
    max_size=20,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(st.one_of(_ANSWERISH, _DATEISH, st.text(max_size=200)))
def test_tokens_are_the_plain_tokeniser_s(text: str) -> None:
    """ASCII text's byte tokens are the regex tokeniser's words; numbers and sketch too."""
    _check_tokens(text)


def test_tokens_on_edges() -> None:
    """Numbers at both ends, next to "#" and NUL, dates folded, the length cut."""
    for text in [
        "",
        "7",
        "#7#",
        "a\x007",
        "7.",
        ".7",
        "1.2.3x 4,5, 6",
        "2024-05-06T10:11:12Z done",
        "at 10:11:12 and 1712345678",
        "x" * 99_999 + " 12",
        "1 " * 60_000,
        "attempt 4 of 5, p95 120 ms, sha256 ok",
    ]:
        _check_tokens(text)


def _real_answers() -> list[str]:
    with open(os.environ["LOOPOBS_REAL_TRAJECTORIES"], encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [
        op.get("text") or ""
        for rec in records
        for op in rec.get("ops", [])
        if op.get("op") != "call"
    ]


@pytest.mark.skipif(
    "LOOPOBS_REAL_TRAJECTORIES" not in os.environ, reason="no real trajectories given"
)
def test_tokens_on_real_answers() -> None:
    """The same on every answer of a set of real trajectories (read where it is: the data
    is not in the repository)."""
    answers = _real_answers()
    assert answers
    for text in answers:
        _check_tokens(text)


def test_the_date_pre_scan_still_fits_the_date_pattern() -> None:
    """_DATE_NEEDS was derived from this pattern: a change there must be checked here."""
    from loopobs.detectors import normalise

    assert normalise._DATES.pattern == (
        r"\d(?<![\w.]\d)(?:\d{3}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?"
        r"(?:Z|[+-]\d\d:?\d\d)?)?|\d?:\d\d:\d\d(?:[.,]\d+)?|(?<=1)[5-9]\d{8}(?:\d{3})?(?:\.\d+)?)"
        r"(?!\w)"
    )


@settings(max_examples=400, deadline=None)
@given(st.one_of(_DATEISH, _ANSWERISH.filter(str.isascii)))
def test_no_date_need_means_no_date(text: str) -> None:
    """Where the pre-scan finds no date's shape, masking dates changes nothing."""
    if text.isascii():
        classes = text.encode("ascii").translate(convergence._CLASSES)
        if convergence._DATE_NEEDS.search(classes) is None:
            assert mask_dates(text.casefold()) == text.casefold()
