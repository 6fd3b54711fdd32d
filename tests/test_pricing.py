"""Model call prices: genai-prices' own figures, user overrides, and unknown stays unknown."""

from __future__ import annotations

import math

# A dev dependency: a plain import, so a missing package fails the suite instead of skipping.
import genai_prices
import pytest

from loopobs import GenAIPrices, ModelRates, PriceLookup, Usage, price_lookup


def reference(usage: Usage, model: str, provider: str | None) -> float:
    """genai-prices' own calculation for the same usage."""
    gp_usage = genai_prices.Usage(
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_tokens=usage.cache_write_input_tokens,
        output_reasoning_tokens=usage.reasoning_output_tokens,
    )
    return float(genai_prices.calc_price(gp_usage, model, provider_id=provider).total_price)


CASES = [
    # (our provider name, model, genai-prices provider, usage)
    (
        "openai",
        "gpt-4o",
        "openai",
        Usage(input_tokens=12_000, output_tokens=800, cache_read_input_tokens=4_000),
    ),
    (
        "openai",
        "o3",
        "openai",
        Usage(input_tokens=3_000, output_tokens=9_000, reasoning_output_tokens=7_500),
    ),
    (
        "anthropic",
        "claude-sonnet-4-5",
        "anthropic",
        Usage(
            input_tokens=20_000,
            output_tokens=1_000,
            cache_read_input_tokens=12_000,
            cache_write_input_tokens=5_000,
        ),
    ),
    (
        "anthropic",
        "claude-3-5-haiku-latest",
        "anthropic",
        Usage(input_tokens=1_000, output_tokens=300),
    ),
    (
        "google",
        "gemini-2.5-pro",
        "google",  # past 200k input tokens: the upper price tier
        Usage(
            input_tokens=250_000,
            output_tokens=2_000,
            cache_read_input_tokens=50_000,
            reasoning_output_tokens=1_200,
        ),
    ),
    ("openrouter", "openai/gpt-4o", "openrouter", Usage(input_tokens=5_000, output_tokens=500)),
    ("groq", "llama-3.3-70b-versatile", "groq", Usage(input_tokens=7_000, output_tokens=700)),
]


@pytest.mark.parametrize(
    ("provider", "model", "gp_provider", "usage"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES]
)
def test_cost_equals_genai_prices_own_calculation(
    provider: str, model: str, gp_provider: str, usage: Usage
) -> None:
    """Cache reads/writes, reasoning and price tiers priced exactly as genai-prices prices them."""
    cost = GenAIPrices().cost_usd(model, provider, usage)
    expected = reference(usage, model, gp_provider)
    assert cost is not None
    assert expected > 0
    assert math.isclose(cost, expected, rel_tol=1e-12)


def test_cached_and_reasoning_tokens_change_the_price() -> None:
    """A cache read is cheaper than plain input; reasoning tokens are paid as output."""
    prices = GenAIPrices()
    plain = prices.cost_usd("gpt-4o", "openai", Usage(input_tokens=10_000, output_tokens=100))
    cached = prices.cost_usd(
        "gpt-4o",
        "openai",
        Usage(input_tokens=10_000, output_tokens=100, cache_read_input_tokens=8_000),
    )
    assert plain is not None
    assert cached is not None
    assert cached < plain
    with_reasoning = prices.cost_usd(
        "o3", "openai", Usage(input_tokens=100, output_tokens=5_000, reasoning_output_tokens=4_000)
    )
    without = prices.cost_usd("o3", "openai", Usage(input_tokens=100, output_tokens=5_000))
    assert with_reasoning == without


def test_load_reads_the_database_ahead_of_the_first_call() -> None:
    """load() says the database is there; lookups then price as usual."""
    prices = GenAIPrices()
    assert prices.load() is True
    assert prices.cost_usd("gpt-4o", "openai", Usage(input_tokens=10)) is not None


def test_unknown_model_is_unknown_never_zero() -> None:
    """A model genai-prices cannot match has no price: None, not 0."""
    prices = GenAIPrices()
    usage = Usage(input_tokens=1_000, output_tokens=100)
    assert prices.cost_usd("my-finetune-7b", "ollama", usage) is None
    assert prices.cost_usd("no-such-model", "openai", usage) is None


def test_provider_prefixed_names_resolve() -> None:
    """``openai/gpt-4o`` prices as gpt-4o through OpenRouter, and under its prefix elsewhere."""
    prices = GenAIPrices()
    usage = Usage(input_tokens=5_000, output_tokens=500)
    direct = reference(usage, "gpt-4o", "openai")
    assert prices.cost_usd("openai/gpt-4o", "openrouter", usage) == pytest.approx(direct)
    # a proxy or gateway our client does not know by name: the prefix names the provider
    assert prices.cost_usd("openai/gpt-4o", "my-gateway", usage) == pytest.approx(direct)


def test_azure_deployment_prices_by_its_response_model() -> None:
    """A deployment name has no price; the model the response names does."""
    prices = GenAIPrices()
    usage = Usage(input_tokens=2_000, output_tokens=200)
    assert prices.cost_usd("prod-chat-deployment", "azure", usage) is None
    cost = prices.cost_usd(
        "prod-chat-deployment", "azure", usage, response_model="gpt-4o-2024-08-06"
    )
    assert cost == pytest.approx(reference(usage, "gpt-4o-2024-08-06", "azure"))


def test_an_unknown_provider_falls_back_to_the_model_name() -> None:
    """A provider genai-prices does not know (our scripted client) is matched by model alone."""
    usage = Usage(input_tokens=1_000, output_tokens=100)
    assert GenAIPrices().cost_usd("gpt-4o-mini", "scripted", usage) == pytest.approx(
        reference(usage, "gpt-4o-mini", None)
    )


def test_usage_genai_prices_refuses_is_an_unknown_cost() -> None:
    """More cached than total input tokens is not a price: None, and no exception escapes."""
    bad = Usage(input_tokens=10, output_tokens=1, cache_read_input_tokens=500)
    assert GenAIPrices().cost_usd("gpt-4o", "openai", bad) is None


def test_a_changed_price_snapshot_is_picked_up() -> None:
    """Resolutions are cached per snapshot: a custom snapshot (an update) takes effect."""
    from genai_prices import data_snapshot

    prices = GenAIPrices()
    usage = Usage(input_tokens=1_000, output_tokens=100)
    before = prices.cost_usd("gpt-4o", "openai", usage)
    assert before is not None
    data_snapshot.set_custom_snapshot(
        data_snapshot.DataSnapshot(providers=[], from_auto_update=True)
    )
    try:
        assert prices.cost_usd("gpt-4o", "openai", usage) is None
    finally:
        data_snapshot.set_custom_snapshot(None)
    assert prices.cost_usd("gpt-4o", "openai", usage) == before


# -- user overrides ----------------------------------------------------------------------------


def test_user_rates_price_custom_models_first() -> None:
    """A mapping prices its models (by ``provider/model`` or model); others go to genai-prices."""
    lookup = price_lookup(
        {
            "local/llama3": ModelRates(input_per_mtok=0.1, output_per_mtok=0.2),
            "my-ft": ModelRates(
                input_per_mtok=1.0,
                output_per_mtok=4.0,
                cache_read_per_mtok=0.5,
                reasoning_per_mtok=8.0,
            ),
            "free-model": 0.0,
        }
    )
    usage = Usage(input_tokens=1_000_000, output_tokens=500_000)
    assert lookup.cost_usd("llama3", "local", usage) == pytest.approx(0.1 + 0.1)
    assert lookup.cost_usd("llama3", "other", usage) is None
    rich = Usage(
        input_tokens=1_000_000,
        output_tokens=1_000_000,
        cache_read_input_tokens=400_000,
        reasoning_output_tokens=250_000,
    )
    assert lookup.cost_usd("my-ft", "x", rich) == pytest.approx(
        0.6 * 1.0 + 0.4 * 0.5 + 0.75 * 4.0 + 0.25 * 8.0
    )
    assert lookup.cost_usd("free-model", "x", usage) == 0.0
    assert lookup.cost_usd("gpt-4o", "openai", usage) == pytest.approx(
        reference(usage, "gpt-4o", "openai")
    )


def test_a_price_function_wins_and_none_falls_through() -> None:
    """The user's function prices first; its None (or its failure) falls to genai-prices."""

    def mine(model: str, provider: str, usage: Usage) -> float | None:
        if model == "boom":
            raise RuntimeError("price function bug")
        return 0.42 if provider == "inhouse" else None

    lookup = price_lookup(mine)
    usage = Usage(input_tokens=1_000, output_tokens=100)
    assert lookup.cost_usd("anything", "inhouse", usage) == 0.42
    assert lookup.cost_usd("gpt-4o", "openai", usage) == pytest.approx(
        reference(usage, "gpt-4o", "openai")
    )
    assert lookup.cost_usd("boom", "nowhere", usage) is None


def test_a_lookup_object_is_used_as_is_and_bad_arguments_are_refused() -> None:
    """Any PriceLookup passes through; a mapping value must be rates or a figure."""

    class Flat:
        def cost_usd(
            self, model: str, provider: str, usage: Usage, *, response_model: str | None = None
        ) -> float | None:
            return 1.0

    flat = Flat()
    assert isinstance(flat, PriceLookup)
    assert price_lookup(flat) is flat
    assert price_lookup(None) is price_lookup(None)
    with pytest.raises(TypeError):
        price_lookup({"m": "cheap"})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        price_lookup(42)  # type: ignore[arg-type]


def test_without_genai_prices_every_cost_is_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package missing (the `cost` extra not installed): costs are None, nothing raises."""
    import sys

    for name in [n for n in sys.modules if n == "genai_prices" or n.startswith("genai_prices.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    prices = GenAIPrices()
    assert prices.load() is False
    assert prices.cost_usd("gpt-4o", "openai", Usage(input_tokens=10)) is None
    assert prices.cost_usd("gpt-4o", "openai", Usage(input_tokens=10)) is None


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "gpt-4o"),
        ("openai", "o3"),
        ("openai", "gpt-4o-mini"),
        ("anthropic", "claude-sonnet-4-5"),  # a long-context tier
        ("google", "gemini-2.5-pro"),  # a tier above 200k input tokens
    ],
)
def test_repeated_calls_keep_genai_prices_figures(provider: str, model: str) -> None:
    """Prices read off as per-token rates (flat models) equal genai-prices on every usage.

    The second and later calls of a model take the fast path where its price is linear;
    tiered prices stay with genai-prices' calculation, across their tier boundaries too.
    """
    import random

    rng = random.Random(7)
    prices = GenAIPrices()
    for _ in range(60):
        inputs = rng.choice([rng.randint(0, 5_000), rng.randint(100_000, 400_000)])
        outputs = rng.randint(0, 20_000)
        usage = Usage(
            input_tokens=inputs,
            output_tokens=outputs,
            cache_read_input_tokens=rng.randint(0, inputs // 2),
            cache_write_input_tokens=rng.randint(0, inputs // 4),
            reasoning_output_tokens=rng.randint(0, outputs),
        )
        cost = prices.cost_usd(model, provider, usage)
        assert cost is not None
        assert math.isclose(cost, reference(usage, model, provider), rel_tol=1e-9, abs_tol=1e-12)
    bad = Usage(input_tokens=10, output_tokens=1, cache_read_input_tokens=500)
    assert prices.cost_usd(model, provider, bad) is None  # the fast path refuses it too
