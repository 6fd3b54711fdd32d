"""Bound OpenTelemetry instruments: record into the SDK's aggregations without re-resolving them.

Why this exists: the SDK's ``Histogram.record`` and ``Counter.add`` clean,
copy and hash the attribute dict on every call, then look the aggregation up
per reader and view. On opentelemetry-sdk 1.45 that is 7–10 µs of a 10 µs
record, and 2–3× that inside a busy event loop, though ``MetricsObserver``
records a few fixed attribute sets per metric. A :class:`BoundRecord` does that
lookup once per (instrument, attribute set) and then, per value, does what the
SDK does after it: build the measurement, ask the provider's exemplar filter,
and hand the measurement to every aggregation the readers keep for those
attributes. The exported data (sums, counts, buckets, min/max, exemplars,
start times) is the same as through the public API.

It reads SDK internals, so it is used only on the SDK releases it was verified
against (:data:`VERIFIED_SDK`; any other release records through the public
API), and each record falls back to the public API
whenever the binding might not hold:

- a reader resets its aggregations on collect (delta temporality), or the
  provider gained or lost a reader since binding (it rebinds);
- the instrument is disabled by the meter's configuration;
- a value the SDK would reject (negative, NaN, infinite): the public API logs
  and drops it, as it always did.

Nothing is bound before a value the SDK accepts is recorded: a bound aggregation
is exported even when empty, and the public API would export nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from time import time_ns
from typing import Any

from opentelemetry.context import Context, attach, detach, get_current

__all__ = ["VERIFIED_SDK", "BoundRecord", "PublicRecord", "Recorder", "bind",
           "fast_path_available"]

VERIFIED_SDK = frozenset({"1.45.2"})
"""SDK releases whose internals this module was checked against, exactly (1.45.0 and 1.45.1
look the aggregations up differently; a later release is trusted once the tests pass on it)."""

Attributes = Mapping[str, Any]


def fast_path_available() -> bool:
    """Whether the installed opentelemetry-sdk is a version bound recording was verified on."""
    try:
        from opentelemetry.sdk.version import __version__
    except ImportError:
        return False
    return __version__ in VERIFIED_SDK


def _sdk_instrument(instrument: Any) -> bool:
    from opentelemetry.sdk.metrics._internal.instrument import Counter, Histogram

    return isinstance(instrument, Counter | Histogram) and \
        hasattr(instrument, "_measurement_consumer")


class PublicRecord:
    """Records through the instrument's public ``record``/``add`` with fixed attributes."""

    __slots__ = ("_attributes", "_record")

    def __init__(self, record: Callable[..., None], attributes: Attributes) -> None:
        self._record = record
        self._attributes = attributes

    def __call__(self, value: float, run_id: object = None) -> None:
        """Record ``value`` now (``run_id``: the signature of a metric recorder, ignored)."""
        self._record(value, self._attributes)

    def many(self, values: Sequence[float], times: Sequence[int], context: Context) -> None:
        """Record each of ``values`` in ``context`` (for exemplars); the SDK stamps the time."""
        # The SDK takes `context or get_current()`: attached, an empty captured context
        # still wins over the one current now.
        token = attach(context)
        try:
            for value in values:
                self._record(value, self._attributes, context)
        finally:
            detach(token)


class BoundRecord:
    """Records values with one fixed attribute set into one SDK instrument.

    Call it with a value. Safe across threads: binding is idempotent and each
    aggregation takes its own lock, as in the SDK. Nothing is bound until a
    value is recorded through it: a bound aggregation is exported even empty.
    """

    __slots__ = ("_aggregations", "_attributes", "_consumer", "_fallback", "_filter",
                 "_instrument", "_lock", "_measurement", "_storages")

    def __init__(self, instrument: Any, attributes: Attributes,
                 public: Callable[..., None]) -> None:
        from opentelemetry.sdk.metrics._internal.measurement import Measurement

        self._measurement = Measurement
        self._instrument = instrument
        # The SDK's cleaning of these attributes, done once (a measurement cleans its own).
        self._attributes = Measurement(0, 0, instrument, get_current(), attributes).attributes
        self._fallback = PublicRecord(public, self._attributes or {})
        self._consumer = instrument._measurement_consumer
        self._filter = self._consumer._sdk_config.exemplar_filter
        self._lock = threading.Lock()
        self._storages: object = None
        self._aggregations: tuple[Any, ...] | None = None

    def _bind(self) -> tuple[Any, ...] | None:
        """The aggregations of every reader's views for these attributes (None: use the API)."""
        from opentelemetry.sdk.metrics._internal._view_instrument_match import _hash_attributes

        with self._lock:
            storages = self._consumer._reader_storages
            aggregations: list[Any] = []
            for storage in storages.values():
                for match in storage._get_or_init_view_instrument_match(self._instrument):
                    if match._reset_on_collect:
                        self._storages, self._aggregations = storages, None
                        return None
                    attributes = dict(self._attributes or {})
                    keys = match._view._attribute_keys
                    if keys is not None:
                        attributes = {k: v for k, v in attributes.items() if k in keys}
                    with match._lock:
                        aggregations.append(match._get_or_create_aggregation(
                            _hash_attributes(attributes), attributes))
            self._storages, self._aggregations = storages, tuple(aggregations)
            return self._aggregations

    def _bound(self) -> tuple[Any, ...] | None:
        """The aggregations for a value the SDK accepts, bound now if the readers changed."""
        if self._storages is not self._consumer._reader_storages:
            return self._bind()
        return self._aggregations

    def __call__(self, value: float, run_id: object = None) -> None:
        """Record ``value`` (through the public API when the binding does not apply).

        ``run_id`` is accepted and ignored: the signature of a metric recorder.
        """
        # What the SDK would refuse (or a disabled meter drops) goes its way, unbound.
        if not 0 <= value < math.inf or not self._instrument._is_enabled() or \
                (aggregations := self._bound()) is None:
            self._fallback(value)
            return
        now = time_ns()
        context = get_current()
        measurement = self._measurement(value, now, self._instrument, context, None)
        object.__setattr__(measurement, "attributes", self._attributes)
        sample = self._filter.should_sample(value, now, self._attributes, context)
        for aggregation in aggregations:
            aggregation.aggregate(measurement, sample)

    def many(self, values: Sequence[float], times: Sequence[int], context: Context) -> None:
        """Record each of ``values``, taken at ``times`` (ns), as if recorded in ``context``."""
        if not self._instrument._is_enabled() or \
                not any(0 <= value < math.inf for value in values) or \
                (aggregations := self._bound()) is None:
            self._fallback.many(values, times, context)
            return
        attributes, should_sample = self._attributes, self._filter.should_sample
        # One measurement for the batch, its value and time set per value: aggregations and
        # exemplar reservoirs read the fields and keep none of them (allocations cost GC time).
        measurement = self._measurement(0, 0, self._instrument, context, None)
        set_field = object.__setattr__
        set_field(measurement, "attributes", attributes)
        for value, at in zip(values, times, strict=True):
            if not 0 <= value < math.inf:
                self._fallback.many((value,), (at,), context)  # the SDK logs and drops it
                continue
            set_field(measurement, "value", value)
            set_field(measurement, "time_unix_nano", at)
            sample = should_sample(value, at, attributes, context)
            for aggregation in aggregations:
                aggregation.aggregate(measurement, sample)


Recorder = BoundRecord | PublicRecord


def bind(instrument: Any, attributes: Attributes, public: Callable[..., None]) -> Recorder:
    """A recorder of ``instrument`` with ``attributes``: bound when possible, else the API.

    ``public(value, attributes[, context])`` is the instrument's own ``record`` or ``add``.
    """
    if fast_path_available() and _sdk_instrument(instrument):
        return BoundRecord(instrument, attributes, public)
    return PublicRecord(public, attributes)
