"""The repetition detector's cost against an earlier version of it, in one process.

Run: ``.venv/bin/python bench/ab_detectors.py REV`` (``REV``: a git revision of this
repository, e.g. ``main`` or ``HEAD~3``; ``--rounds N``; ``--instructions`` to count CPU
instructions under valgrind as well). It reads the real trajectories as
``bench_real_trajectories`` does (``LOOPOBS_REAL_TRAJECTORIES`` or ``../shared/…``) and
skips, saying so, when they are absent.

The machine's speed drifts by up to a third within an hour, so two versions' absolute
figures from different runs say little. Here ``REV``'s ``loopobs/detectors`` is copied into
a package of its own (under a temporary directory, its imports of ``loopobs.detectors``
renamed) and both versions feed the whole set through fresh detectors, their order
alternated each round: *first sight* with the process-wide caches cleared before each pass,
*seen* with every line and result seen before. Printed: each version's best and median µs
per tool call, and the ratios (this tree / ``REV``) of the bests, the medians and the
rounds paired. Running the same code on both sides gives ratios within about 3% of 1.

``--instructions`` runs each version's passes under ``valgrind --tool=cachegrind`` in a
child process and prints instructions per tool call (a pass minus a run that builds
everything but feeds no call): the same on every run to about 0.1%, so changes of 1–2% can
be told apart. It needs ``valgrind`` on ``PATH`` (skipped, saying so, without it).
"""

from __future__ import annotations

import argparse
import importlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: tests/ and bench/ too

from bench import bench_real_trajectories as real  # noqa: E402

_Calls = list[real._Calls]


def materialise(rev: str | None, name: str, into: Path) -> Path:
    """``loopobs/detectors`` of git revision ``rev`` (``None``: this tree) as package
    ``name`` under ``into``, its imports of ``loopobs.detectors`` renamed."""
    package = into / name
    package.mkdir(parents=True)
    if rev is None:
        files = {p.name: p.read_text() for p in (ROOT / "loopobs" / "detectors").glob("*.py")}
    else:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:loopobs/detectors"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        files = {
            f: subprocess.run(
                ["git", "-C", str(ROOT), "show", f"{rev}:loopobs/detectors/{f}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            for f in listed
            if f.endswith(".py")
        }
    for filename, text in files.items():
        (package / filename).write_text(re.sub(r"\bloopobs\.detectors\b", name, text))
    return package


def _clearer(module: ModuleType) -> Callable[[], None]:
    """The version's ``clear_caches`` (older versions had none: nothing to clear)."""
    found = getattr(module, "clear_caches", None)
    return found if callable(found) else (lambda: None)


def one_pass(module: ModuleType, calls: _Calls, first_sight: bool) -> float:
    """CPU µs per tool call of one pass over ``calls`` through fresh detectors."""
    if first_sight:
        _clearer(module)()
    detectors = [module.RepetitionDetector() for _ in calls]
    return real.feed_calls(detectors, calls) / sum(len(c) for c in calls) / 1000


def compare(old: ModuleType, new: ModuleType, calls: _Calls, rounds: int, first_sight: bool) -> str:
    """One line: each version's best and median, and the ratios new / old."""
    samples: dict[str, list[float]] = {"old": [], "new": []}
    versions = {"old": old, "new": new}
    for module in versions.values():  # warm both, and fill the caches once
        one_pass(module, calls, first_sight)
    for i in range(rounds):
        for key in ("old", "new") if i % 2 == 0 else ("new", "old"):
            if not first_sight:
                one_pass(versions[key], calls, False)  # the caches filled this version's way
            samples[key].append(one_pass(versions[key], calls, first_sight))
    best_old, best_new = min(samples["old"]), min(samples["new"])
    med_old, med_new = statistics.median(samples["old"]), statistics.median(samples["new"])
    paired = statistics.median(a / b for a, b in zip(samples["new"], samples["old"], strict=True))
    return (
        f"REV best {best_old:6.2f} median {med_old:6.2f} | this tree best {best_new:6.2f} "
        f"median {med_new:6.2f} µs | ratio of bests {best_new / best_old:.3f}, of medians "
        f"{med_new / med_old:.3f}, paired {paired:.3f}"
    )


def _inner(package_dir: str, name: str, mode: str, passes: int, path: str) -> None:
    """The child run under valgrind: ``passes`` passes (``none``: build, feed nothing)."""
    sys.path.insert(0, package_dir)
    module = importlib.import_module(name)
    calls, _ = real._contexts(real.load(Path(path)))
    for _ in range(passes):
        if mode == "none":
            _clearer(module)()
            [module.RepetitionDetector() for _ in calls]
        else:
            one_pass(module, calls, mode == "first")


def instructions(package_dir: Path, name: str, mode: str, passes: int, path: Path) -> int:
    """Instructions valgrind counted in one child run."""
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--inner",
            str(package_dir),
            name,
            mode,
            str(passes),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def per_call(package_dir: Path, name: str, path: Path, n_calls: int) -> tuple[float, float]:
    """Instructions per tool call at first sight and seen before (3 passes of each; the
    seen figure is 4 passes minus 1, the first of which is a first sight)."""

    def count(mode: str, passes: int) -> int:
        return instructions(package_dir, name, mode, passes, path)

    first = (count("first", 3) - count("none", 3)) / (3 * n_calls)
    seen = (count("seen", 4) - count("seen", 1)) / (3 * n_calls)
    return first, seen


def main(argv: Sequence[str] | None = None) -> None:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["--inner"]:
        _inner(args_in[1], args_in[2], args_in[3], int(args_in[4]), args_in[5])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the git revision to compare this tree with")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--path", help="a JSONL set (default: as bench_real_trajectories)")
    parser.add_argument("--instructions", action="store_true", help="count under valgrind too")
    args = parser.parse_args(args_in)
    path = real.data_path(args.path)
    if not path.is_file():
        print(f"skipped: no real trajectories at {path} (set {real.ENV_VAR} or --path)")
        return
    calls, _ = real._contexts(real.load(path))
    n_calls = sum(len(c) for c in calls)
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        materialise(args.rev, "ab_old_detectors", where)
        materialise(None, "ab_new_detectors", where)
        sys.path.insert(0, tmp)
        old = importlib.import_module("ab_old_detectors")
        new = importlib.import_module("ab_new_detectors")
        print(f"{path.name}: {n_calls} tool calls, {args.rounds} rounds, order alternated")
        print("first sight:", compare(old, new, calls, args.rounds, True))
        print("seen before:", compare(old, new, calls, args.rounds, False))
        if not args.instructions:
            return
        if shutil.which("valgrind") is None:
            print("instructions: skipped (no valgrind on PATH)")
            return
        for label, name in (("REV", "ab_old_detectors"), ("this tree", "ab_new_detectors")):
            first, seen = per_call(where, name, path, n_calls)
            print(
                f"instructions per tool call, {label}: first sight {first:,.0f}, seen {seen:,.0f}"
            )


if __name__ == "__main__":
    main()
