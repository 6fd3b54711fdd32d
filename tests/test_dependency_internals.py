"""loopobs uses only the public APIs of OpenTelemetry and prometheus-client.

The rule, checked on the source of every module of ``loopobs`` that imports one of
those packages (the modules that hold their objects):

- no ``_``-prefixed name is imported from them, and no ``_``-prefixed module of
  theirs, except the homes of their unstable APIs that have no public spelling yet
  (:data:`UNSTABLE_API_MODULES`);
- no ``_``-prefixed attribute (dunders aside) is read or written on anything but
  ``self``/``cls`` themselves (``self._a._b`` reads ``_b`` of ``self._a``), directly
  or through ``getattr`` and its kin with a literal name, except on the few objects
  of our own listed in :data:`OWN_OBJECTS`.

Any other private access fails here: record through the public API instead (a kept
``labels()`` child's ``inc``/``observe``, an instrument's ``record``/``add``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopobs.exporters import MetricsObserver
from tests._ast import parse

PACKAGES = ("opentelemetry", "prometheus_client")
ROOT = Path(__file__).resolve().parents[1] / "loopobs"

UNSTABLE_API_MODULES = frozenset(
    {
        "opentelemetry._logs",  # the Logs API (GenAI events): OpenTelemetry Python's only spelling
        "opentelemetry.sdk._logs",
        "opentelemetry.semconv._incubating.attributes",  # the development-status conventions
        "opentelemetry.semconv._incubating.metrics",
    }
)
"""Modules whose names start with ``_`` because the API they hold is not stable yet."""

OWN_OBJECTS = frozenset(
    {
        ("exporters/setup.py", "telemetry", "_at_exit"),  # our Telemetry, registered with atexit
        ("exporters/tracing.py", "asyncio", "_get_running_loop"),  # the standard library
        ("mcp/source.py", "source", "_start"),  # our McpToolSource, in its own classmethod
    }
)
"""(module, object, attribute): private attributes of objects that are not the packages'."""

_ACCESSORS = frozenset(
    {"getattr", "setattr", "hasattr", "delattr", "__getattribute__", "__setattr__", "__delattr__"}
)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _from_packages(module: str) -> bool:
    return module.partition(".")[0] in PACKAGES


def _imports_packages(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_from_packages(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and _from_packages(node.module):
            return True
    return False


def _accessor(func: ast.expr) -> bool:
    """``getattr`` and its kin, or ``object.__setattr__`` and its kin."""
    if isinstance(func, ast.Name):
        return func.id in _ACCESSORS
    return isinstance(func, ast.Attribute) and func.attr in _ACCESSORS


def violations(source: str, module: str) -> Iterator[str]:
    """Each private access of ``source`` (the module ``module``, relative to loopobs/)."""
    tree = parse(source)
    if not _imports_packages(tree):
        return
    for node in ast.walk(tree):
        where = f"{module}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (
                    _from_packages(alias.name)
                    and alias.name not in UNSTABLE_API_MODULES
                    and any(_private(part) for part in alias.name.split("."))
                ):
                    yield f"{where}: imports {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.module and _from_packages(node.module):
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in UNSTABLE_API_MODULES or node.module in UNSTABLE_API_MODULES:
                    continue
                if any(_private(part) for part in full.split(".")):
                    yield f"{where}: imports {full}"
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = ast.unparse(node.value)  # `self._a._b`: `_b` is self._a's, not self's
            if owner not in ("self", "cls") and (module, owner, node.attr) not in OWN_OBJECTS:
                yield f"{where}: {ast.unparse(node)}"
        elif isinstance(node, ast.Call) and _accessor(node.func) and len(node.args) >= 2:
            name = node.args[1]
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and _private(name.value)
                and ast.unparse(node.args[0]) not in ("self", "cls")
            ):
                yield f"{where}: {ast.unparse(node)}"


def test_no_module_reads_or_writes_the_packages_internals() -> None:
    found = [
        v
        for path in sorted(ROOT.rglob("*.py"))
        for v in violations(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())
    ]
    assert found == []


@pytest.mark.parametrize(
    "source",
    [
        "from prometheus_client import Counter\ndef f(c):\n    return c._value\n",
        "import prometheus_client\ndef f(c):\n    return getattr(c, '_sum', None)\n",
        "from opentelemetry.sdk.metrics._internal.instrument import Histogram\n",
        "from opentelemetry.sdk.metrics import _internal\n",
        "from opentelemetry import metrics\ndef f(i):\n    i._measurement_consumer = None\n",
        "from opentelemetry import metrics\ndef f(i):\n    object.__setattr__(i, '_x', 1)\n",
        "from opentelemetry import metrics\ndef f(i):\n    return i.meter._sdk_config\n",
        "from opentelemetry import metrics\nclass A:\n    def f(self):\n"
        "        return self._consumer._sdk_config\n",
    ],
)
def test_the_scan_finds_private_access(source: str) -> None:
    assert list(violations(source, "exporters/example.py"))


@pytest.mark.parametrize(
    "source",
    [
        "from prometheus_client import Counter\n"
        "class A:\n    def f(self):\n        return self._x\n",
        "from opentelemetry import _logs\nfrom opentelemetry.semconv._incubating.metrics import "
        "gen_ai_metrics\n",
        "def f(c):\n    return c._value\n",  # a module that never sees the packages' objects
    ],
)
def test_the_scan_allows_own_objects_and_unstable_api_homes(source: str) -> None:
    assert list(violations(source, "exporters/example.py")) == []


def test_bound_instruments_is_accepted_with_a_warning_and_changes_nothing() -> None:
    from opentelemetry.metrics import NoOpMeterProvider

    with pytest.warns(DeprecationWarning, match="bound_instruments"):
        MetricsObserver(NoOpMeterProvider(), bound_instruments=False)
