"""Event contexts built through their slot-assigning ``__init__`` behave as dataclasses say."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import pytest

from loopobs.contract.events import CONTEXT_TYPES


def _required(cls: Any) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for n, f in enumerate(dataclasses.fields(cls)):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            values[f.name] = uuid.uuid4() if f.name.endswith("_id") and "UUID" in str(f.type) \
                else f"v{n}"
    return values


@pytest.mark.parametrize("cls", list(CONTEXT_TYPES.values()), ids=list(CONTEXT_TYPES))
def test_fields_defaults_and_checks_are_the_dataclass_ones(cls: Any) -> None:
    required = _required(cls)
    ctx = cls(**required)
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        expected = required.get(f.name, default)
        assert getattr(ctx, f.name) == expected
    assert ctx == cls(**required)
    assert dataclasses.replace(ctx) == ctx
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.time_ns = 1
    with pytest.raises(TypeError):
        cls(**required, not_a_field=1)
    missing = dict(required)
    missing.pop("run_id")
    with pytest.raises(TypeError):
        cls(**missing)
    with pytest.raises(TypeError):
        cls(*required.values())
