"""ConvergenceDetector: the agent keeps giving the same final answer."""

from __future__ import annotations

import heapq
import re
import zlib
from collections import Counter, deque
from collections.abc import Sequence
from typing import Any, Final, get_args

from mypy_extensions import mypyc_attr

from loopobs.contract.events import (
    ConvergenceAction,
    ConvergenceDetectedContext,
    ResponseContext,
    TurnStartContext,
)
from loopobs.contract.hashing import text_key
from loopobs.detectors._session import DEFAULT_MAX_SESSIONS, SessionDetector, SnapshotRejected
from loopobs.detectors.normalise import mask_dates

__all__ = [
    "SKETCH_SIZE",
    "ConvergenceAction",
    "ConvergenceDetector",
    "answer_sketch",
    "sketch_similarity",
]

_CONVERGENCE_ACTIONS: Final = frozenset(get_args(ConvergenceAction))

SKETCH_SIZE: Final = 128
"""Hashes kept per answer: answers with fewer words are compared exactly."""

_WORD: Final = re.compile(r"\w+")
_DIGIT: Final = re.compile(r"\d")
_NUMBER: Final = re.compile(r"\b\d+(?:[.,]\d+)*\b")
# A number ("1,000.5") or a word. Every match starts where the previous one ended or after a
# character that is not a word character, so no leading \b is needed.
_NUMBER_OR_WORD: Final = re.compile(r"\d+(?:[.,]\d+)*(?!\w)|\w+")
_MASK64: Final = (1 << 64) - 1
_GOLDEN: Final = 0x9E3779B97F4A7C15
_SALT: Final = 0x5BD1E995
_MAX_NUMBERS: Final = 16
_MAX_CHARS: Final = 100_000
"""Characters of an answer (or question) that are compared; the rest is ignored."""
_LONG_ANSWER_TOKENS: Final = 20
_SHORT_ANSWER_TOKENS: Final = 12
_QUESTION_SIMILARITY: Final = 0.9
_REQUEST_WORDS: Final = 4

_NONE: Final = 0
_FIRED: Final = 1
_STOPPED: Final = 2


def _text_tokens(text: str) -> tuple[list[str], tuple[str, ...]]:
    """Case-folded words with dates and times masked and numbers as ``#``; and the
    numbers themselves (durations stay: in an answer "p95 is 120 ms" is a figure).
    Any text; :func:`_tokens` gives the same, faster, for text that is ASCII or whose other
    characters are :func:`_inert`."""
    folded = text[:_MAX_CHARS].casefold()
    if _DIGIT.search(folded) is None:
        # No digit (two answers in five): no date to mask and no number, every token is a
        # word, and one scan for a digit costs little next to the two patterns it spares.
        return _WORD.findall(folded), ()
    masked = mask_dates(folded)
    # One pass, no groups (a third cheaper than telling the two apart in the pattern): a
    # number is the only token that can hold "." or "," or be digits only.
    found = _NUMBER_OR_WORD.findall(masked)
    # A number starts with a digit: an ASCII one (below ":"; no word character is below
    # "0") or another script's (at or above "\x80"). Two comparisons settle the words that
    # start with an ASCII letter, most of them, without a method call.
    words = [
        "#" if (t < ":" or t >= "\x80") and (t.isdecimal() or "." in t or "," in t) else t
        for t in found
    ]
    numbers = tuple([t for t, w in zip(found, words, strict=True) if w == "#"][:_MAX_NUMBERS])
    return words, numbers


# Text is tokenised in its UTF-8 by byte translations, one split and searches for literal
# bytes (the regex engine finds a literal at memchr speed and a class such as \d or \w a
# character at a time, over ten times slower on the real set's answers). In ASCII, \w is
# [0-9A-Za-z_], \d is [0-9] and casefold() is lower(); the bytes of other characters are
# read so only when those characters are inert (see _inert), as spaces.
_FOLDED_WORDS: Final = bytes(
    b + 32 if 65 <= b <= 90 else b if chr(b).isascii() and (chr(b).isalnum() or b == 95) else 32
    for b in range(256)
)
"""Folds ASCII letters and turns every byte that is not a word character into a space."""
_CLASSES: Final = bytes(
    ord("0")
    if 48 <= b <= 57
    else ord("a")
    if chr(b).isascii() and (chr(b).isalpha() or b == 95)
    else ord(".")
    if b in b".,"
    else b
    if b in b"-:"
    else 32
    for b in range(256)
)
"""Bytes as the classes the number and date patterns tell apart: an ASCII digit is "0",
another word character "a", "." and "," are ".", "-" and ":" stay, anything else is a
space."""
_NUMBER_IN_CLASSES: Final = re.compile(rb"0(?<![a0]0)0*(?:\.0+)*(?![a0])")
"""A number token of :data:`_NUMBER_OR_WORD`, in classes: its matches, scanning from the
start, are where that pattern's scan finds a number. That scan starts every match at a
word start (after a character that is not a word character): at a word start a number
is tried first and a word takes the whole run when it fails; here the look-behind makes
each word start the only place a number can begin, and every other place within the
run is refused."""
_DATE_NEEDS: Final = re.compile(rb"0(?:000-00-00|:00:00|0{9})")
"""What every match of ``normalise._DATES`` holds, in classes: a date (four digits, "-",
two, "-", two), a time of day (a digit, ":", two, ":", two) or ten digits (an epoch
timestamp). No match here: ``mask_dates`` changes nothing (a test holds the pattern this
was read from)."""


_ASCII: Final = bytes(range(128))
"""The ASCII bytes (deleted to leave a text's other characters)."""


def _inert(data: bytes) -> bool:
    """Whether every character of UTF-8 ``data`` outside ASCII is inert: no word character
    (so no digit either) and unchanged by casefold(), as punctuation, quotes, dashes,
    symbols and spaces are."""
    others = data.translate(None, _ASCII).decode("utf-8", "surrogatepass")
    return not any(c.isalnum() or c.casefold() != c for c in set(others))


def _tokens(text: str) -> tuple[list[str] | list[bytes], tuple[str, ...]]:
    """What :func:`_text_tokens` gives, the words as their UTF-8 bytes (the bytes a word's
    hash is taken of) when the text is ASCII, or its other characters are :func:`_inert`:
    those are never part of a word, a number or a date, so each of their bytes can be
    read as a space."""
    text = text[:_MAX_CHARS]
    ascii_only = text.isascii()
    data = text.encode("utf-8", "surrogatepass")
    if not ascii_only and not _inert(data):
        return _text_tokens(text)
    classes = data.translate(_CLASSES)
    if b"0" not in classes:
        return data.translate(_FOLDED_WORDS).split(), ()
    if _DATE_NEEDS.search(classes) is not None:
        text = mask_dates(text.casefold())
        data = text.encode("utf-8", "surrogatepass")
        classes = data.translate(_CLASSES)
    folded = data.translate(_FOLDED_WORDS)
    pieces: list[bytes] = []
    numbers: list[str] = []
    start = 0
    for number in _NUMBER_IN_CLASSES.finditer(classes):
        begin, end = number.span()
        pieces.append(folded[start:begin])
        if len(numbers) < _MAX_NUMBERS:
            # A byte's place is a character's in ASCII; else the number's bytes, all ASCII.
            numbers.append(text[begin:end] if ascii_only else data[begin:end].decode("ascii"))
        start = end
    if not pieces:
        return folded.split(), ()
    pieces.append(folded[start:])
    # A number is preceded and followed by a byte that is not a word character (a space in
    # ``folded``) or by an end: the "#" put in its place is a token of its own.
    return b"#".join(pieces).split(), tuple(numbers)


def _words(text: str) -> list[str] | list[bytes]:
    """The ``\\w+`` runs of the case-folded text, numbers and dates as they are; as UTF-8
    bytes when the text is ASCII or its other characters are :func:`_inert`."""
    text = text[:_MAX_CHARS]
    data = text.encode("utf-8", "surrogatepass")
    if text.isascii() or _inert(data):
        return data.translate(_FOLDED_WORDS).split()
    return _WORD.findall(text.casefold())


def _word_hash(word: str | bytes) -> int:
    """A stable 64-bit hash of one word: two CRC-32s (one salted) of its UTF-8, cheaper
    than BLAKE2b for the hundreds of words of an answer, and the same in every process (a
    sketch moves with its session's detector state). A word's bytes hash as the word."""
    data = word if isinstance(word, bytes) else word.encode("utf-8", "surrogatepass")
    return zlib.crc32(data) << 32 | zlib.crc32(data, _SALT)


class _WordHashes(dict[str | bytes, int]):
    """Words already hashed, process-wide (at most 65,536, forgotten all at once): answers
    share most of their vocabulary, and a lookup costs a fifth of two CRC-32s. Indexing
    gives :func:`_word_hash` of any word, remembered or not."""

    def __missing__(self, word: str | bytes) -> int:
        h = _word_hash(word)
        if len(self) >= _WORD_HASHES_HELD:
            self.clear()
        self[word] = h
        return h


_WORD_HASHES_HELD: Final = 1 << 16
_WORD_HASHES: Final = _WordHashes()
_hash_of: Final = _WORD_HASHES.__getitem__


def clear_word_hashes() -> None:
    """Forget the remembered word hashes (a benchmark's first sight of every word)."""
    _WORD_HASHES.clear()


_OFFSETS: Final = [n * _GOLDEN & _MASK64 for n in range(1, 513)]
"""The offsets of a word's first 512 repeats (the n-th: n golden steps), added to its hash."""


def _sketch(words: Sequence[str | bytes], k: int) -> frozenset[int]:
    """Bottom-``k`` MinHash of the *multiset* of ``words``: the i-th repeat of a word is an
    element of its own, so one changed word in a long answer is a small change. Word hashes
    are :func:`_word_hash`'s, the same in every process."""
    return frozenset(_bottom(words, k))


def _bottom(words: Sequence[str | bytes], k: int) -> list[int]:
    """The hashes :func:`_sketch` is the set of: at most ``k``, a hash perhaps twice."""
    counts = Counter(words)
    hashes = list(map(_hash_of, counts))
    many = len(words)
    if many > len(_OFFSETS) + 1 and max(counts.values()) > len(_OFFSETS) + 1:
        # A word repeated past the offsets held (a long answer, rarely): every step computed.
        hashes.extend(
            [
                (h + n * _GOLDEN) & _MASK64
                for h, count in zip(hashes, counts.values(), strict=True)
                if count > 1
                for n in range(1, count)
            ]
        )
        return heapq.nsmallest(k, hashes)
    if many > 2 * k:
        # Only the hashes below a bound that 1.5 k of the ``many`` are expected under (the
        # hashes spread evenly over 64 bits) are computed to the end and sorted. With k or
        # more below it, the k smallest of all are among them; fewer (a binomial tail, under
        # one answer in 10^5) and the exact path below is taken.
        bound = (3 * k << 63) // many
        kept = list(filter(bound.__gt__, hashes))
        kept += [
            h
            for first, count in zip(hashes, counts.values(), strict=True)
            if count > 1
            for offset in _OFFSETS[: count - 1]
            if (h := (first + offset) & _MASK64) < bound
        ]
        if len(kept) >= k:
            kept.sort()
            return kept[:k]
    if len(hashes) < many:
        # One comprehension for every repeat of every word: one per word costs a call each.
        hashes += [
            (h + offset) & _MASK64
            for h, count in zip(hashes, counts.values(), strict=True)
            if count > 1
            for offset in _OFFSETS[: count - 1]
        ]
    if len(hashes) <= k:
        return hashes
    hashes.sort()
    return hashes[:k]


def answer_sketch(text: str, k: int = SKETCH_SIZE) -> frozenset[int]:
    """The bottom-``k`` MinHash sketch of ``text``'s words, counted with repeats.

    Words are ``\\w+`` runs of the case-folded text, with dates and times
    masked and every number read as one placeholder word, each hashed
    to a stable 64 bits (two CRC-32s; the n-th repeat of a word offset by n); the sketch
    keeps the ``k`` smallest hashes.
    """
    return _sketch(_tokens(text)[0], k)


def sketch_similarity(a: frozenset[int], b: frozenset[int], k: int = SKETCH_SIZE) -> float:
    """Estimated Jaccard similarity of the word multisets behind two sketches (exact below ``k``).

    The bottom-``k`` estimator: of the ``k`` smallest hashes of the union, the
    share present in both sketches. Two empty sketches are not similar.
    """
    if not a or not b:
        return 0.0
    union = a | b
    if len(union) <= k:
        return len(a & b) / len(union)
    smallest = set(sorted(union)[:k])
    return len(smallest & a & b) / k


def _number_key(number: str) -> str:
    return number if number.startswith("#") else f"#{text_key(number):x}"


def _number(value: Any) -> str:
    if type(value) is not str or not value.startswith("#"):
        raise SnapshotRejected("a number is not a key")
    return value


def _whole(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise SnapshotRejected(f"{value!r} is not a count")
    return value


def _hashes(values: Any) -> frozenset[int]:
    if not isinstance(values, list) or len(values) > SKETCH_SIZE:
        raise SnapshotRejected("a sketch is not a list of hashes")
    return frozenset(_whole(v) for v in values)


def _question(value: Any) -> tuple[frozenset[int], int] | None:
    if value is None:
        return None
    sketch, words = value
    return _hashes(sketch), _whole(words)


class _Answer:
    __slots__ = ("_sketch", "count", "hashes", "numbers", "question", "size")

    def __init__(
        self,
        hashes: frozenset[int] | list[int],
        size: int,
        numbers: tuple[str, ...],
        question: tuple[frozenset[int], int] | None,
    ) -> None:
        self.hashes, self.size, self.numbers, self.question = hashes, size, numbers, question
        self._sketch = hashes if isinstance(hashes, frozenset) else None
        self.count = 1  # this answer and the earlier ones it repeats, through the window

    @property
    def sketch(self) -> frozenset[int]:
        """The answer's sketch, the set of its hashes: made when first read, to compare or
        to save (most answers are never compared: the answers around them differ in size)."""
        sketch = self._sketch
        if sketch is None:
            sketch = self._sketch = frozenset(self.hashes)
        return sketch


class _Answers:
    __slots__ = ("history", "level", "question", "streak")

    def __init__(self, keep: int) -> None:
        self.history: deque[_Answer] = deque(maxlen=keep)
        self.question: tuple[frozenset[int], int] | None = None
        self.streak = 0
        self.level = _NONE


def _counter_step(old: str, new: str, back: int) -> bool:
    """Two integers a counter apart: ``new`` is ``old`` plus the answers' distance."""
    return old.isdigit() and new.isdigit() and int(new) - int(old) == back


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py), yet subclassable
class ConvergenceDetector(SessionDetector[_Answers]):
    """Detects converged final answers: the agent keeps giving the same answer.

    Reads ``on_response`` for responses without tool calls (``tool_calls == 0``,
    a final answer) and ``on_turn_start`` for the question (``query``). Each answer
    becomes a bottom-k MinHash sketch of its words *with repeats* (constant memory
    per session), so similarity is robust to length: a long answer that changes
    one word is the same answer, and so is one within two words of it once both
    have at least 20 words. Dates, times and durations are masked and numbers
    compared apart: an answer whose numbers moved by no more than a counter step
    (``attempt 4`` → ``attempt 5``) is the same answer, one whose figures changed
    is new. A short answer (under 12 words, "Done.") to a new request (a question
    of at least 4 words unlike the earlier one) is never the same answer; to a
    short follow-up ("are you sure?", "continue") it is compared as usual. Only the
    first 100,000 characters of an answer count.

    A new answer is compared with the session's last ``history`` answers, nearest
    first: alike to one of them (at least ``similarity``) extends the streak, else
    it restarts at 1; an empty answer clears it. Two drafts alternating are alike
    to the answer two back. The same answer with others between (A A B A) counts
    too: an answer counts one more than the alike answer in the window that counted
    most. At ``consecutive`` (streak or count) the detector emits
    ``on_convergence_detected`` with ``action``; at ``stop_after`` (if it goes on,
    and ``action`` did not already end the run) with ``action="stop"``. Each fires
    once per streak. The event says why: ``signal`` (``same_answer``,
    ``alternating`` or ``repeated_answer``), ``reason`` and ``compared_with``. For ``stop`` and
    ``ask_user``, which end the run, the session's state is cleared.

    Args:
        similarity: how alike two answers must be, in (0, 1].
        consecutive: answers in a row that make a convergence; at least 2.
        action: what the loop should do at ``consecutive``: ``stop``, ``warn``,
            ``compact``, ``ask_user`` or ``switch_phase``.
        stop_after: answers in a row that stop the run; 0 never stops. With the
            defaults a warning comes at the third alike answer and a stop at the fifth.
        history: earlier answers each new one is compared with; at least 1.
        max_sessions: sessions remembered; the least recently active are dropped.
    """

    name = "ConvergenceDetector"

    def __init__(
        self,
        similarity: float = 0.95,
        consecutive: int = 3,
        action: ConvergenceAction = "warn",
        *,
        stop_after: int = 5,
        history: int = 6,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        if not 0.0 < similarity <= 1.0:
            raise ValueError("similarity must be in (0, 1]")
        if consecutive < 2:
            raise ValueError("consecutive must be at least 2")
        if action not in _CONVERGENCE_ACTIONS:
            raise ValueError(
                f"action must be one of {sorted(_CONVERGENCE_ACTIONS)}, got {action!r}"
            )
        if stop_after and stop_after < consecutive:
            raise ValueError("stop_after must be 0 (never stop) or at least consecutive")
        if history < 1:
            raise ValueError("history must be at least 1")
        super().__init__(max_sessions=max_sessions)
        self.similarity = similarity
        self.consecutive = consecutive
        self.action: ConvergenceAction = action
        self.stop_after = stop_after
        self.history = history

    def __repr__(self) -> str:
        return (
            f"ConvergenceDetector(similarity={self.similarity}, "
            f"consecutive={self.consecutive}, action={self.action!r}, "
            f"stop_after={self.stop_after}, history={self.history})"
        )

    def _new_state(self) -> _Answers:
        return _Answers(self.history)

    # -- a session's state as plain data (it moves between workers with its session) -------
    snapshot_kind = "convergence"

    def _config(self) -> list[Any]:
        return [self.history, SKETCH_SIZE]

    def _dump(self, s: _Answers) -> dict[str, Any]:
        def question(q: tuple[frozenset[int], int] | None) -> list[Any] | None:
            return None if q is None else [sorted(q[0]), q[1]]

        return {
            "history": [
                # The answers' numbers as keys: equal numbers stay equal, their values stay
                # behind (a counter step across the move is not recognised).
                [
                    sorted(a.sketch),
                    a.size,
                    [_number_key(n) for n in a.numbers],
                    question(a.question),
                    a.count,
                ]
                for a in s.history
            ],
            "question": question(s.question),
            "streak": s.streak,
            "level": s.level,
        }

    def _load(self, data: Any) -> _Answers:
        if not isinstance(data, dict):
            raise SnapshotRejected("no state")
        s = _Answers(self.history)
        rows = data["history"]
        if not isinstance(rows, list) or len(rows) > self.history:
            raise SnapshotRejected("the history does not fit")
        for sketch, size, numbers, question, count in rows:
            answer = _Answer(
                _hashes(sketch),
                _whole(size),
                tuple(_number(n) for n in numbers[:_MAX_NUMBERS]),
                _question(question),
            )
            answer.count = _whole(count)
            s.history.append(answer)
        s.question = _question(data["question"])
        s.streak, s.level = _whole(data["streak"]), _whole(data["level"])
        return s

    def on_turn_start(self, ctx: TurnStartContext) -> None:
        """Remember the turn's question, to tell short answers to different requests apart."""
        question = None
        if ctx.query:
            # Numbers kept: "close issue 101" and "close issue 102" are different requests.
            words = _words(ctx.query)
            question = (_sketch(words, SKETCH_SIZE), len(words))
        with self._lock:
            _, s = self._state(ctx.run_id)
            s.question = question

    def _alike(self, old: _Answer, new: _Answer, back: int) -> float | None:
        """The similarity of two answers if they are the same answer, else ``None``."""
        small, large = sorted((old.size, new.size))
        if large - small > 2.5 and small < large * self.similarity:
            return None  # no word multisets this far apart in size are alike enough
        score = 1.0 if old.sketch == new.sketch else sketch_similarity(old.sketch, new.sketch)
        same = score >= self.similarity
        if not same and min(old.size, new.size) >= _LONG_ANSWER_TOKENS and score > 0:
            # Tokens in one answer and not the other, from the Jaccard estimate and the sizes.
            differing = (1.0 - score) * (old.size + new.size) / (1.0 + score)
            same = differing <= 2.5
        if not same:
            return None
        numbers = new.numbers
        if old.numbers and old.numbers[0][0] == "#":
            numbers = tuple(map(_number_key, numbers))  # an answer restored: numbers as keys
        if (
            old.numbers != numbers
            and len(old.numbers) == len(numbers)
            and not all(
                a == b or _counter_step(a, b, back)
                for a, b in zip(old.numbers, numbers, strict=True)
            )
        ):
            return None
        if (
            old.question is not None
            and new.question is not None
            and min(old.size, new.size) < _SHORT_ANSWER_TOKENS
            and new.question[1] >= _REQUEST_WORDS
            and sketch_similarity(old.question[0], new.question[0]) < _QUESTION_SIMILARITY
        ):
            return None
        return score

    def on_response(self, ctx: ResponseContext) -> None:
        """Compare a final answer with the session's recent ones; emit on convergence.

        Responses that ask for tool calls are ignored.
        """
        if ctx.tool_calls:
            return
        words, numbers = _tokens(ctx.text)
        hashes = _bottom(words, SKETCH_SIZE)
        with self._lock:
            key, s = self._state(ctx.run_id)
            if not hashes:
                s.history.clear()
                s.streak, s.level = 0, _NONE
                return
            answer = _Answer(hashes, len(words), numbers, s.question)
            score, back = 0.0, 0
            size, similarity = answer.size, self.similarity
            for i, old in enumerate(reversed(s.history), 1):
                # _alike's first test, the same expressions with the smaller size first:
                # the answers it refuses there are skipped without a call.
                if old.size < size:
                    if size - old.size > 2.5 and old.size < size * similarity:
                        continue
                elif old.size - size > 2.5 and size < old.size * similarity:
                    continue
                alike = self._alike(old, answer, i)
                if alike is not None:
                    if not back:
                        score, back = alike, i
                    # The same answer with others between (A A B A) still counts.
                    answer.count = max(answer.count, old.count + 1)
            if back:
                s.streak += 1
            else:
                s.streak = 1
            if max(s.streak, answer.count) < self.consecutive:
                s.level = _NONE
            s.history.append(answer)
            streak = max(s.streak, answer.count)
            action: ConvergenceAction
            if (
                self.stop_after
                and streak >= self.stop_after
                and s.level < _STOPPED
                and self.action not in ("stop", "ask_user")
            ):
                s.level, action = _STOPPED, "stop"
            elif streak >= self.consecutive and s.level < _FIRED:
                s.level, action = _FIRED, self.action
            else:
                return
            if action in ("stop", "ask_user"):
                self._clear_session(key)
            targets = self._targets
        if s.streak >= streak:
            signal = "same_answer" if back == 1 else "alternating"
            reason = (
                f"{streak} answers in a row each repeat one of the last {self.history} "
                f"(similarity {score:.2f} with the answer {back} back)"
            )
        else:
            signal = "repeated_answer"
            reason = (
                f"the same answer {streak} times within the last {self.history + 1} "
                f"answers, others between (similarity {score:.2f} with the answer "
                f"{back} back)"
            )
        event = ConvergenceDetectedContext(
            run_id=ctx.run_id,
            time_ns=ctx.time_ns,
            action=action,
            similarity=score,
            consecutive=streak,
            signal=signal,
            reason=reason,
            compared_with=back,
        )
        for target in targets:
            target.on_convergence_detected(event)
