"""Detectors: runaway tool loops and converged answers, told apart from productive work.

Both detectors are observers. Add them to an :class:`~loopobs.contract.observer.ObserverSet`
(``AgentLoop`` does it for you); when they detect something they emit
``on_loop_detected`` / ``on_convergence_detected`` into every set they are
attached to, so tracing and metrics observers in that set see the detection,
and the loop applies its ``action``. They work the same on a loop that is not
ours, fed by hand-emitted events. A detection is emitted while the set is
still delivering the event that caused it, so observers registered *after* the
detector receive the detection before that event: register detectors last.

- :class:`RepetitionDetector` (:mod:`.repetition`) watches tool calls, normalised
  by a :class:`Normaliser` (:mod:`.normalise`), for repeats, cycles, the same
  result for different arguments and over-long polling.
- :class:`ConvergenceDetector` (:mod:`.convergence`) compares final answers.

Every detection carries its reason (``signal``, ``reason`` and the calls
involved). State is kept per session (runs are mapped to their session at
``on_run_start``; an event for a run never started is keyed on its run id), is
bounded whatever the session's length, is guarded by one lock per detector, and
is cleared by ``reset()``. Hashes that reach events are stable BLAKE2b digests
(:mod:`loopobs.contract.hashing`); the keys of the state are ``text_key`` s, the same in
every process, never Python's salted ``hash()``: a session's state can move to another
worker (``snapshot`` / ``restore``, saved by an ``AgentSession`` in its store).
"""

from importlib.machinery import EXTENSION_SUFFIXES as _EXTENSION_SUFFIXES
from typing import Final

import loopobs.detectors._session as _plumbing
from loopobs.detectors import commands as _commands
from loopobs.detectors import convergence as _convergence
from loopobs.detectors import repetition as _repetition
from loopobs.detectors._session import DEFAULT_MAX_SESSIONS
from loopobs.detectors.convergence import (
    SKETCH_SIZE,
    ConvergenceAction,
    ConvergenceDetector,
    answer_sketch,
    clear_word_hashes,
    sketch_similarity,
)
from loopobs.detectors.normalise import (
    Normaliser,
    ToolNormalisation,
    clear_result_keys,
    mask_volatile,
)
from loopobs.detectors.repetition import RepetitionDetector, clear_call_effects

__all__ = [
    "COMPILED",
    "DEFAULT_MAX_SESSIONS",
    "SKETCH_SIZE",
    "ConvergenceAction",
    "ConvergenceDetector",
    "Normaliser",
    "RepetitionDetector",
    "ToolNormalisation",
    "answer_sketch",
    "clear_caches",
    "mask_volatile",
    "sketch_similarity",
]

COMPILED: Final = all(
    (m.__file__ or "").endswith(tuple(_EXTENSION_SUFFIXES))
    for m in (_commands, _convergence, _repetition, _plumbing)
)
"""Whether the detectors run compiled: a wheel built with ``LOOPOBS_COMPILE=1`` holds their hot
modules compiled with mypyc (about a third less time a tool call); the sources, and every
editable install, are pure Python. Both behave the same: ``make test`` tests both."""


def clear_caches() -> None:
    """Forget everything the detectors remember process-wide (parsed command lines and
    their effects, masked results' keys, words' hashes), so that the next calls see every
    text for the first time: a benchmark's cold figure. Never needed for correctness:
    each cache is bounded and depends on the text alone."""
    _commands.clear_cache()
    clear_call_effects()
    clear_result_keys()
    clear_word_hashes()
