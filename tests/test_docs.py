"""The documentation site: a strict build, guides whose code runs, documented public names."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from loopobs.detectors import COMPILED
from tests._ast import compile_source

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PUBLIC_MODULES = [
    "loopobs",
    "loopobs.exporters",
    "loopobs.llm",
    "loopobs.mcp",
    "loopobs.report",
    "loopobs.testing",
]


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
            line = text[: match.start()].count("\n") + 1
            found.append((str(page.relative_to(ROOT)), line, match.group(1)))
    return found


BLOCKS = _blocks()

FRAMEWORK_PAGES = {
    "docs/adapters/adk.md": "google.adk",
    "docs/adapters/strands.md": "strands",
    "docs/adapters/langchain_agents.md": "langchain.agents",
    # run in CrewAI's bridge venv instead: tests/test_otel_bridge_crewai.py (_crewai_app.py doc)
    "docs/adapters/crewai.md": "crewai",
    # run in AutoGen's bridge venv instead: tests/test_otel_bridge_autogen.py (_autogen_app.py doc)
    "docs/adapters/autogen.md": "autogen_agentchat",
}
"""Pages whose examples need a framework that lives in its own venv: they run there
(``make test-frameworks``, tests/test_frameworks_docs.py) and skip where it is absent."""


def test_there_are_guide_examples() -> None:
    assert len(BLOCKS) >= 8


@pytest.mark.parametrize(("page", "line", "code"), BLOCKS, ids=[f"{p}:{n}" for p, n, _ in BLOCKS])
def test_guide_code_block_runs(
    page: str, line: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ```python block of the guides runs as written, offline, in a scratch folder."""
    if page in FRAMEWORK_PAGES:
        pytest.importorskip(FRAMEWORK_PAGES[page], reason="make test-frameworks runs this page")
    monkeypatch.chdir(tmp_path)
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "none")
    namespace: dict[str, object] = {"__name__": f"docs_example_{line}"}
    exec(compile_source("\n" * (line) + code, str(ROOT / page)), namespace)


def _public_objects() -> list[tuple[str, object]]:
    objects: list[tuple[str, object]] = []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                objects.append((f"{module_name}.{name}", value))
    return objects


@pytest.mark.skipif(
    COMPILED,
    reason="mypyc keeps no docstrings of the classes it compiles (help() shows their signatures); "
    "the interpreted run checks the sources, which the API reference is built from",
)
def test_public_names_have_docstrings() -> None:
    """Public classes and functions, and the public methods of those classes, have docstrings."""
    missing = []
    for qualname, value in _public_objects():
        if not inspect.getdoc(value):
            missing.append(qualname)
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                if attr.startswith("_") or not inspect.isfunction(member):
                    continue
                if not (member.__doc__ or "").strip() and not _inherits_doc(value, attr):
                    missing.append(f"{qualname}.{attr}")
    assert missing == []


def _inherits_doc(cls: type, attr: str) -> bool:
    return any(
        (getattr(getattr(base, attr, None), "__doc__", None) or "").strip()
        for base in cls.__mro__[1:]
    )


def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """`mkdocs build --strict`: no broken link, missing reference or docstring warning."""
    if shutil.which("mkdocs", path=str(Path(sys.executable).parent)) is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI requires mkdocs (the dev extra)")
        pytest.skip("mkdocs is not installed (pip install -e '.[dev]')")
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    reference = (tmp_path / "site" / "reference" / "loopobs" / "index.html").read_text()
    assert 'id="loopobs.AgentLoop"' in reference
    telemetry = (tmp_path / "site" / "telemetry" / "index.html").read_text()
    assert "gen_ai_client_token_usage" in telemetry  # the generated metrics table
