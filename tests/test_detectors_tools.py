"""RepetitionDetector on command, code and editor tools: the call's effect is read from the
command, not from the tool's name."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from loopobs import LoopDetectedContext, RepetitionDetector, ToolAnnotations
from loopobs.contract.hashing import result_hash
from loopobs.detectors.commands import failed_output
from tests.test_detectors_signals import Feed

OK = "<returncode>0</returncode>\n<output>\n</output>"
FAILING = "<returncode>1</returncode>\n<output>\nFAILED tests/test_app.py::test_total - 7 != 6\n"


def signals(fired: Sequence[Sequence[LoopDetectedContext]]) -> list[tuple[str | None, str]]:
    return [(e.signal, e.action) for batch in fired for e in batch]


def test_silent_edits_through_bash_are_progress_not_the_same_result() -> None:
    """``sed -i`` edits print nothing: each new one is progress, never ``same_result``, and
    the test run after each edit is no repeat (before: a stop at the tenth edit)."""
    d = Feed(RepetitionDetector())
    fired = []
    for line in range(20, 40):
        fired.append(d.call("bash", {"command": f"sed -i '{line}s/a/b/' src/app.py"}, OK))
        fired.append(d.call("bash", {"command": "cd /testbed && python -m pytest -q"}, FAILING))
    assert signals(fired) == []


def test_re_running_a_failing_test_with_nothing_changed_is_a_loop() -> None:
    """The same failing command again and again with no write between warns, then stops."""
    d = Feed(RepetitionDetector())
    fired = [
        d.call("bash", {"command": "python -m pytest tests/test_app.py"}, FAILING) for _ in range(5)
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]


def test_reads_do_not_count_as_progress() -> None:
    """``cat``/``grep``/``git status`` between the runs change nothing: still a loop."""
    d = Feed(RepetitionDetector())
    fired = []
    for _ in range(5):
        fired.append(d.call("bash", {"command": "python run_checks.py"}, FAILING))
        fired.append(d.call("bash", {"command": "git status"}, "nothing to commit"))
    assert ("cycle", "warn") in signals(fired)


def test_spellings_of_one_delete_are_one_operation() -> None:
    """``rm -f X``, ``rm -rf X``, ``find … -delete`` again: the same write, the same (empty)
    output, so no progress: it repeats."""
    d = Feed(RepetitionDetector())
    spellings = [
        "find /data -name '*.txt' -type f -exec rm {} \\;",
        "find /data -name '*.txt' -type f -exec rm -f {} \\;",
        "find /data -name '*.txt' -type f -exec rm -rf {} \\;",
        "find /data -name '*.txt' -type f -exec rm -rf -- {} \\;",
        "find /data -name '*.txt' -type f -exec rm -f -- {} \\;",
    ]
    fired = [d.call("bash", {"command": c}, "") for c in spellings]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]


def test_a_failed_edit_is_not_progress() -> None:
    """An editor's or a command's output that says it failed changed nothing."""
    d = Feed(RepetitionDetector())
    fired = []
    for i in range(4):
        fired.append(
            d.call(
                "str_replace_editor",
                {
                    "command": "str_replace",
                    "path": "/repo/a.c",
                    "old_str": f"{i}: x;",
                    "new_str": "y;",
                },
                "ERROR:\nNo replacement was performed, old_str did not appear "
                "verbatim in /repo/a.c.",
            )
        )
        fired.append(
            d.call(
                "str_replace_editor",
                {"command": "view", "path": "/repo/a.c", "view_range": [10, 20]},
                "10\tx;\n11\ty;",
            )
        )
    assert ("repeat", "warn") in signals(fired)


def test_a_writes_failure_is_remembered_by_its_output() -> None:
    """Whether a write's output says it failed is remembered by the output's hash
    (bounded), and is what failed_output says."""
    d = RepetitionDetector()
    outputs = [
        "ERROR:\nNo replacement was performed, old_str did not appear verbatim in a.c.",
        "File created successfully at: /repo/a.c",
        "bash: frobnicate: command not found",
    ]
    for _ in range(2):
        for text in outputs:
            assert d._failed(text, result_hash(text)) == failed_output(text)
    assert d._failed("ERROR: no hash", None)
    for i in range(600):
        d._failed(f"ok {i}", result_hash(f"ok {i}"))
    assert len(d._failures) <= 256


NOT_UNIQUE = (
    "ERROR:\nNo replacement was performed. Multiple occurrences of old_str "
    "`return t;` in lines [317, 449]. Please ensure it is unique."
)


def test_an_edit_rejected_for_its_old_text_repeats_whatever_its_new_text() -> None:
    """A ``str_replace`` refused for its ``old_str`` is the same failed call when retried
    with the same ``old_str`` and new text reworded, even with edits and views between."""
    d = Feed(RepetitionDetector())
    fired = []
    for i in range(3):
        fired.append(
            d.call(
                "str_replace_editor",
                {
                    "command": "str_replace",
                    "path": "/repo/a.c",
                    "old_str": "return t;",
                    "new_str": f"if (x) t = f(t{' ' * i});",
                },
                NOT_UNIQUE,
            )
        )
        fired.append(
            d.call(
                "str_replace_editor",
                {"command": "view", "path": "/repo/a.c", "view_range": [310 + i, 318]},
                f"{i}\tx;",
            )
        )
    assert signals(fired) == [("repeat", "warn")]
    # Other old text each time: every rejection is a call of its own.
    d = Feed(RepetitionDetector())
    fired = [
        d.call(
            "str_replace_editor",
            {
                "command": "str_replace",
                "path": "/repo/a.c",
                "old_str": f"return t{i};",
                "new_str": "x",
            },
            NOT_UNIQUE,
        )
        for i in range(5)
    ]
    assert signals(fired) == []


def test_viewing_a_range_again_after_an_edit_is_not_a_repeat() -> None:
    """Editor views are reads: the same range again with nothing changed repeats, after a
    successful edit it does not."""
    view = {"command": "view", "path": "/repo/a.c", "view_range": [10, 20]}
    d = Feed(RepetitionDetector())
    fired = [d.call("str_replace_editor", view, "10\tx;\n11\ty;") for _ in range(3)]
    assert signals(fired) == [("repeat", "warn")]
    d = Feed(RepetitionDetector())
    fired = []
    for i in range(6):
        fired.append(d.call("str_replace_editor", view, "10\tx;\n11\ty;"))
        fired.append(
            d.call(
                "str_replace_editor",
                {
                    "command": "str_replace",
                    "path": "/repo/a.c",
                    "old_str": f"v{i}",
                    "new_str": f"v{i + 1}",
                },
                "The file /repo/a.c has been edited.",
            )
        )
    assert signals(fired) == []


def test_a_declared_command_tool_is_parsed() -> None:
    """``command_tools`` names a tool's command argument: its writes are progress."""
    d = Feed(RepetitionDetector(command_tools={"box": "script"}))
    fired = []
    for i in range(8):
        fired.append(d.call("box", {"script": f"echo {i} > state.txt"}, "done"))
        fired.append(d.call("box", {"script": "cat state.txt"}, "same text every time"))
    assert signals(fired) == []
    undeclared = Feed(RepetitionDetector(infer_commands=False))
    fired = []
    for _ in range(3):
        fired.append(undeclared.call("bash", {"command": "sed -i 's/a/b/' f"}, OK))
    assert signals(fired) == [("repeat", "warn")]


def test_unparseable_commands_fall_back_to_the_tools_rules() -> None:
    """An unclosed quote cannot be judged: the tool's annotations decide, as before."""
    d = Feed(RepetitionDetector())
    side = ToolAnnotations(side_effecting=True)
    fired = [
        d.call("bash", {"command": f"echo 'unclosed {i}"}, "ok", annotations=side) for i in range(6)
    ]
    assert signals(fired) == []


def test_thinking_between_repeats_is_no_new_work() -> None:
    """A different thought between the same fruitless calls does not hide the loop."""
    d = Feed(RepetitionDetector())
    fired = []
    for i in range(5):
        fired.append(
            d.call(
                "think",
                {"thought": f"maybe the payment split is wrong ({i})"},
                "Your thought has been logged.",
            )
        )
        fired.append(
            d.call(
                "book_reservation",
                {"payment": "split"},
                "Error: the payment amount does not add up",
            )
        )
    assert ("repeat", "warn") in signals(fired)


def test_the_surer_stop_needs_its_evidence_within_one_run() -> None:
    """The same call once per run of a session (a new request each time) warns but does not
    stop at ``sure_stop_after``: a new request is a change; within one run it stops."""
    from tests.detection_corpus.harness import Trace, play

    steps: list[dict[str, object]] = []
    for i in range(6):
        steps += [
            {"run": f"request {i}", "t": 10 * i},
            {"call": "hold", "args": {}, "result": "released", "t": 10 * i + 1},
        ]
    actions = [d[2] for d in play(Trace("across runs", "x", "ok", tuple(steps))).detections]
    assert actions == ["warn"]
    within = tuple({"call": "hold", "args": {}, "result": "released", "t": i} for i in range(6))
    actions = [d[2] for d in play(Trace("one run", "x", "loop", within, 1)).detections]
    assert actions == ["warn", "stop"]


def test_a_command_calls_other_arguments_are_keyed_as_their_canonical_json() -> None:
    """The remembered text of a command call's other arguments is their canonical JSON (with
    its text_key), and only strings are remembered (1, 1.0 and True are equal keys of a
    dict, not equal JSON)."""
    from loopobs.contract.hashing import canonical_json, text_key
    from loopobs.detectors import clear_caches

    clear_caches()
    d = RepetitionDetector()
    for others in (
        {"program": "bash"},
        {"program": "bash"},
        {"cwd": "/w", "program": "sh"},
        {"lines": 1},
        {"lines": 1.0},
        {"lines": True},
        {"env": {"A": "1"}},
        {"note": "x" * 300},
    ):
        args = {"command": "ls", **others}
        text = canonical_json(others)
        assert d._other_arguments(args, "command") == (text, text_key(text))
    from loopobs.detectors import repetition

    # Remembered process-wide, and only sets of strings (1, 1.0 and True are equal keys).
    held = list(repetition._OTHER_ARGS)
    assert held == [(("program", "bash"),), (("cwd", "/w"), ("program", "sh"))]


def test_a_command_calls_narration_is_not_part_of_the_call() -> None:
    """Claude Code's and Gemini CLI's ``description``, Cursor's ``explanation``: the same
    line re-run with other words about it is the same call (it warns, then stops), and a
    call described is the call without one; a working directory still tells calls apart."""
    d = Feed(RepetitionDetector())
    sayings = ["Run the tests", "Run them again", "Check whether it passes now", "Retry", "Go"]
    fired = [
        d.call("Bash", {"command": "python -m pytest tests/test_app.py", "description": s}, FAILING)
        for s in sayings
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]

    det = RepetitionDetector()
    plain = det._identity("Bash", {"command": "ls"}, det._tool("Bash"), None)
    for narration in (
        {"description": "List the files"},
        {"Explanation": "to see what is there"},
        {"description": "List", "security_risk": "LOW"},
    ):
        assert (
            det._identity("Bash", {"command": "ls", **narration}, det._tool("Bash"), None) == plain
        )
    elsewhere = det._identity(
        "Bash", {"command": "ls", "description": "x", "directory": "/srv"}, det._tool("Bash"), None
    )
    assert elsewhere[1] != plain[1]
    assert elsewhere[4] == plain[4] + '\x1d{"directory":"/srv"}'
    # A key that is no string is an argument like any other, never an error.
    odd = det._identity("Bash", {"command": "ls", 1: "x"}, det._tool("Bash"), None)
    assert odd[1] != plain[1]


def test_a_command_re_run_with_a_longer_timeout_is_the_same_call() -> None:
    """OpenHands' ``timeout``, Codex's ``timeout_ms``: an agent whose command hangs re-runs
    it with more time; the same line under a rising budget repeats, warns and stops."""
    d = Feed(RepetitionDetector())
    fired = [
        d.call("execute_bash", {"command": "python -m pytest -q", "timeout": 30 * n}, FAILING)
        for n in range(1, 6)
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]
    d = Feed(RepetitionDetector())
    fired = [
        d.call(
            "shell",
            {"command": ["bash", "-lc", "make test"], "workdir": "/repo", "timeout_ms": 1000 * n},
            FAILING,
        )
        for n in range(1, 6)
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]


def test_a_tools_explanation_of_its_call_is_ignored() -> None:
    """Cursor sends an ``explanation`` with every tool call: the same read explained
    otherwise is the same read."""
    d = Feed(RepetitionDetector())
    fired = [
        d.call(
            "read_file",
            {"target_file": "src/app.py", "explanation": f"look at the code ({i})"},
            "def total(): ...",
        )
        for i in range(5)
    ]
    assert ("repeat", "warn") in signals(fired)


def test_edits_wrapped_in_a_shells_c_script_are_progress() -> None:
    """Codex-style agents send every command as ``bash -lc "…"``: the script inside is
    judged, so a wrapped ``sed -i`` is an edit and the test run after it no repeat; the
    same wrapped test run with nothing between is still a loop."""
    d = Feed(RepetitionDetector())
    fired = []
    for line in range(20, 32):
        fired.append(d.call("bash", {"command": f"bash -lc \"sed -i '{line}s/a/b/' app.py\""}, OK))
        fired.append(d.call("bash", {"command": "bash -lc 'python -m pytest -q'"}, FAILING))
    assert signals(fired) == []
    fired = [
        d.call("bash", {"command": "bash -lc 'python -m pytest -q'"}, FAILING) for _ in range(5)
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]


def test_heredoc_edits_inside_a_quoted_script_are_progress() -> None:
    """``bash -lc "cat > f <<'EOF' … EOF"``: the heredoc is the script's, so each new file
    is an edit and the failing test run after it no repeat (before: the line could not be
    parsed, the edits were no progress, and the test runs stopped the run)."""
    d = Feed(RepetitionDetector())
    fired = []
    for n in range(12):
        script = f"cat > app.py <<'EOF'\ndef total(x):\n    return x + {n}\nEOF"
        fired.append(d.call("bash", {"command": f'bash -lc "{script}"'}, OK))
        fired.append(d.call("bash", {"command": "bash -lc 'python -m pytest -q'"}, FAILING))
    assert signals(fired) == []


def test_claude_codes_edit_refused_for_its_old_text_is_one_failed_call() -> None:
    """``Edit`` (``file_path``, ``old_string``, ``new_string``) refused for its old text, in
    the result's words only (a log replayed without ``is_error``): retrying the same
    ``old_string`` with reworded new text is the same failed call, no progress. Before,
    each retry was a new write: progress, never a loop."""
    refused = "<tool_use_error>String to replace not found in file.\nString: x = 1</tool_use_error>"
    d = Feed(RepetitionDetector())
    fired = [
        d.call(
            "Edit",
            {"file_path": "/r/app.py", "old_string": "x = 1", "new_string": f"x = {n}"},
            refused,
        )
        for n in range(2, 7)
    ]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]
    edited = Feed(RepetitionDetector())
    fired = []
    names = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    for old, new in itertools.pairwise(names):  # edits that work, then the same failing test
        args = {"file_path": "/r/app.py", "old_string": old, "new_string": new}
        fired.append(edited.call("Edit", args, "The file /r/app.py has been updated."))
        fired.append(edited.call("Bash", {"command": "python -m pytest -q"}, FAILING))
    assert signals(fired) == []


def test_codexs_apply_patch_through_its_shell_tool_is_an_edit() -> None:
    """Codex sends its patches as a shell call (``["apply_patch", "*** Begin Patch …"]``):
    each new patch is progress, and the failing test after it no repeat; a patch refused
    ("Failed to find expected lines") changed nothing."""
    d = Feed(RepetitionDetector())
    fired = []
    for name in ("alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota"):
        patch = f"*** Begin Patch\n*** Update File: app.py\n-    x\n+    {name}(x)\n*** End Patch"
        done = "Success. Updated the following files:\nM app.py"
        fired.append(d.call("shell", {"command": ["apply_patch", patch]}, done))
        fired.append(d.call("shell", {"command": ["bash", "-lc", "python -m pytest -q"]}, FAILING))
    assert signals(fired) == []
    refused = "error: Failed to find expected lines in app.py:\n    return x"
    patch = (
        "*** Begin Patch\n*** Update File: app.py\n@@\n-    return x\n+    return y\n*** End Patch"
    )
    fired = [d.call("shell", {"command": ["apply_patch", patch]}, refused) for _ in range(5)]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]


def test_a_wrapped_delete_and_the_plain_one_are_one_write() -> None:
    """``bash -c "rm -f X"`` after ``rm -f X``, the same empty output: no progress, one
    operation repeated, as the same line six times is."""
    lines = ["rm -f /data/a.txt", "bash -c 'rm -f /data/a.txt'", 'sh -c "rm -f /data/a.txt"']
    spelled, plain = Feed(RepetitionDetector()), Feed(RepetitionDetector())
    fired = [spelled.call("bash", {"command": lines[i % 3]}, "") for i in range(6)]
    same = [plain.call("bash", {"command": lines[0]}, "") for _ in range(6)]
    assert signals(fired) == signals(same) == [("repeat", "warn"), ("repeat", "stop")]


def test_a_tool_whose_name_says_nothing_is_judged_by_its_arguments() -> None:
    """``mytool`` with a shell line in ``command`` is a command tool (its silent edits are
    progress); ``fs`` with an editor's sub-command beside a ``path`` is an editor. Before,
    both were judged by their names alone: the edits' empty results piled into a stop."""
    d = Feed(RepetitionDetector())
    fired = []
    for line in range(20, 40):
        fired.append(d.call("mytool", {"command": f"sed -i '{line}s/a/b/' src/app.py"}, OK))
        fired.append(d.call("mytool", {"command": "cd /testbed && python -m pytest -q"}, FAILING))
    assert signals(fired) == []
    again = Feed(RepetitionDetector())
    fired = [again.call("mytool", {"cmd": "python -m pytest -q"}, FAILING) for _ in range(5)]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]

    editor = Feed(RepetitionDetector())
    fired = []
    for n in range(12):
        fired.append(
            editor.call(
                "fs",
                {"command": "str_replace", "path": "a.py", "old_str": f"x{n}", "new_str": f"y{n}"},
                "The file a.py has been edited.",
            )
        )
        fired.append(editor.call("fs", {"command": "view", "path": "a.py"}, f"1\tx = {n}"))
    assert signals(fired) == []
    undeclared = Feed(RepetitionDetector(infer_commands=False))
    fired = [
        undeclared.call("mytool", {"command": f"sed -i '{n}d' a.py"}, OK) for n in range(1, 13)
    ]
    assert ("same_result", "stop") in signals(fired)


def test_a_failed_edit_is_no_progress_in_each_harnesss_output() -> None:
    """A ``sed -i`` whose expression is refused, then the same failing test, again and
    again: the edits changed nothing whether the harness says so as mini-SWE-agent
    (``<returncode>1``), OpenHands ("exit code 1"), Codex ("Exit code: 1") or in JSON.
    Before, only the first was read as a failure: the others' edits were progress."""
    refused = "sed: -e expression #1, char 9: unknown option to `s'"
    outputs = [
        f"<returncode>1</returncode>\n<output>\n{refused}\n</output>",
        f"{refused}\n[The command completed with exit code 1.]",
        f"Exit code: 1\nWall time: 0.1 seconds\nOutput:\n{refused}\n",
        f'{{"output": "{refused}", "metadata": {{"exit_code": 1}}}}',
    ]
    for output in outputs:
        d = Feed(RepetitionDetector())
        fired = []
        for i in range(5):
            fired.append(d.call("bash", {"command": f"sed -i 's/a{i}/b/x' f.py"}, output))
            fired.append(d.call("bash", {"command": "python -m pytest -q"}, FAILING))
        assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")], output


def test_multi_edit_refused_for_its_old_texts_is_one_failed_call() -> None:
    """``MultiEdit`` (a ``file_path`` and a list of ``edits``, each an ``old_string`` and a
    ``new_string``) is an editor's write; refused, a retry of the same old texts with
    reworded new ones is the same failed call. Before, the tool was judged by its name:
    each retry was a new call, never a loop, and its edits were no progress."""
    refused = "<tool_use_error>String to replace not found in file.\nString: y = 2</tool_use_error>"

    def edits(name: str) -> dict[str, object]:
        return {
            "file_path": "/r/app.py",
            "edits": [
                {"old_string": "x = 1", "new_string": f"x = {name}(1)"},
                {"old_string": "y = 2", "new_string": f"y = {name}(2)"},
            ],
        }

    names = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
    d = Feed(RepetitionDetector())
    fired = [d.call("MultiEdit", edits(name), refused) for name in names[:5]]
    assert signals(fired) == [("repeat", "warn"), ("repeat", "stop")]
    edited = Feed(RepetitionDetector())
    fired = []
    for name in names:  # edits that work, then the same failing test: progress each time
        fired.append(edited.call("MultiEdit", edits(name), "Applied 2 edits to /r/app.py"))
        fired.append(edited.call("Bash", {"command": "python -m pytest -q"}, FAILING))
    assert signals(fired) == []
