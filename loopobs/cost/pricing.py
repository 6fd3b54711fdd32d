"""What a model call cost, in USD: one small lookup interface, ``genai-prices`` by default.

A :class:`PriceLookup` turns a call's model, provider and token :class:`Usage`
into US dollars, or ``None`` when the model has no known price — an unknown
cost is never reported as 0. :func:`price_lookup` builds the lookup a loop uses
from what the user gives (``AgentLoop(prices=...)``):

- ``None``: :class:`GenAIPrices`, the offline price database of the
  ``genai-prices`` package (the optional ``cost`` extra). Its bundled snapshot is
  used as installed; nothing here fetches prices from the network. An
  application that wants fresh prices starts ``genai_prices.UpdatePrices`` itself,
  and lookups read whatever snapshot is current.
- a mapping of model name (or ``"provider/model"``) to :class:`ModelRates` or a
  USD figure per call: user prices for custom and local models, tried first;
- a callable ``(model, provider, usage) -> float | None``: the user's own
  pricing, tried first; ``None`` falls through to ``genai-prices``;
- any :class:`PriceLookup`, used as is.

``genai-prices`` is imported on the first lookup, so the core runs without it
(every cost is then unknown).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from loopobs.contract.events import Usage
from loopobs.contract.token_counts import plausible_token_count

__all__ = [
    "GenAIPrices",
    "ModelRates",
    "PriceLookup",
    "PricesArg",
    "default_prices",
    "known_cost",
    "price_lookup",
    "safe_cost",
]

logger = logging.getLogger("loopobs.pricing")

_COUNTS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_write_input_tokens",
    "reasoning_output_tokens",
)


@runtime_checkable
class PriceLookup(Protocol):
    """Prices one model call. Implementations must be cheap, thread-safe and never raise."""

    def cost_usd(
        self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
    ) -> float | None:
        """USD for ``usage`` on ``model`` at ``provider``; ``None`` when the price is unknown.

        ``response_model`` is the model the provider says answered (an Azure
        deployment's real model, a dated snapshot); it is tried when ``model``
        itself has no price.
        """
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRates:
    """A user's price for a model, in USD per million tokens.

    Cached input tokens are priced at ``cache_read_per_mtok`` /
    ``cache_write_per_mtok`` when given (else as plain input), reasoning tokens
    at ``reasoning_per_mtok`` when given (else as plain output).
    """

    input_per_mtok: float
    output_per_mtok: float
    cache_read_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    reasoning_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in (
            "input_per_mtok",
            "output_per_mtok",
            "cache_read_per_mtok",
            "cache_write_per_mtok",
            "reasoning_per_mtok",
        ):
            rate = getattr(self, name)
            if rate is not None:
                _check_rate(f"ModelRates.{name}", rate)

    def usd(self, usage: Usage) -> float:
        """USD for ``usage`` at these rates."""
        cached_read = usage.cache_read_input_tokens if self.cache_read_per_mtok is not None else 0
        cached_write = (
            usage.cache_write_input_tokens if self.cache_write_per_mtok is not None else 0
        )
        reasoning = usage.reasoning_output_tokens if self.reasoning_per_mtok is not None else 0
        total = (
            (usage.input_tokens - cached_read - cached_write) * self.input_per_mtok
            + cached_read * (self.cache_read_per_mtok or 0.0)
            + cached_write * (self.cache_write_per_mtok or 0.0)
            + (usage.output_tokens - reasoning) * self.output_per_mtok
            + reasoning * (self.reasoning_per_mtok or 0.0)
        )
        return max(0.0, total) / 1_000_000


def _check_rate(name: str, rate: object) -> None:
    """Refuse a rate that is not a finite, non-negative number (a NaN would disable budgets)."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise TypeError(f"{name} must be a number, got {rate!r}")
    if not math.isfinite(rate) or rate < 0:
        raise ValueError(f"{name} must be a finite, non-negative number, got {rate!r}")


def known_cost(cost: object) -> float | None:
    """``cost`` as USD if it is a finite, non-negative number; else None (unknown)."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float)):
        return None
    value = float(cost)
    return value if math.isfinite(value) and value >= 0 else None


PriceFunction = Callable[[str, str, Usage], float | None]
"""The user's own pricing: ``(model, provider, usage) -> USD``, or None to fall through."""

PricesArg = PriceLookup | Mapping[str, ModelRates | float] | PriceFunction | None
"""What ``AgentLoop(prices=...)`` and :class:`~loopobs.cost.budget.BudgetGuard` accept."""


class GenAIPrices:
    """The ``genai-prices`` database: offline, matched per provider, cache and tiers included.

    A model is matched, in order: under ``provider`` when ``genai-prices`` knows
    that provider (``openai``, ``anthropic``, ``openrouter``, ``azure``, …); for a
    prefixed name (``openai/gpt-4o``) under the prefix; then by the model name
    alone, as ``genai-prices`` itself matches a name without a provider. The
    response model is tried the same way when the request model has no price.
    The price itself is ``genai-prices``' own calculation for the usage, at the
    time of the call.

    Resolutions are cached per (model, provider, response model) and dropped
    when the package's current price snapshot changes. The database is loaded on
    the first lookup (a fraction of a second, once per process); call
    :meth:`load` at start-up to pay that before the first model call instead.

    ``genai-prices``' calculation takes a few hundred microseconds. For a model
    whose price is linear in the token counts (no tiers), the per-token rates
    are read off that calculation once — and checked against it on usages from
    small to past any tier — and a call is then priced with five multiplications;
    the rates are taken afresh every :data:`RATES_TTL_S` seconds, so time-bound
    prices move on. A model whose check fails is priced by ``genai-prices`` on
    every call.
    """

    RATES_TTL_S = 3600.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._snapshot: Any = None
        self._resolved: dict[tuple[str, str, str | None], tuple[Any, Any] | None] = {}
        self._rates: dict[tuple[str, str, str | None], tuple[float, _Rates | None]] = {}
        self._unavailable = False

    def load(self) -> bool:
        """Load the price database now; False when ``genai-prices`` is not installed."""
        try:
            from genai_prices import data_snapshot
        except ImportError:
            return False
        data_snapshot.get_snapshot()
        return True

    def cost_usd(
        self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
    ) -> float | None:
        """USD from ``genai-prices``, or ``None`` (unknown model, package missing, bad usage)."""
        if self._unavailable:
            return None
        try:
            key = (model, provider, response_model)
            cached = self._rates.get(key)
            if (
                cached is not None
                and cached[1] is not None
                and _plain(usage)
                and time.monotonic() - cached[0] < self.RATES_TTL_S
                and self._current()
            ):
                return cached[1].cost(usage)
            found = self._resolve(model, provider, response_model)
            if found is None:
                return None
            if cached is None or time.monotonic() - cached[0] >= self.RATES_TTL_S:
                rates = _linear_rates(lambda u: self._calc(found, u))
                with self._lock:
                    self._rates[key] = (time.monotonic(), rates)
                if rates is not None and _plain(usage):
                    return rates.cost(usage)
            return self._calc(found, usage)
        except Exception as exc:  # never let pricing break a run; the cost is then unknown
            logger.warning(
                "cannot price %s at %s: %s: %s", model, provider, type(exc).__name__, exc
            )
            return None

    def _current(self) -> bool:
        """Whether the package's price snapshot is still the one the rates came from."""
        from genai_prices import data_snapshot

        return data_snapshot.get_snapshot() is self._snapshot

    def _calc(self, found: tuple[Any, Any], usage: Usage) -> float:
        gp_provider, gp_model = found
        calc = gp_model.calc_price(
            _gp_usage(usage),
            gp_provider,
            auto_update_timestamp=_auto_update_timestamp(self._snapshot),
        )
        return float(calc.total_price)

    def _resolve(
        self, model: str, provider: str, response_model: str | None
    ) -> tuple[Any, Any] | None:
        try:
            from genai_prices import data_snapshot
        except ImportError:
            self._unavailable = True
            logger.warning(
                "genai-prices is not installed (pip install 'loopobs[cost]'); "
                "model call costs are unknown"
            )
            return None
        snapshot = data_snapshot.get_snapshot()
        key = (model, provider, response_model)
        with self._lock:
            if snapshot is not self._snapshot:
                self._snapshot = snapshot
                self._resolved = {}
                self._rates = {}
            if key in self._resolved:
                return self._resolved[key]
        found = None
        for ref in (model, response_model):
            if ref:
                found = _match(snapshot, ref, provider)
                if found is not None:
                    break
        with self._lock:
            if snapshot is self._snapshot:
                self._resolved[key] = found
        return found


def _match(snapshot: Any, ref: str, provider: str) -> tuple[Any, Any] | None:
    from genai_prices.data_snapshot import find_provider_by_id

    attempts: list[tuple[str, str | None]] = []
    if provider and find_provider_by_id(snapshot.providers, provider) is not None:
        attempts.append((ref, provider))
    prefix, slash, rest = ref.partition("/")
    if slash and rest and find_provider_by_id(snapshot.providers, prefix) is not None:
        attempts.append((rest, prefix))
    attempts.append((ref, None))
    for model_ref, provider_id in attempts:
        try:
            provider_obj, model_obj = snapshot.find_provider_model(
                model_ref, None, provider_id, None
            )
            return provider_obj, model_obj
        except LookupError:
            continue
    return None


@dataclass(frozen=True, slots=True)
class _Rates:
    """USD per token of each kind, for a price linear in the token counts."""

    base: float
    input: float
    output: float
    cache_read: float
    cache_write: float
    reasoning: float

    def cost(self, usage: Usage) -> float:
        return (
            self.base
            + usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_input_tokens * self.cache_read
            + usage.cache_write_input_tokens * self.cache_write
            + usage.reasoning_output_tokens * self.reasoning
        )


# Usages the linear rates must reproduce: small, mixed, and large enough to pass any
# context-length tier (a tiered price is then priced by genai-prices on every call).
_PROBES = (
    Usage(
        input_tokens=1_234,
        output_tokens=567,
        cache_read_input_tokens=200,
        cache_write_input_tokens=30,
        reasoning_output_tokens=50,
    ),
    Usage(
        input_tokens=180_000,
        output_tokens=9_000,
        cache_read_input_tokens=60_000,
        reasoning_output_tokens=4_000,
    ),
    Usage(
        input_tokens=3_000_000,
        output_tokens=250_000,
        cache_read_input_tokens=1_000_000,
        cache_write_input_tokens=500_000,
        reasoning_output_tokens=100_000,
    ),
)
_N = 1_000_000


def _plain(usage: Usage) -> bool:
    """A usage genai-prices accepts: cached within input, reasoning within output."""
    return (
        usage.cache_read_input_tokens + usage.cache_write_input_tokens <= usage.input_tokens
        and usage.reasoning_output_tokens <= usage.output_tokens
        and min(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_input_tokens,
            usage.cache_write_input_tokens,
            usage.reasoning_output_tokens,
        )
        >= 0
    )


def _linear_rates(calc: Callable[[Usage], float]) -> _Rates | None:
    """Per-token rates that reproduce ``calc`` on every probe, or None if it is not linear."""
    base = calc(Usage())
    per_input = (calc(Usage(input_tokens=_N)) - base) / _N
    per_output = (calc(Usage(output_tokens=_N)) - base) / _N
    # Cached and reasoning tokens are parts of input and output: priced by what they add.
    cache_read = (calc(Usage(input_tokens=_N, cache_read_input_tokens=_N)) - base) / _N - per_input
    cache_write = (
        calc(Usage(input_tokens=_N, cache_write_input_tokens=_N)) - base
    ) / _N - per_input
    reasoning = (calc(Usage(output_tokens=_N, reasoning_output_tokens=_N)) - base) / _N - per_output
    rates = _Rates(base, per_input, per_output, cache_read, cache_write, reasoning)
    for probe in _PROBES:
        expected = calc(probe)
        if not math.isclose(rates.cost(probe), expected, rel_tol=1e-9, abs_tol=1e-12):
            return None
    return rates


def _gp_usage(usage: Usage) -> Any:
    from genai_prices import Usage as GPUsage

    return GPUsage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_tokens=usage.cache_write_input_tokens,
        output_reasoning_tokens=usage.reasoning_output_tokens,
    )


def _auto_update_timestamp(snapshot: Any) -> Any:
    return snapshot.timestamp if getattr(snapshot, "from_auto_update", False) else None


class _Overrides:
    """User prices first (by ``provider/model``, then model), then the fallback lookup."""

    def __init__(self, rates: Mapping[str, ModelRates | float], fallback: PriceLookup) -> None:
        for name, rate in rates.items():
            if not isinstance(rate, (ModelRates, int, float)) or isinstance(rate, bool):
                raise TypeError(f"prices[{name!r}] must be ModelRates or a USD figure per call")
            if not isinstance(rate, ModelRates):
                _check_rate(f"prices[{name!r}]", rate)
        self._rates = dict(rates)
        self._fallback = fallback

    def cost_usd(
        self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
    ) -> float | None:
        rates = self._rates
        for key in (f"{provider}/{model}", model, response_model):
            if key is not None and key in rates:
                rate = rates[key]
                return rate.usd(usage) if isinstance(rate, ModelRates) else float(rate)
        return self._fallback.cost_usd(model, provider, usage, response_model=response_model)


class _Function:
    """The user's function first; its ``None`` (or its failure) falls through to the fallback."""

    def __init__(self, fn: PriceFunction, fallback: PriceLookup) -> None:
        self._fn = fn
        self._fallback = fallback

    def cost_usd(
        self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
    ) -> float | None:
        try:
            cost = self._fn(model, provider, usage)
        except Exception as exc:
            logger.warning(
                "the price function raised for %s at %s: %s: %s",
                model,
                provider,
                type(exc).__name__,
                exc,
            )
            cost = None
        if cost is not None:
            return float(cost)
        return self._fallback.cost_usd(model, provider, usage, response_model=response_model)


_default: GenAIPrices | None = None
_default_lock = threading.Lock()


def default_prices() -> GenAIPrices:
    """The process-wide :class:`GenAIPrices` (one resolution cache shared by every loop)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = GenAIPrices()
    return _default


def safe_cost(
    prices: PriceLookup,
    model: str,
    provider: str,
    usage: Usage,
    *,
    response_model: str | None = None,
) -> float | None:
    """``prices.cost_usd(...)``, or None (unknown) when the price cannot be trusted.

    A lookup that raises, or answers anything but a finite, non-negative number
    (NaN, infinity, a string), is read as unknown, and so is a usage with an
    implausible token count (:func:`~loopobs.contract.token_counts.plausible_usage`):
    a user's price lookup never breaks the run it prices, and an unknown cost is
    never a number that would disable a USD budget or poison a counter.
    """
    if not _plausible(usage):
        return None
    try:
        cost = prices.cost_usd(model, provider, usage, response_model=response_model)
        return known_cost(cost)
    except Exception as exc:
        logger.warning(
            "the price lookup raised for %s at %s: %s: %s", model, provider, type(exc).__name__, exc
        )
        return None


def _plausible(usage: Usage) -> bool:
    return all(plausible_token_count(getattr(usage, name)) is not None for name in _COUNTS)


def price_lookup(prices: PricesArg = None) -> PriceLookup:
    """The lookup for ``prices`` (see the module docstring for what each form means)."""
    if prices is None:
        return default_prices()
    if isinstance(prices, Mapping):
        return _Overrides(prices, default_prices())
    if isinstance(prices, PriceLookup):
        return prices
    if callable(prices):
        return _Function(prices, default_prices())
    raise TypeError(f"prices must be a mapping, a function or a PriceLookup, got {prices!r}")
