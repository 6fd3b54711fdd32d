"""What pricing a model call costs, against a bare prometheus-client ``Counter.inc()``.

Run: ``.venv/bin/python bench/bench_cost.py`` (``--quick`` for a smoke run).

Rows give the best and median time per model call and the ratio of the median to a
bare ``Counter.inc()`` measured in the same process:

- ``genai-prices`` lookups (the default price lookup, its resolution cached), for a
  priced model with cache reads, and for a model with no price;
- a user's :class:`~loopobs.ModelRates`;
- the loop's own per-call path (:class:`RunSpending`: price, add up, check the budget);
- :class:`~loopobs.BudgetGuard`, the cost observer for loops that emit by hand, on an
  event its emitter priced and on one it prices itself;
- ``genai_prices.calc_price`` called directly, for reference.

A model call takes hundreds of milliseconds; read the ratios as the price of knowing
what it cost.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import genai_prices
from prometheus_client import CollectorRegistry, Counter

from bench._util import Timing, fmt_ns, fmt_ratio, print_table, time_callable
from loopobs import (
    Budget,
    BudgetGuard,
    Conversation,
    GenAIPrices,
    ModelRates,
    ObserverSet,
    RunStartContext,
    StreamSuccessContext,
    Usage,
    price_lookup,
)
from loopobs.cost.spending import RunSpending

USAGE = Usage(input_tokens=12_000, output_tokens=800, cache_read_input_tokens=4_000)


def rows(repeats: int, target_s: float) -> list[dict[str, Any]]:
    """Every timing, with its ratio to the bare counter of this run."""
    registry = CollectorRegistry()
    counter = Counter("bare_counter", "bare", registry=registry)

    def timed(name: str, fn: Any) -> Timing:
        return time_callable(name, fn, repeats=repeats, target_s=target_s)

    bare = timed("bare Counter.inc()", counter.inc)
    prices = GenAIPrices()
    rates = price_lookup({"house-model": ModelRates(input_per_mtok=0.2, output_per_mtok=0.8)})
    gp_usage = genai_prices.Usage(input_tokens=12_000, output_tokens=800, cache_read_tokens=4_000)

    spending = RunSpending(
        run_id=uuid.uuid4(),
        prices=prices,
        budget=Budget(usd=1e9),
        session=Conversation(),
        emit=ObserverSet().on_budget_exceeded,
    )

    def per_call() -> None:
        spending.price("gpt-4o", "openai", USAGE)
        spending.check()

    run_id = uuid.uuid4()
    guard = BudgetGuard(Budget(usd=1e9))
    ObserverSet([guard])
    guard.on_run_start(RunStartContext(run_id=run_id, time_ns=0, session_id=run_id))
    unpriced_event = StreamSuccessContext(
        run_id=run_id,
        time_ns=0,
        turn=0,
        model="gpt-4o",
        provider="openai",
        input_tokens=12_000,
        output_tokens=800,
        cache_read_input_tokens=4_000,
    )
    priced_event = StreamSuccessContext(
        run_id=run_id,
        time_ns=0,
        turn=0,
        model="gpt-4o",
        provider="openai",
        input_tokens=12_000,
        output_tokens=800,
        cache_read_input_tokens=4_000,
        cost_usd=0.0265,
    )

    timings = [
        bare,
        timed(
            "GenAIPrices: gpt-4o at openai, cache reads",
            lambda: prices.cost_usd("gpt-4o", "openai", USAGE),
        ),
        timed(
            "GenAIPrices: a model with no price",
            lambda: prices.cost_usd("house-model-7b", "ollama", USAGE),
        ),
        timed("ModelRates (user price)", lambda: rates.cost_usd("house-model", "local", USAGE)),
        timed("AgentLoop per call: price + spend + budget check", per_call),
        timed(
            "BudgetGuard.on_stream_success, event priced by its emitter",
            lambda: guard.on_stream_success(priced_event),
        ),
        timed(
            "BudgetGuard.on_stream_success, the guard prices it",
            lambda: guard.on_stream_success(unpriced_event),
        ),
        timed(
            "genai_prices.calc_price directly (reference)",
            lambda: genai_prices.calc_price(gp_usage, "gpt-4o", provider_id="openai"),
        ),
    ]
    return [
        {
            "name": t.name,
            "best_ns": t.best_ns,
            "median_ns": t.median_ns,
            "baseline_ns": bare.median_ns,
        }
        for t in timings
    ]


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    """Run the benchmarks, print the table, return the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer, shorter repeats")
    args = parser.parse_args(argv)
    out = rows(3 if args.quick else 7, 0.02 if args.quick else 0.2)
    print_table(
        ["per model call", "best", "median", "vs bare Counter.inc()"],
        [
            [
                r["name"],
                fmt_ns(r["best_ns"]),
                fmt_ns(r["median_ns"]),
                fmt_ratio(r["median_ns"], r["baseline_ns"]),
            ]
            for r in out
        ],
    )
    return out


if __name__ == "__main__":
    main()
