"""TraceLinks: the run → root span table, its bounds, the checkpoint carrier and its reset."""

from __future__ import annotations

import uuid

import pytest

from loopobs.contract import trace_links
from loopobs.contract.trace_links import TraceLinks

TRACE, SPAN = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"


def test_open_runs_are_looked_up_and_ended_ones_resolved() -> None:
    """lookup sees open runs only; after withdraw, resolve still finds the pair."""
    links, run = TraceLinks(), uuid.uuid4()
    links.publish(run, TRACE, SPAN)
    assert links.lookup(run) == (TRACE, SPAN)
    assert links.open_runs == 1
    links.withdraw(run)
    assert links.lookup(run) is None
    assert links.resolve(run) == (TRACE, SPAN)
    assert links.open_runs == 0


def test_ended_runs_are_bounded_oldest_first() -> None:
    """Past the capacity the oldest ended run is forgotten."""
    links = TraceLinks(ended_capacity=2)
    runs = [uuid.uuid4() for _ in range(3)]
    for run in runs:
        links.publish(run, TRACE, SPAN)
        links.withdraw(run)
    assert [links.resolve(r) is not None for r in runs] == [False, True, True]
    with pytest.raises(ValueError, match="ended_capacity"):
        TraceLinks(ended_capacity=0)


def test_a_carrier_restores_the_link_elsewhere() -> None:
    """The checkpoint's traceparent makes the parked run known to another table."""
    here, elsewhere, run = TraceLinks(), TraceLinks(), uuid.uuid4()
    here.publish(run, TRACE, SPAN)
    carrier = here.carrier(run)
    assert carrier == {"traceparent": f"00-{TRACE}-{SPAN}-01"}
    assert elsewhere.restore(run, carrier)
    assert elsewhere.resolve(run) == (TRACE, SPAN)
    assert elsewhere.carrier(uuid.uuid4()) is None


@pytest.mark.parametrize(
    "carrier",
    [
        None,
        {},
        {"traceparent": "garbage"},
        {"traceparent": f"00-{'0' * 32}-{SPAN}-01"},
        {"traceparent": f"00-{TRACE}-{'0' * 16}-01"},
    ],
)
def test_invalid_carriers_are_ignored(carrier: dict[str, str] | None) -> None:
    """Missing, malformed or all-zero ids link nothing."""
    links, run = TraceLinks(), uuid.uuid4()
    assert not links.restore(run, carrier)
    assert links.resolve(run) is None


def test_reset_forgets_everything() -> None:
    """reset empties open and ended runs; the process table resets the same way."""
    links, run, ended = TraceLinks(), uuid.uuid4(), uuid.uuid4()
    links.publish(run, TRACE, SPAN)
    links.publish(ended, TRACE, SPAN)
    links.withdraw(ended)
    links.reset()
    assert links.resolve(run) is None
    assert links.resolve(ended) is None
    trace_links.publish(run, TRACE, SPAN)
    assert trace_links.LINKS.lookup(run) == (TRACE, SPAN)
    trace_links.reset()
    assert trace_links.lookup(run) is None
