"""Check Grafana dashboard JSON against Grafana's published schema with the TypeScript compiler.

No Grafana server runs here, so dashboards are checked offline: each dashboard is
embedded as an object literal in a generated ``.ts`` file typed ``Dashboard``
from npm ``@grafana/schema`` and compiled with ``tsc --strict --noEmit``. Object
literals (unlike JSON imports) keep string literals narrow, so enum-typed
fields (``VariableType``, ``DashboardLinkType``) and unknown keys are caught.
The options of ``timeseries``, ``stat``, ``table`` and ``text`` panels, and the
``custom`` field config of ``timeseries`` panels, are checked against those
panels' own published option types too (``Dashboard`` types them loosely).

The toolchain (pinned ``typescript`` and ``@grafana/schema``) is installed with
npm into ``LOOPOBS_GRAFANA_SCHEMA_DIR`` (default ``~/.cache/loopobs/grafana-schema``)
when missing; ``scripts/install-backends.sh`` does the same for CI.

Run as ``python -m tests._grafana_schema [DASHBOARD.json ...]`` (``scripts/check-dashboards.sh``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "PINNED",
    "SchemaCheck",
    "check_dashboards",
    "ensure_toolchain",
    "generate_project",
    "schema_dir",
]

PINNED = {"typescript": "7.0.2", "@grafana/schema": "13.2.3"}
"""Exact npm versions, so a schema release cannot change the verdict behind our back."""

REPO = Path(__file__).resolve().parent.parent
DASHBOARDS = REPO / "grafana" / "dashboards"

_SCHEMA = "@grafana/schema/dist/esm/raw"
_PANEL_OPTIONS = {
    "timeseries": (
        "TimeSeriesOptions",
        "composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen",
    ),
    "stat": ("StatOptions", "composable/stat/panelcfg/x/StatPanelCfg_types.gen"),
    "table": ("TableOptions", "composable/table/panelcfg/x/TablePanelCfg_types.gen"),
    "text": ("TextOptions", "composable/text/panelcfg/x/TextPanelCfg_types.gen"),
}
_TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "module": "esnext",
        "moduleResolution": "bundler",
        "target": "es2022",
        "skipLibCheck": True,
    },
    "include": ["*.ts"],
}
_IMPORTS = "".join(
    f'import type {{ Options as {name} }} from "{_SCHEMA}/{path}";\n'
    for name, path in _PANEL_OPTIONS.values()
)
_PRELUDE = (
    f'import type {{ Dashboard }} from "{_SCHEMA}/dashboard/x/Dashboard_types.gen";\n'
    "import type { FieldConfig as TimeSeriesFieldConfig } from "
    f'"{_SCHEMA}/{_PANEL_OPTIONS["timeseries"][1]}";\n'
    + _IMPORTS
    + "// String enums are nominal in TypeScript; JSON carries their values,"
    " so compare against `${Enum}`.\n"
    "type Json<T> = T extends string ? `${T}`\n"
    "  : T extends (infer U)[] ? Json<U>[]\n"
    "  : T extends object ? { [K in keyof T]: Json<T[K]> }\n"
    "  : T;\n"
)


class SchemaCheck:
    """The outcome of one ``tsc`` run: exit code and its diagnostics."""

    def __init__(self, returncode: int, output: str, files: Sequence[Path]) -> None:
        self.returncode = returncode
        self.output = output
        self.files = tuple(files)

    @property
    def ok(self) -> bool:
        """Whether every dashboard type-checked."""
        return self.returncode == 0

    def __repr__(self) -> str:
        return f"<SchemaCheck rc={self.returncode} files={len(self.files)}>\n{self.output}"


def schema_dir() -> Path:
    """Where the npm toolchain lives."""
    configured = os.environ.get("LOOPOBS_GRAFANA_SCHEMA_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "loopobs" / "grafana-schema"


def _installed_version(base: Path, package: str) -> str | None:
    manifest = base / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None
    return str(version)


def _tsc(base: Path) -> Path:
    return base / "node_modules" / "typescript" / "bin" / "tsc"


def ensure_toolchain(base: Path | None = None, *, install: bool = True) -> tuple[Path | None, str]:
    """The ``tsc`` path of a toolchain with the pinned versions, installing it when allowed.

    Returns ``(None, reason)`` when node/npm are missing or the install fails.
    """
    base = schema_dir() if base is None else base
    if shutil.which("node") is None:
        return None, "node not found (install nodejs, or run scripts/install-backends.sh)"
    current = {pkg: _installed_version(base, pkg) for pkg in PINNED}
    if current == PINNED and _tsc(base).is_file():
        return _tsc(base), ""
    if not install:
        return None, f"grafana schema toolchain missing in {base} (have {current}, want {PINNED})"
    npm = shutil.which("npm")
    if npm is None:
        return None, "npm not found (install npm, or run scripts/install-backends.sh)"
    base.mkdir(parents=True, exist_ok=True)
    specs = [f"{pkg}@{version}" for pkg, version in PINNED.items()]
    proc = subprocess.run(
        [npm, "install", "--prefix", str(base), "--no-audit", "--no-fund", "--no-save", *specs],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0 or not _tsc(base).is_file():
        return None, f"npm install {' '.join(specs)} failed: {proc.stderr.strip()[-2000:]}"
    return _tsc(base), ""


def _literal(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _ident(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []) if panel.get("type") == "row" else [])
    return found


def render_ts(dashboard: dict[str, Any]) -> str:
    """The TypeScript module that types ``dashboard`` and its panels' options."""
    parts = [_PRELUDE, f"export const dashboard: Json<Dashboard> = {_literal(dashboard)};\n"]
    for index, panel in enumerate(_panels(dashboard)):
        kind = panel.get("type")
        tag = f"p{index}_{_ident(str(panel.get('id', index)))}"
        if kind in _PANEL_OPTIONS and "options" in panel:
            type_name = _PANEL_OPTIONS[str(kind)][0]
            parts.append(
                f"export const options_{tag}: Json<{type_name}> = {_literal(panel['options'])};\n"
            )
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if kind == "timeseries" and custom is not None:
            parts.append(
                f"export const custom_{tag}: Json<TimeSeriesFieldConfig> = {_literal(custom)};\n"
            )
    return "".join(parts)


def generate_project(dashboards: Sequence[Path], workdir: Path, base: Path) -> list[Path]:
    """Write ``tsconfig.json`` and one ``.ts`` per dashboard into ``workdir``."""
    (workdir / "tsconfig.json").write_text(json.dumps(_TSCONFIG, indent=2))
    link = workdir / "node_modules"
    if not link.exists():
        link.symlink_to(base / "node_modules", target_is_directory=True)
    written = []
    for path in dashboards:
        dashboard = json.loads(path.read_text())
        target = workdir / f"{_ident(path.stem)}.ts"
        target.write_text(render_ts(dashboard))
        written.append(target)
    return written


def check_dashboards(
    dashboards: Sequence[Path],
    tsc: Path,
    base: Path | None = None,
    workdir: Path | None = None,
) -> SchemaCheck:
    """Type-check ``dashboards`` with ``tsc``; diagnostics name the generated ``.ts`` lines."""
    base = schema_dir() if base is None else base
    with tempfile.TemporaryDirectory(prefix="loopobs-dash-") as tmp:
        where = Path(tmp) if workdir is None else workdir
        files = generate_project(dashboards, where, base)
        proc = subprocess.run(
            ["node", str(tsc), "-p", str(where)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            cwd=where,
        )
        return SchemaCheck(proc.returncode, (proc.stdout + proc.stderr).strip(), files)


def main(argv: Sequence[str] | None = None) -> int:
    """Check the given dashboards (default: every ``grafana/dashboards/*.json``).

    ``--install`` only installs the toolchain (``scripts/install-backends.sh``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    install_only = "--install" in args
    args = [a for a in args if a != "--install"]
    tsc, reason = ensure_toolchain()
    if tsc is None:
        print(f"check-dashboards: {reason}", file=sys.stderr)
        return 2
    if install_only:
        print(f"check-dashboards: toolchain ready in {schema_dir()} ({PINNED})")
        return 0
    paths = [Path(a) for a in args] or sorted(DASHBOARDS.glob("*.json"))
    result = check_dashboards(paths, tsc)
    names = ", ".join(p.name for p in paths)
    if result.ok:
        print(f"check-dashboards: OK ({names}) against @grafana/schema {PINNED['@grafana/schema']}")
        return 0
    print(result.output, file=sys.stderr)
    print(f"check-dashboards: FAILED ({names})", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
