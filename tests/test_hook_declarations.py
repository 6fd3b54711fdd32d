"""A hook is declared once: the fan-outs, the context map and the recorders' hooks follow."""

from __future__ import annotations

import typing
import uuid

import pytest
from opentelemetry.metrics import NoOpMeterProvider
from prometheus_client import CollectorRegistry

from loopobs.contract import events as ev
from loopobs.contract import observer as obs
from loopobs.contract.observer import LoopObserver, ObserverSet, listened_hooks
from loopobs.exporters import MetricsObserver, PrometheusObserver
from loopobs.exporters import catalog as c
from loopobs.exporters.event_metrics import EVENT_METRICS, EVENT_METRICS_LATEST, MetricRecorder


def test_the_context_map_is_the_modules_context_classes_in_order() -> None:
    classes = [
        value
        for name, value in vars(ev).items()
        if not name.startswith("_")
        and isinstance(value, type)
        and issubclass(value, ev.EventContext)
        and value is not ev.EventContext
    ]
    assert list(ev.CONTEXT_TYPES.values()) == classes
    assert typing.get_args(ev.HookName) == ev.HOOKS


@pytest.mark.parametrize("hook", ev.HOOKS)
def test_each_fan_out_takes_its_hooks_context(hook: ev.HookName) -> None:
    """The declaration's signature survives: type hints resolve to the hook's context class."""
    hints = typing.get_type_hints(getattr(ObserverSet, hook))
    assert hints["ctx"] is ev.CONTEXT_TYPES[hook]
    assert getattr(ObserverSet, hook).__qualname__ == f"ObserverSet.{hook}"


def test_a_declaration_that_names_no_hook_is_refused() -> None:
    def on_tool_done(self: ObserverSet, ctx: ev.ToolPostContext) -> None: ...

    with pytest.raises(TypeError, match="on_tool_done"):
        obs._fan_out(on_tool_done)


def test_the_recorders_listen_to_every_hook_their_table_names() -> None:
    table = set(EVENT_METRICS) | set(EVENT_METRICS_LATEST)
    for recorder in (MetricsObserver(NoOpMeterProvider()), PrometheusObserver(CollectorRegistry())):
        assert table <= listened_hooks(recorder)
    for hook in table:
        assert getattr(MetricRecorder, hook) is not getattr(LoopObserver, hook), hook


def test_a_hook_known_only_to_the_table_records_its_row() -> None:
    """``on_fallback`` has no method of its own on the recorders: the table's row is recorded."""
    registry = CollectorRegistry()
    recorder = PrometheusObserver(registry)
    ObserverSet([recorder], strict=True).on_fallback(
        ev.FallbackContext(run_id=uuid.uuid4(), time_ns=1, from_model="a", to_model="b")
    )
    name = c.FALLBACKS.prometheus_name
    labels = dict(zip(c.FALLBACKS.prometheus_labels, ("a", "b"), strict=True))
    assert registry.get_sample_value(name, labels) == 1.0
