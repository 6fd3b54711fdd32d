"""Check that .venv-min holds what `make test-adapters-min` claims to test.

Each framework pinned in scripts/adapters-min-constraints.txt must be installed at exactly its
pin, and every pin of a package an adapter extra of pyproject.toml names must equal that
extra's lower bound (so the pins follow the declared ranges when these move). The same holds
for OpenTelemetry: the core's dependencies and the ``otel`` extra are pinned at their lower
bounds, so the exporters' tests run on the lowest OpenTelemetry release the package admits.
Exits non-zero naming each mismatch.
"""

from __future__ import annotations

import sys
from importlib.metadata import version
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = ("otel", "langchain", "otel-adapter", "openai-agents", "pydantic-ai")


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (ROOT / "scripts" / "adapters-min-constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, pinned = line.partition("==")
            pins[canonicalize_name(name)] = pinned.strip()
    return pins


def _lower_bounds() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    bounds: dict[str, str] = {}
    lines = list(project["dependencies"])
    for extra in EXTRAS:
        lines += project["optional-dependencies"][extra]
    for line in lines:
        requirement = Requirement(line)
        for spec in requirement.specifier:
            if spec.operator == ">=":
                bounds[canonicalize_name(requirement.name)] = spec.version
    return bounds


def main() -> int:
    pins, bounds = _pins(), _lower_bounds()
    problems = [
        f"{name}: installed {version(name)}, pinned {pinned}"
        for name, pinned in pins.items()
        if version(name) != pinned
    ]
    problems += [
        f"{name}: pinned {pins[name]}, the extra's lower bound is {bound}"
        for name, bound in bounds.items()
        if name in pins and Version(pins[name]) != Version(bound)
    ]
    for problem in problems:
        print(f"adapters-min: {problem}", file=sys.stderr)
    if not problems:
        print("adapters-min: " + ", ".join(f"{n} {v}" for n, v in sorted(pins.items())))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
