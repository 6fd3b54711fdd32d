"""PrometheusObserver's direct recorders record exactly what ``inc``/``observe`` record."""

from __future__ import annotations

import math
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from loopobs.exporters.prometheus import _recorder

RUN = uuid.uuid4()
LABELS = {"trace_id": "0af7651916cd43dd8448eb211c80319c", "span_id": "b7ad6b7169203331"}


def _samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float, Any]]:
    out = []
    for family in registry.collect():
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            ex = None if s.exemplar is None else (s.exemplar.labels, s.exemplar.value)
            out.append((s.name, s.labels, s.value, ex))
    return out


def _pair(kind: str) -> tuple[Any, Any, CollectorRegistry, CollectorRegistry]:
    made = []
    for _ in range(2):
        reg = CollectorRegistry()
        if kind == "histogram":
            metric: Any = Histogram("h", "h", ["a"], registry=reg, buckets=(0.1, 1, 10))
        elif kind == "counter":
            metric = Counter("c", "c", ["a"], registry=reg)
        else:
            metric = Gauge("g", "g", ["a"], registry=reg)
        made.append((metric.labels("x"), reg))
    return made[0][0], made[1][0], made[0][1], made[1][1]


values = st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                   st.sampled_from([0.0, 0.1, 1.0, 10.0, -1.0, 1e300]))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["histogram", "counter", "updown_counter"]),
       st.lists(values, max_size=8), st.booleans())
def test_direct_recording_equals_public_methods(kind: str, seq: list[float],
                                                traced: bool) -> None:
    fast_child, public_child, fast_reg, public_reg = _pair(kind)

    def exemplar(run_id: uuid.UUID) -> dict[str, str] | None:
        return dict(LABELS) if traced else None

    record = _recorder(fast_child, kind, None if kind == "updown_counter" else exemplar)
    for v in seq:
        fast_error = public_error = None
        try:
            record(v, RUN)
        except ValueError as exc:
            fast_error = str(exc)
        try:
            if kind == "histogram":
                public_child.observe(v, exemplar(RUN))
            elif kind == "counter":
                public_child.inc(v, exemplar(RUN))
            else:
                public_child.inc(v)
        except ValueError as exc:
            public_error = str(exc)
        assert fast_error == public_error
    fast, public = _samples(fast_reg), _samples(public_reg)
    assert len(fast) == len(public)
    for a, b in zip(fast, public, strict=True):
        assert a[:2] == b[:2]
        assert a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))
        assert (a[3] is None) == (b[3] is None)
        if a[3] is not None:
            assert a[3][0] == b[3][0]
            assert a[3][1] == b[3][1] or (math.isnan(a[3][1]) and math.isnan(b[3][1]))


@pytest.mark.parametrize("kind", ["histogram", "counter"])
def test_children_without_the_expected_values_use_the_public_methods(kind: str) -> None:
    calls: list[tuple[str, float, Any]] = []

    class Other:
        def inc(self, value: float, exemplar: Any = None) -> None:
            calls.append(("inc", value, exemplar))

        def observe(self, value: float, exemplar: Any = None) -> None:
            calls.append(("observe", value, exemplar))

    _recorder(Other(), kind, lambda run_id: LABELS)(2.0, RUN)
    assert calls == [("observe" if kind == "histogram" else "inc", 2.0, LABELS)]
