"""The labelled detection corpus: reproducible from its generator, covering every class, and
the detectors meet the quality targets on it (``pytest -s`` prints the figures)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.detection_corpus import generate
from tests.detection_corpus.harness import CORPUS_PATH, Trace, evaluate, load, play

RUNAWAY_CLASSES = {
    "cosmetic_args",
    "volatile_results",
    "long_repeats",
    "paraphrased_calls",
    "answers",
    "classic",
    "shell_agents",
    "editor_agents",
    "conversations",
}
PRODUCTIVE_CLASSES = {
    "polling",
    "reads_between_writes",
    "long_sessions",
    "retries",
    "acknowledgements",
    "classic_ok",
    "shell_agents_ok",
    "editor_agents_ok",
    "conversations_ok",
}


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    """The corpus as stored."""
    return load()


def test_corpus_file_is_what_the_generator_builds(traces: list[Trace]) -> None:
    """The stored file is the generator's output: regenerate it after changing the script."""
    built = generate.build()
    assert [t.to_json() for t in traces] == [t.to_json() for t in built], (
        f"run `python -m tests.detection_corpus.generate` to refresh {CORPUS_PATH.name}"
    )


def test_corpus_covers_every_class_with_both_kinds(traces: list[Trace]) -> None:
    """At least 60 traces; every class of runaway and of productive work has three or more."""
    assert len(traces) >= 60
    classes = Counter(t.cls for t in traces)
    assert set(classes) == RUNAWAY_CLASSES | PRODUCTIVE_CLASSES
    assert min(classes.values()) >= 3
    labels = Counter(t.label for t in traces)
    assert labels["loop"] >= 20
    assert labels["converged"] >= 10
    assert labels["ok"] >= 20
    for t in traces:
        assert (t.label == "ok") == (t.cls in PRODUCTIVE_CLASSES)
        assert (t.loop_start is None) == (t.label == "ok")
    assert any(sum("call" in s for s in t.steps) >= 600 for t in traces)


def test_detection_quality_meets_the_targets(traces: list[Trace]) -> None:
    """Warn precision and recall ≥ 0.9, stop precision ≥ 0.95 and recall ≥ 0.75, median
    latency to warn ≤ 5 looping steps."""
    scores, outcomes = evaluate(traces)
    misses = [
        f"{o.trace.label:9} {o.trace.name}: {o.detections[:2]}"
        for o in outcomes
        if (o.trace.label == "ok") == bool(o.detections)
    ]
    print(
        f"\nwarn precision {scores.warn_precision:.3f} recall {scores.warn_recall:.3f}  "
        f"stop precision {scores.stop_precision:.3f} recall {scores.stop_recall:.3f}  "
        f"median latency {scores.median_latency} looping steps  {scores.counts}"
    )
    print("\n".join(misses))
    assert scores.warn_precision >= 0.9
    assert scores.warn_recall >= 0.9
    assert scores.stop_precision >= 0.95
    assert scores.stop_recall >= 0.75
    assert scores.median_latency <= 5


def test_quality_holds_on_traces_from_another_seed() -> None:
    """The same classes drawn with another seed (held out while tuning) meet the targets too."""
    scores, _ = evaluate(generate.build(seed=2021, variants=2))
    assert scores.warn_precision >= 0.9
    assert scores.warn_recall >= 0.9
    assert scores.stop_precision >= 0.95
    assert scores.stop_recall >= 0.75


def test_every_detection_says_why(traces: list[Trace]) -> None:
    """Each detection on the corpus carries a reason sentence."""
    for trace in traces[:40]:
        for _, _, _, reason in play(trace).detections:
            assert reason
