"""The command classifier: what a shell command line, a code cell or an editor call does."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopobs.contract.hashing import text_key
from loopobs.detectors.commands import (
    _HEREDOC,
    CallEffect,
    CommandInfo,
    _cut_heredocs,
    call_effect,
    classify_code,
    classify_command,
    command_text,
    failed_output,
    join_continuations,
    role_by_arguments,
    shlex_tokens,
    strip_comments,
    tokens,
    tool_role,
)
from tests._real_trajectories import needs_real_trajectories, real_command_lines

FUZZ = settings(deadline=None, max_examples=400, suppress_health_check=[HealthCheck.too_slow])
SHELLISH = st.text(alphabet=" \t\r\n'\"\\;&|()<>{}$#=*-_./abcxyz019", max_size=40)


_OPERATOR_CHARS = ";&|()<>\n"
_SHELL_OPERATORS = ("&>>", "<<<", ";;", "&&", "||", "|&", ">>", "&>", ">|", ">&", "<>", "<&", "<<")


def _operators_of(run: str) -> list[str]:
    """A run of operator characters as the shell's operators, the longest first."""
    found: list[str] = []
    i = 0
    while i < len(run):
        op = next((o for o in _SHELL_OPERATORS if run.startswith(o, i)), run[i])
        found.append(op)
        i += len(op)
    return found


_MARKS = {
    **{f"{q}{op}{q}": "\\" + op for op in (*_SHELL_OPERATORS, *_OPERATOR_CHARS) for q in "'\""},
    **{"\\" + op: "\\" + op for op in _OPERATOR_CHARS},
}


def shell_tokens(text: str, cut: bool = True) -> list[str] | None:
    """The reference for ``tokens``, read a character at a time: shlex's POSIX rules
    (words split at spaces, tabs and carriage returns; '…' literal; a backslash in "…"
    escapes only " and \\; a run of operator characters one token), and, with ``cut``,
    each run cut into the shell's operators, longest first, and a word that is one
    operator quoted or escaped (``';'``, ``\\;``) that operator behind a backslash.
    ``None`` where shlex raises (an unclosed quote, a trailing backslash)."""
    found: list[str] = []
    word: str | None = None
    start = 0
    i, n = 0, len(text)

    def ended(word: str, raw: str) -> str:
        return _MARKS.get(raw, word) if cut else word

    while i < n:
        c = text[i]
        if c in " \t\r" or c in _OPERATOR_CHARS:
            if word is not None:
                found.append(ended(word, text[start:i]))
                word = None
            if c in " \t\r":
                i += 1
                continue
            j = i
            while j < n and text[j] in _OPERATOR_CHARS:
                j += 1
            run = text[i:j]
            if cut:
                found.extend(_operators_of(run))
            else:
                found.append(run)
            i = j
            continue
        if word is None:
            word, start = "", i
        if c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                return None
            word += text[i + 1 : end]
            i = end + 1
        elif c == '"':
            i += 1
            while True:
                if i >= n:
                    return None
                q = text[i]
                if q == '"':
                    i += 1
                    break
                if q == "\\":
                    if i + 1 >= n:
                        return None
                    word += text[i + 1] if text[i + 1] in '"\\' else text[i : i + 2]
                    i += 2
                else:
                    word += q
                    i += 1
        elif c == "\\":
            if i + 1 >= n:
                return None
            word += text[i + 1]
            i += 2
        else:
            word += c
            i += 1
    if word is not None:
        found.append(ended(word, text[start:]))
    return found


def _comments_read(text: str) -> tuple[str, bool, bool]:
    """``text`` without its comments (a "#" that starts a word outside quotes starts one,
    to the end of its line), read a character at a time; whether it ends inside quotes;
    whether it ends inside a comment."""
    out: list[str] = []
    quote = None
    in_word = in_comment = False
    i = 0
    while i < len(text):
        c = text[i]
        in_comment = False
        if quote == "'":
            quote = None if c == "'" else quote
        elif quote == '"':
            if c == "\\" and i + 1 < len(text):
                out.append(text[i : i + 2])
                i += 2
                continue
            if c == '"':
                quote = None
        elif c == "\\" and i + 1 < len(text):
            out.append(text[i : i + 2])
            i += 2
            in_word = True
            continue
        elif c in "'\"":
            quote = c
            in_word = True
        elif c == "#" and not in_word:
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            in_comment = end < 0
            continue
        else:
            in_word = c not in " \t\r" + _OPERATOR_CHARS
        out.append(c)
        i += 1
    return "".join(out), quote is not None, in_comment


def strip_comments_char_by_char(text: str) -> str:
    """The reference for ``strip_comments``."""
    return _comments_read(text)[0]


def effect(command: str) -> str | None:
    info = classify_command(command)
    return info.effect if info is not None else None


def effect_and_programs(command: str) -> tuple[str, tuple[str, ...]] | None:
    """The line's effect and its programs, or None when it cannot be parsed."""
    info = classify_command(command)
    return (info.effect, info.programs) if info is not None else None


@pytest.mark.parametrize(
    "command",
    [
        "ls -la",
        "cat src/app.py",
        "grep -rn TODO src | head -20",
        "find . -name '*.py'",
        "head -n 40 README.md",
        "sed -n '18,50p' django/db/models/constraints.py",
        "git status",
        "git diff HEAD~1 -- src",
        "git log --oneline | head",
        "git -C repo show HEAD",
        "cd /testbed && ls",
        "wc -l *.py 2>/dev/null",
        "echo $PATH",
        "git branch",
        "FOO=1 timeout 10 grep -c x f",
        "tail -f log.txt | grep ERROR",
        "ls > /dev/null 2>&1",
        'find /testbed -type f -name "*.gz" -exec zcat {} \\; 2>/dev/null | wc -l',
        'for f in src/*.py; do head -3 "$f"; done',
        "git stash list",
    ],
)
def test_reading_commands_are_reads(command: str) -> None:
    assert effect(command) == "read"


@pytest.mark.parametrize(
    "command",
    [
        "sed -i 's/a/b/' src/app.py",
        "sed -i.bak -e 's/x/y/' f",
        "perl -pi -e 's/a/b/' f",
        "echo hi > out.txt",
        "printf 'x' >> log",
        "cat f | tee copy.txt",
        "cp a b",
        "mv a b",
        "rm -rf build",
        "mkdir -p out/x",
        "touch marker",
        "git add -A",
        "git commit -m 'fix'",
        "git apply fix.patch",
        "git checkout -b topic",
        "patch -p1 < fix.diff",
        "pip install -e .",
        "python -m pip install requests",
        "npm install",
        "apt-get install jq",
        "cd /repo && sed -i '3d' setup.py",
        "sudo -u app rm /tmp/x",
        "nohup touch x &",
        "find . -name '*.pyc' -delete",
        "find . -name '*.pyc' -exec rm -f {} +",
        "tar -xzf a.tgz",
        "cat <<'EOF' > reproduce.py\nprint(1)\nEOF",
        "timeout 5 chmod +x run.sh",
        "python -c \"open('out.txt', 'w').write('x')\"",
        "python - <<EOF\nimport os\nos.remove('x')\nEOF",
        "git stash",
        "git stash && python -m pytest -q",
        "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.py\n-x\n+y\n*** End Patch\nEOF",
        "uv pip install -e .",
        'for f in src/*.py; do sed -i "s/a/b/" "$f"; done',
    ],
)
def test_side_effecting_commands_are_writes(command: str) -> None:
    assert effect(command) == "write"


@pytest.mark.parametrize(
    "command",
    [
        "python reproduce_issue.py",
        "pytest -x tests/test_app.py",
        "make",
        "./run.sh",
        "cd /testbed && python -m pytest tests",
        "npm test",
        "node index.js",
        "cargo build",
        "python -c 'print(1 + 1)'",
        "some_unknown_tool --flag",
    ],
)
def test_programs_whose_effects_cannot_be_told_run(command: str) -> None:
    assert effect(command) == "run"


@pytest.mark.parametrize(
    ("command", "judged"),
    [
        ("git stash", "write"),
        ("git stash pop", "write"),
        ("git stash list", "read"),
        ("git stash show -p", "read"),
        ("git config user.name", "read"),
        ("git config --get remote.origin.url", "read"),
        ("git config get user.name", "read"),
        ("git config user.name bob", "write"),
        ("git config --unset core.pager", "write"),
        ("git config set user.name bob", "write"),
        ("git branch -a", "read"),
        ("git branch --contains HEAD~2", "read"),
        ("git branch topic", "write"),
        ("git branch -D topic", "write"),
        ("git tag -l 'v1.*'", "read"),
        ("git tag v1.2", "write"),
        ("git remote show origin", "read"),
        ("git remote get-url origin", "read"),
        ("git remote add fork https://x/y.git", "write"),
        ("git worktree list", "read"),
        ("git worktree add ../hotfix", "write"),
    ],
)
def test_gits_listing_commands_read_and_their_other_forms_write(command: str, judged: str) -> None:
    """``stash``, ``config``, ``branch``, ``tag``, ``remote`` and ``worktree`` list or show
    in some forms and change the repository in others (a bare ``git stash`` takes the
    working tree's changes away)."""
    assert effect(command) == judged


def test_a_line_is_its_strongest_part() -> None:
    """A write anywhere in a chain makes the line a write; a run beats reads."""
    assert effect("ls && cat a.py; grep x b.py || true") == "read"
    assert effect("ls && python t.py") == "run"
    assert effect("python t.py && git commit -am wip") == "write"


def test_prefixes_and_wrappers_are_seen_through() -> None:
    info = classify_command("cd /repo && LANG=C sudo -u bob timeout -s KILL 30 nice -n 5 rm x")
    assert info is not None
    assert info.programs == ("cd", "rm")
    assert info.effect == "write"


def test_heredoc_bodies_are_cut_out_and_tell_writes_apart() -> None:
    """A heredoc's body is not parsed as commands (an unbalanced quote in it is fine) and is
    part of the write's target: another body is another write."""
    one = classify_command("cat <<'EOF' > t.py\nprint(\"it's\")\nEOF\npython t.py")
    two = classify_command("cat <<'EOF' > t.py\nprint('other')\nEOF\npython t.py")
    assert one is not None
    assert two is not None
    assert one.programs == ("cat", "python")
    assert one.effect == two.effect == "write"
    assert one.target != two.target
    assert "t.py" in one.target


def test_spellings_of_one_write_share_a_target() -> None:
    """Options do not change what a write acts on; another operand does."""
    targets = {
        classify_command(c).target  # type: ignore[union-attr]
        for c in (
            "rm -f build/x",
            "rm -rf build/x",
            "rm -r -f -- build/x",
        )
    }
    assert len(targets) == 1
    assert classify_command("rm -f build/y").target not in targets  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("command", "judged"),
    [
        ("bash -lc \"sed -i 's/a/b/' f.py\"", "write"),
        ("sh -c 'cat f.py'", "read"),
        ("bash -o pipefail -c 'grep -c x f | wc -l'", "read"),
        ('/bin/bash -c "ls -lha /bin/bash"', "read"),
        ("bash -c 'cd /x && python t.py'", "run"),
        ("bash -e -c 'echo hi > out.txt'", "write"),
        ("bash --login -c 'git commit -am wip'", "write"),
        ("zsh -c \"bash -c 'rm -f x'\"", "write"),
        ("timeout 60 bash -c 'pip install -e .'", "write"),
        ("bash script.sh", "run"),
        ("bash -c", "run"),
        ("bash -x run.sh -c", "run"),
        ('bash -c "echo \'open"', "run"),
        ("bash -lc \"cat > app.py <<'EOF'\nprint('hi')\nEOF\"", "write"),
        ("sh -c \"python - <<EOF\nopen('x', 'w').write('1')\nEOF\"", "write"),
        ('bash -c "cat <<EOF\nhello\nEOF"', "read"),
    ],
)
def test_a_shells_c_script_is_judged_as_the_line_it_wraps(command: str, judged: str) -> None:
    """``bash -lc "…"`` (how Codex-style agents send every command) is the line inside; a
    script file, or a script that cannot be parsed, is a run."""
    assert effect(command) == judged


def test_a_herestring_is_no_heredoc() -> None:
    """``<<< word`` feeds one word: the lines after it are commands, not a body (before, a
    ``sed -i`` after ``wc -l <<< hello`` was cut out as one and the line judged a run)."""
    assert _cut_heredocs("grep -c x <<< hello\nls") == ("grep -c x <<< hello\nls", [])
    assert effect("wc -l <<< hello\nsed -i s/a/b/ f\nhello\npytest") == "write"
    assert effect("python - <<< 'print(1)'") == "run"


def test_a_heredoc_inside_a_quoted_script_is_the_scripts() -> None:
    """A ``<<`` inside a shell's quoted ``-c`` script is no heredoc of the outer line: the
    script is parsed whole, and its own heredoc tells its writes apart as a plain
    heredoc's does."""
    script = "cat > app.py <<'EOF'\nprint({})\nEOF"
    plain = classify_command(script.format(1))
    wrapped = classify_command(f'bash -lc "{script.format(1)}"')
    assert plain is not None
    assert wrapped is not None
    assert wrapped.effect == "write"
    assert wrapped.target == plain.target
    other = classify_command(f'bash -lc "{script.format(2)}"')
    assert other is not None
    assert other.target != wrapped.target
    assert classify_command("echo 'x <<EOF") is None  # still an open quote
    quoted = classify_command('echo "a <<EOF" > f')  # words, not a heredoc
    assert quoted is not None
    assert quoted.target == {"echo", "a <<EOF", "f"}


def test_a_wrapped_write_has_the_target_of_the_line_it_wraps() -> None:
    """``bash -c "rm -f X"`` and ``rm -f X`` are one write; shells nested past three deep
    are runs (no unbounded recursion on a hostile line)."""
    plain = classify_command("rm -f build/x")
    assert plain is not None
    for wrapped in (
        "bash -c 'rm -f build/x'",
        'sh -lc "rm -rf build/x"',
        "bash -c 'bash -c \"rm -f build/x\"'",
    ):
        info = classify_command(wrapped)
        assert info is not None
        assert (info.effect, info.target) == ("write", plain.target)
    line = "rm -f x"
    for _ in range(4):
        line = f"bash -c {shlex.quote(line)}"
    assert effect(line) == "run"


@pytest.mark.parametrize(
    ("args", "role"),
    [
        ({"command": "sed -i 's/a/b/' f.py"}, "command"),
        ({"cmd": "cd /repo && pytest -q"}, "command"),
        ({"command": "FOO=1 timeout 30 make test"}, "command"),
        ({"command": ["bash", "-lc", "ls"]}, "command"),
        ({"command": "/usr/bin/python3 x.py", "timeout": 30}, "command"),
        ({"command": "view", "path": "/repo/a.py"}, "editor"),
        ({"command": "str_replace", "path": "a.py", "old_str": "a", "new_str": "b"}, "editor"),
        ({"command": "cat", "path": "a.py"}, "editor"),
        ({"command": "deploy", "path": "a.py"}, None),
        ({"file_path": "/r/a.py", "old_string": "a", "new_string": "b"}, "editor"),
        (
            {"file_path": "/r/a.py", "old_string": "a", "new_string": "b", "replace_all": True},
            "editor",
        ),
        ({"old_string": "a", "new_string": "b"}, None),
        ({"file_path": "/r/a.py", "content": "x"}, None),
        ({"command": "summarise the last report"}, None),
        ({"command": "status"}, None),
        ({"command": ""}, None),
        ({"command": 3}, None),
        ({"query": "ls -la"}, None),
        (["ls"], None),
    ],
)
def test_a_nameless_tools_role_is_told_by_its_arguments(args: object, role: str | None) -> None:
    """A tool whose name says nothing: a shell line in ``command``/``cmd`` makes it a
    command tool, an editor's sub-command beside a file argument an editor, and so does a
    text replacement beside a path (Claude Code's ``Edit``)."""
    assert role_by_arguments(args) == role


def test_the_key_folds_whitespace_and_quoting() -> None:
    a, b = classify_command("grep  -n 'def x'  f.py"), classify_command('grep -n "def x" f.py')
    assert a is not None
    assert b is not None
    assert a.key == b.key


@pytest.mark.parametrize("command", ['echo "unclosed', "ls 'open", "trailing \\", "", "  "])
def test_unparseable_or_empty_commands_are_none(command: str) -> None:
    assert classify_command(command) is None


def test_tokens_are_shlexs_on_real_looking_commands() -> None:
    for command in (
        'grep -rn "a b" . | head',
        "echo 'it''s' \"q\\\"x\" a\\ b",
        "a&&b||c;d&e|f",
        "cat <f >g 2>&1",
        "x=1 y='2 3' cmd",
        "find . -exec rm {} \\;",
        "printf '%s\\n' x",
    ):
        assert tokens(command) == shell_tokens(command)


@FUZZ
@given(SHELLISH)
def test_tokens_equal_shlex_on_any_string(text: str) -> None:
    """The regex tokenizer is shlex's rules: the same tokens, and None where shlex raises."""
    assert tokens(text) == shell_tokens(text)


@FUZZ
@given(st.one_of(SHELLISH, st.text(max_size=200)))
def test_classifiers_never_raise(text: str) -> None:
    info = classify_command(text)
    assert info is None or info.effect in ("read", "run", "write")
    assert classify_code(text) in ("run", "write")
    assert isinstance(failed_output(text), bool)
    for tool in ("bash", "python", "str_replace_editor", "mcp__shell__run_command"):
        found = call_effect(tool, {"command": text, "code": text})
        assert found is None or found.effect in ("read", "run", "write")


def test_tools_are_recognised_by_name() -> None:
    assert [
        tool_role(t)
        for t in (
            "bash",
            "execute_bash",
            "run_command",
            "terminal",
            "shell",
            "mcp__shell__exec",
            "desktop-commander.run_shell",
            "python",
            "execute_python",
            "str_replace_editor",
            "str_replace_editor view",
            "apply_patch",
            "get_weather",
            "read_file",
        )
    ] == [
        "command",
        "command",
        "command",
        "command",
        "command",
        "command",
        "command",
        "code",
        "code",
        "editor",
        "editor",
        "editor",
        None,
        None,
    ]


def kind_of(tool: str, args: dict[str, object], declared: str | None = None) -> str | None:
    found = call_effect(tool, args, declared)
    return found.effect if found is not None else None


def test_call_effects_of_command_code_and_editor_tools() -> None:
    read = call_effect("bash", {"command": "cat a.py"})
    assert read is not None
    assert (read.effect, read.arg) == ("read", "command")
    write = call_effect("run_command", {"cmd": ["bash", "-lc", "rm -rf build"]})
    assert write is not None
    assert write.effect == "write"
    assert "build" in (write.target or ())
    assert kind_of("python", {"code": "print(1)"}) == "run"
    assert kind_of("python", {"code": "open('x', 'w')"}) == "write"
    assert kind_of("str_replace_editor", {"command": "view", "path": "a"}) == "read"
    assert (
        kind_of(
            "str_replace_editor",
            {"command": "str_replace", "path": "a", "old_str": "x", "new_str": "y"},
        )
        == "write"
    )
    assert kind_of("str_replace_editor insert", {"path": "a"}) == "write"
    assert kind_of("get_weather", {"command": "rm -rf /"}) is None
    assert kind_of("bash", {"command": "echo 'open"}) is None
    assert kind_of("deploy_box", {"script": "git push"}, "script") == "write"


def test_command_text_takes_strings_and_argv_lists() -> None:
    assert command_text("ls") == "ls"
    assert command_text(["bash", "-lc", "make test"]) == "make test"
    assert command_text(["git", "commit", "-m", "a b"]) == "git commit -m 'a b'"
    assert command_text(3) is None
    assert command_text(["ok", 3]) is None


@pytest.mark.parametrize(
    ("output", "failed"),
    [
        ("<returncode>1</returncode>\n<output>\n</output>", True),
        ("<returncode>0</returncode>\n<output>\n</output>", False),
        ("ERROR:\nNo replacement was performed, old_str `x` did not appear verbatim", True),
        ("sed: can't read x.py: No such file or directory", True),
        ("bash: ponyc: command not found", True),
        ("The file a.c has been edited.", False),
        ("", False),
        (
            "sed: -e expression #1, char 9: unknown option\n"
            "[The command completed with exit code 1.]",
            True,
        ),
        ("\n[The command completed with exit code 0.]", False),
        ("Exit code: 2\nWall time: 0.1 seconds\nOutput:\n", True),
        ("Exit code: 0\nWall time: 0.1 seconds\nOutput:\n", False),
        ("make: *** [all] exit status 2", True),
        ("Process exited with code 1", True),
        ('{"output": "", "metadata": {"exit_code": 1}}', True),
        ('{"output": "", "metadata": {"exit_code": 0}}', False),
        ("<tool_use_error>String to replace not found in file.\nString: x</tool_use_error>", True),
        ("Found 2 matches of the string to replace, but replace_all is false.", True),
        ("Failed to find expected lines in app.py:\nx = 1", True),
        ("The file /r/a.py has been updated. Here's the result of running `cat -n`", False),
        ("Success. Updated the following files:\nM app.py", False),
    ],
)
def test_failed_output(output: str, failed: bool) -> None:
    assert failed_output(output) is failed


SIMPLE_WORDS = st.text(alphabet="abcxyz019_ ./:=,+%@~^*?!$#[]-", max_size=60)


@FUZZ
@given(st.one_of(SIMPLE_WORDS, SHELLISH))
def test_the_fast_paths_judge_as_the_full_parse(text: str) -> None:
    """A plain line's tokens (split at spaces) are shlex's, and a remembered judgement is
    the one a fresh parse makes."""
    from loopobs.detectors import commands

    assert tokens(text) == shell_tokens(text)
    if commands._SIMPLE_LINE.fullmatch(text):
        assert tokens(text) == text.split()
    assert classify_command(text) == commands._classify(text)
    assert classify_command(text) == classify_command(text)


def _cut_heredocs_line_by_line(command: str) -> tuple[str, list[str]]:
    """The reference for ``_cut_heredocs``: each line looked at in turn, a body's end too."""
    if "<<" not in command:
        return command, []
    lines = command.split("\n")
    out: list[str] = []
    bodies: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        matches = list(_HEREDOC.finditer(line))
        if not matches:
            out.append(line)
            continue
        rebuilt = ""
        done = 0
        for m in matches:
            rebuilt += line[done : m.start()]
            done = m.end()
            _, quoted, commented = _comments_read("\n".join([*out, rebuilt]))
            if quoted or commented:
                rebuilt += m.group()
                continue
            body: list[str] = []
            while i < len(lines):
                text = lines[i]
                i += 1
                if (text.lstrip("\t") if m.group(1) == "-" else text).strip() == m.group(3):
                    break
                body.append(text)
            rebuilt += f"<<< __heredoc{len(bodies)}__"
            bodies.append("\n".join(body))
        out.append(rebuilt + line[done:])
    return "\n".join(out), bodies


HEREDOCISH = st.lists(
    st.sampled_from(
        [
            *("<<EOF", "<<-EOF", "<< 'EOF'", '<<"PY"', "<<PY", "EOF", "\tEOF", " EOF ", "PY"),
            *("EOFX", "xEOF", "cat ", "python3 - ", "> f.py", "\n", "\n", "\n", " ", "\t"),
            *("a", "'", "<<", "<<<", '"', "\\", 'bash -c "', "sh -lc '"),
            *("# it's ", "#", " #", "a#", "${#x}"),
        ]
    ),
    max_size=24,
).map("".join)


@FUZZ
@given(st.one_of(HEREDOCISH, SHELLISH))
def test_heredocs_are_cut_as_line_by_line(text: str) -> None:
    """Finding a heredoc's end by searching for its word is looking at each line, and a
    ``<<`` inside quotes is none."""
    assert _cut_heredocs(text) == _cut_heredocs_line_by_line(text)


FAILUREISH = st.lists(
    st.sampled_from(
        [
            *("<returncode>1</returncode>", "<returncode>0</returncode>", "Error", "error:"),
            *("FATAL ", "usage: x", "Command not found", "No such file or directory"),
            *("Permission denied", "cannot open", "cannot ", "not permitted", "hunks failed"),
            *("No replacement was performed", "did not appear verbatim", "is not unique"),
            *("Traceback (most recent call last)", "hunk FAILED", " ", "\n", "\t", "ok", "x"),
            *("exit code ", "Exit code: ", "exit status", "exited with code ", "exited with "),
            *('"exit_code": ', '"exit_code":', "0", "1", "9", ":", "status "),
            *("<tool_use_error>", "String to replace not found", "found 2 matches of the "),
            *("string to replace", "Failed to find expected lines", "failed to find context"),
        ]
    ),
    max_size=10,
).map("".join)


@FUZZ
@given(st.one_of(FAILUREISH, st.text(max_size=60)))
def test_failed_output_is_the_whole_patterns(text: str) -> None:
    """The substring searches before the failure pattern change no answer."""
    from loopobs.detectors import commands

    whole = bool(text) and commands._FAILURE.search(text[:2_000].lower()) is not None
    assert failed_output(text) == whole


def _simple_commands_one_by_one(tokens: list[str]) -> list[tuple[list[str], list[str]]]:
    """The reference for ``_simple_commands``: each token looked at in turn."""
    from loopobs.detectors import commands

    found: list[tuple[list[str], list[str]]] = []
    words: list[str] = []
    written: list[str] = []
    rest = iter(tokens)
    for tok in rest:
        if tok in commands._OPERATORS:
            if words or written:
                found.append((words, written))
                words, written = [], []
        elif tok in commands._REDIRECT_OUT or tok in commands._REDIRECT_IN or tok == "<<":
            target = next(rest, "")
            if (
                tok in commands._REDIRECT_OUT
                and target
                and target not in ("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty")
                and target != "-"
                and not target.isdecimal()
            ):
                written.append(target)
        else:
            words.append(tok)
    if words or written:
        found.append((words, written))
    return found


def _wrapped_target(program: str, args: list[str], depth: int) -> frozenset[str] | None:
    """The target of a shell's ``-c`` script (the operand after the first short-option
    cluster holding ``c``, skipping ``-o`` values and long options), by this reference."""
    if program not in ("bash", "sh", "zsh", "dash", "ksh") or depth >= 3:
        return None
    seen_c, rest = False, iter(args)
    for a in rest:
        if a == "--":
            break
        if a.startswith("--"):
            continue
        if len(a) > 1 and a[0] in "-+":
            if a[1:] in ("o", "O"):
                next(rest, None)
            seen_c = seen_c or "c" in a[1:]
            continue
        if not seen_c:
            return None
        inner = _classify_by_shlex(a, depth + 1)
        return inner.target if inner is not None and inner.effect == "write" else None
    script = next(rest, None) if seen_c else None
    if script is None:
        return None
    inner = _classify_by_shlex(script, depth + 1)
    return inner.target if inner is not None and inner.effect == "write" else None


def _classify_by_shlex(command: str, depth: int = 0) -> CommandInfo | None:
    """The reference for ``_classify``: shlex's tokens, every line through the full parse
    (no fast path), each part's effect ranked and its target gathered as it comes."""
    from loopobs.detectors import commands

    text, bodies = _cut_heredocs(command[:20_000])
    split = shell_tokens(commands.join_continuations(strip_comments_char_by_char(text)))
    if not split:
        return None
    rank = {"read": 0, "run": 1, "write": 2}
    effect = "read"
    programs: list[str] = []
    target: set[str] = set()
    for simple, written in _simple_commands_one_by_one(split):
        words = commands._strip_prefixes(simple)
        judged = "read"
        if words:
            program, judged = commands._judge(words, bodies)
            programs.append(program)
        if written:
            judged = "write"
            target.update(written)
        effect = max(effect, judged, key=rank.__getitem__)
        if judged == "write" and words:
            wrapped = _wrapped_target(program, words[1:], depth)
            if wrapped is not None:
                target.update(wrapped)  # a shell's -c script's own target
                continue
            target.add(program)
            target.update(
                w
                for w in words[1:]
                if w not in ("{}", ";", "+", "\\;", "--", "-", "{", "}")
                and not (w.startswith("-") and len(w) > 1)
            )
    if not programs and not target:
        return None
    if effect == "write":
        target.update(f"<<{text_key(b)}" for b in bodies)
    key = "\x1f".join(split) + "".join("\x1e" + b for b in bodies)
    hashed = text_key("\x1f".join(sorted(target))) if effect == "write" else None
    return CommandInfo(
        effect,  # type: ignore[arg-type]
        tuple(programs),
        frozenset(target) if effect == "write" else frozenset(),
        key,
        text_key(key),
        hashed,
    )


# Lines built of what agents type: programs, options, quoted scripts of one kind of quote
# or both, escapes, operators, redirections and heredocs.
REALISTIC = st.lists(
    st.sampled_from(
        [
            *("cd /testbed", "ls -la", "cat src/a.py", "python x.py", "pytest -q", "git diff"),
            *("sed -i", "sed -n", "grep -rn", "find . -name", "rm -rf", "timeout 30", "sudo"),
            *("FOO=1", "python -c", "echo", "tee", "xargs", "git commit -m", "-exec rm {}"),
            *("'s/a b/c/'", "'*.py'", '"*.py"', '"a b"', "'it'\\''s'", '"q\\"x"', "'a'\"b\""),
            *("''", '""', "'x'y", "a'b c'd", "print('hi')", "open('f', 'w')", "\\;", "\\ "),
            *(" ", " ", " ", "  ", "\t", " && ", " || ", " | ", "; ", " & ", "\n", " \\\n"),
            *(" > out.txt", " >> log", " 2>&1", " 2>/dev/null", " < in", " <<< x", "(", ")"),
            *(" <<'EOF'\nprint(1)\nEOF\n", " <<EOF\nx\nEOF", "{", "}", "x", "-", "--"),
            *("bash -c", "sh -lc", "bash -o pipefail -c", "'rm -f x'", '"sed -i s/a/b/ f"'),
            *("'ls && cat f'", '"echo a > f"', "'bash -c \"rm y\"'", "-e", "--login"),
            *("\"cat > f <<'EOF'\nx\nEOF\"", "'python - <<EOF\nopen(1)\nEOF'"),
        ]
    ),
    max_size=16,
).map("".join)


@FUZZ
@given(st.one_of(REALISTIC, SHELLISH, SIMPLE_WORDS))
def test_classify_is_the_full_parse_by_shlex(text: str) -> None:
    """Every fast path (a plain line's split, quotes dropped, the judgement assembled)
    judges as shlex's tokens through the full parse do."""
    from loopobs.detectors import commands

    assert tokens(text) == shell_tokens(text)
    split = shell_tokens(text)
    if split:
        assert commands._simple_commands(split) == _simple_commands_one_by_one(split)
    assert commands._classify(text) == _classify_by_shlex(text)


@needs_real_trajectories
def test_classify_is_the_full_parse_by_shlex_on_real_lines() -> None:
    """The same on the command lines of a set of real trajectories (read where it is, as
    the real-trajectory benchmark reads it: the data is not in the repository)."""
    from loopobs.detectors import commands

    lines = real_command_lines()
    assert lines
    for line in lines:
        assert tokens(line) == shell_tokens(line)
        assert commands._classify(line) == _classify_by_shlex(line)


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "-i",
                "-i.bak",
                "-ni",
                "-n",
                "--in-place",
                "--in-place=.b",
                "--in-placex",
                "--quiet",
                "-",
                "--",
                "-e",
                "s/i/x/",
                "f.py",
                "i",
                "-E",
            ]
        ),
        max_size=5,
    )
)
def test_sed_in_place_is_the_short_option_or_the_long_one(args: list[str]) -> None:
    """One loop over sed's arguments is the two scans it replaced."""
    from loopobs.detectors import commands

    both = commands._short_option(args, "i") or any(
        a == "--in-place" or a.startswith("--in-place=") for a in args if a[:2] == "--"
    )
    assert commands._sed_in_place(args) == both
    assert effect(" ".join(["sed", *args, "x.txt"])) == ("write" if both else "read")


@FUZZ
@given(st.one_of(REALISTIC, SHELLISH))
def test_each_unquoting_shortcut_is_the_whole_pattern(text: str) -> None:
    """A token's quotes and escapes removed by a shortcut are what the part pattern removes."""
    from loopobs.detectors import commands

    for token in commands._TOKEN.findall(text):
        if token not in ("'", '"', "\\"):
            assert commands._unquoted(token) == commands._PART.sub(commands._unquote, token)


@pytest.mark.parametrize(
    ("line", "joined"),
    [
        ("cd /repo && \\\nsed -i 's/a/b/' f.py", "cd /repo && sed -i 's/a/b/' f.py"),
        ("ls \\\n  -la", "ls   -la"),
        ('echo "one \\\ntwo"', 'echo "one two"'),  # inside double quotes too
        ("echo 'one \\\ntwo'", "echo 'one \\\ntwo'"),  # single quotes keep it
        ("echo \\\\\nls", "echo \\\\\nls"),  # an escaped backslash, then a newline
        ("ls", "ls"),
    ],
)
def test_line_continuations_are_joined_as_the_shell_joins_them(line: str, joined: str) -> None:
    from loopobs.detectors.commands import join_continuations

    assert join_continuations(line) == joined


def test_an_edit_after_a_line_continuation_is_a_write() -> None:
    """shlex keeps a continuation's newline in the next word ("\\nsed"): the edit read as a
    program of that name, a run. The shell runs sed."""
    info = classify_command("cd /repo && \\\nsed -i 's/old/new/' src/app.py")
    assert info is not None
    assert (info.effect, info.programs) == ("write", ("cd", "sed"))
    listing = classify_command("ls \\\n  -la src")
    assert listing is not None
    assert (listing.effect, listing.programs) == ("read", ("ls",))


def _call_effect_by_shlex(command: str, arg: str) -> CallEffect | None:
    """The reference for ``command_line_effect``: the full parse by shlex, as a call's
    effect."""
    info = _classify_by_shlex(command)
    if info is None:
        return None
    if info.effect == "write":
        return CallEffect(info.effect, info.target, info.key, arg, info.key_hash, info.target_hash)
    return CallEffect(info.effect, None, info.key, arg, info.key_hash)


def _same_effect_as_the_full_parse(text: str) -> None:
    from loopobs.detectors import commands

    lexed = commands._lexed(text)
    split = shell_tokens(text)
    assert lexed == (None if split is None else (split, "\x1f".join(split)))
    expected = _call_effect_by_shlex(text, "cmd")
    assert commands.command_line_effect(text, "cmd") == expected
    assert call_effect("any", {"cmd": text}, None, "command") == expected


# Quotes of both kinds, escapes and the key's separator (a token holding it is unquoted
# token by token).
QUOTEISH = st.text(alphabet="'\"\\ \x1fa|=-", max_size=24)


@FUZZ
@given(st.one_of(REALISTIC, SHELLISH, SIMPLE_WORDS, QUOTEISH))
def test_a_calls_effect_is_the_full_parse_by_shlex(text: str) -> None:
    """The lean path of a call's effect (tokens and key together, a simple command or a
    pipeline judged in place) makes what the full parse by shlex makes."""
    _same_effect_as_the_full_parse(text)


@needs_real_trajectories
def test_a_calls_effect_is_the_full_parse_by_shlex_on_real_lines() -> None:
    """The same on every command line of a set of real trajectories."""
    lines = real_command_lines()
    assert lines
    for line in lines:
        _same_effect_as_the_full_parse(line)


CONTINUATIONISH = st.text(alphabet="\\\n'\" a;é\t", max_size=40)


@FUZZ
@given(CONTINUATIONISH)
def test_line_continuations_are_joined_as_the_whole_pattern_joins_them(text: str) -> None:
    """The str-method join of a line without double quotes or escaped backslashes and
    quotes is the pattern's."""
    from loopobs.detectors import commands

    assert join_continuations(text) == commands._CONTINUATION.sub(commands._join_in, text)


def test_a_command_lines_effect_is_judged_anew_and_not_remembered() -> None:
    """command_line_effect is call_effect's effect of a command argument, and leaves the
    process-wide caches as they were (its caller remembers effects itself)."""
    from loopobs.detectors import commands

    lines = ["ls -la", "sed -i 's/a/b/' f.py && git diff", "cat <<'EOF' > x.py\nprint(1)\nEOF"]
    lines.append("python gen.py " + "x" * 3_000)  # a long line, in the small cache
    commands.clear_cache()
    found = [commands.command_line_effect(line) for line in lines]
    assert commands._shell_remembered.cache_info().currsize == 0
    assert commands._shell_long.cache_info().currsize == 0
    for line, effect in zip(lines, found, strict=True):
        assert effect == call_effect("bash", {"command": line}, None, "command")
        assert effect == call_effect("python", {"code": "x", "command": line}, None, "code")
        assert commands.command_line_effect(line, "cmd") == call_effect("sh", {"cmd": line})
    assert commands.command_line_effect("echo 'open") is None


def test_long_lines_are_remembered_by_what_is_parsed() -> None:
    """A line longer than the main caches take is remembered in a small cache of its own,
    keyed on its first 20,000 characters (all that is parsed), as judged anew."""
    from loopobs.detectors import commands

    body = "".join(f"print({i})\n" for i in range(400))
    line = f"cat <<'EOF' > gen.py\n{body}EOF\npython3 gen.py"
    assert 2_048 < len(line) <= 20_000
    commands.clear_cache()
    first = classify_command(line)
    assert first == commands._classify(line)
    assert classify_command(line) is first
    effect_first = call_effect("bash", {"command": line}, None, "command")
    assert effect_first == _call_effect_by_shlex(line, "command")
    assert call_effect("bash", {"command": line}, None, "command") is effect_first
    longer = "ls " + "x" * 30_000
    assert classify_command(longer) == commands._classify(longer)
    assert commands._classify_long.cache_info().currsize <= commands._REMEMBERED_LONG


@FUZZ
@given(st.one_of(SHELLISH, REALISTIC))
def test_the_reference_tokens_are_shlexs(text: str) -> None:
    """Uncut, the character-at-a-time reference is shlex's tokens: it is shlex's rules."""
    assert shell_tokens(text, cut=False) == shlex_tokens(text)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls;\nrm x", ["ls", ";", "\n", "rm", "x"]),
        ("cd /x\n\nrm y", ["cd", "/x", "\n", "\n", "rm", "y"]),
        ("make &&\nrm y", ["make", "&&", "\n", "rm", "y"]),
        ("(cd x);rm y", ["(", "cd", "x", ")", ";", "rm", "y"]),
        ("a 2>&1|tail", ["a", "2", ">&", "1", "|", "tail"]),
        ("a &&& b;;&c", ["a", "&&", "&", "b", ";;", "&", "c"]),
        ("grep -n '()' f", ["grep", "-n", "()", "f"]),
        ("echo \\(\\)", ["echo", "()"]),
        ("grep -c ';' f", ["grep", "-c", "\\;", "f"]),
        ('echo "&&" \\| x', ["echo", "\\&&", "\\|", "x"]),
        ("find . -exec rm {} \\; -print", ["find", ".", "-exec", "rm", "{}", "\\;", "-print"]),
    ],
)
def test_operator_runs_are_read_as_the_shells_operators(command: str, expected: list[str]) -> None:
    """shlex keeps a run of operator characters whole: ``;`` and a newline, a blank line,
    ``&&`` at a line's end were one unknown word, and the next command an argument of the
    one before (``ls;`` then ``rm x`` read as ``ls``). Quoted or escaped, a run is a word;
    one operator alone so (``';'``, ``\\;``) is the word ``\\;``: no operator."""
    assert tokens(command) == expected


@pytest.mark.parametrize(
    ("command", "judged"),
    [
        ("ls;\nrm x", "write"),
        ("cd /testbed\n\nsed -i s/a/b/ f.py", "write"),
        ("pytest -q &&\ngit add -A", "write"),
        ("(cd x);rm y", "write"),
        ("grep -n '()' f", "read"),
        ("grep -c ';' f", "read"),
        ("tr '|' ',' < a.csv", "read"),
        ("find . -name '*.pyc' -exec rm {} ';'", "write"),
    ],
)
def test_a_command_after_a_cut_run_is_judged(command: str, judged: str) -> None:
    assert effect(command) == judged


@pytest.mark.parametrize(
    ("command", "judged", "programs"),
    [
        ("# Let's fix the parser\nsed -i 's/a/b/' f.py", "write", ("sed",)),
        ("sed -i 's/a/b/' f.py  # don't forget the test", "write", ("sed",)),
        ("ls; # it's a check\nrm x", "write", ("ls", "rm")),
        ("grep -c x f # it's done \\\nrm y", "write", ("grep", "rm")),
        ("# cat <<EOF\nls", "read", ("ls",)),
        ("echo a#b > f", "write", ("echo",)),
        ("echo ${#x}", "read", ("echo",)),
        ('echo "it\'s # no comment" > f', "write", ("echo",)),
    ],
)
def test_comments_are_dropped_as_the_shell_drops_them(
    command: str, judged: str, programs: tuple[str, ...]
) -> None:
    """A ``#`` starting a word outside quotes comments out the rest of its line. Agents
    comment their scripts, and a comment's apostrophe read as a quote made the whole line
    unparseable: a ``sed -i`` under ``# Let's fix …`` was no write."""
    assert effect_and_programs(command) == (judged, programs)


def test_a_heredoc_after_a_commented_apostrophe_is_cut() -> None:
    """A comment's apostrophe opens no quote for the heredoc that follows, and a comment
    in the body is the body's."""
    commented = classify_command("# Let's write it\ncat <<'EOF' > t.py\n# it's\nEOF\npython t.py")
    plain = classify_command("cat <<'EOF' > t.py\n# it's\nEOF\npython t.py")
    assert commented is not None
    assert plain is not None
    assert commented.effect == "write"
    assert commented.target == plain.target
    assert _cut_heredocs("# cat <<EOF\nls") == ("# cat <<EOF\nls", [])


@FUZZ
@given(st.one_of(SHELLISH, HEREDOCISH, REALISTIC))
def test_comments_are_stripped_as_read_a_character_at_a_time(text: str) -> None:
    """Where every quote closes, the comments dropped are the reference's."""
    stripped, quoted, _ = _comments_read(text)
    if not quoted:
        assert strip_comments(text) == stripped


@pytest.mark.parametrize(
    ("command", "judged", "programs"),
    [
        ("command -v python", "read", ("command",)),
        ("command -V git", "read", ("command",)),
        ("if command -v black; then echo ok; fi", "read", ("command", "echo")),
        ("command -p rm x", "write", ("rm",)),
        ("command ls", "read", ("ls",)),
        ("sort -o out.txt in.txt", "write", ("sort",)),
        ("sort -nro data.txt data.txt", "write", ("sort",)),
        ("sort --output=sorted.txt data.txt", "write", ("sort",)),
        ("sort -u data.txt | head", "read", ("sort", "head")),
    ],
)
def test_command_lookups_read_and_sort_into_a_file_writes(
    command: str, judged: str, programs: tuple[str, ...]
) -> None:
    """``command -v x`` asks where ``x`` is (it was a run of a program named ``-v``);
    ``sort -o f`` writes ``f`` (it was a read)."""
    assert effect_and_programs(command) == (judged, programs)


@pytest.mark.parametrize(
    ("command", "judged"),
    [
        ("black src/app.py", "write"),
        ("black --check .", "read"),
        ("isort --diff src", "read"),
        ("isort src/app.py", "write"),
        ("ruff format src", "write"),
        ("ruff format --check src", "read"),
        ("ruff check src", "run"),
        ("ruff check --fix src", "write"),
        ("ruff check --fix --diff src", "run"),
        ("prettier a.js", "read"),
        ("prettier --write a.js", "write"),
        ("autopep8 -i f.py", "write"),
        ("autopep8 f.py", "read"),
        ("gofmt -w main.go", "write"),
        ("eslint src", "run"),
        ("eslint --fix src", "write"),
        ("python -m black f.py", "write"),
        ("python3 -m isort --check-only f.py", "read"),
        ("python -m ruff check --fix .", "write"),
        ("cargo fmt", "write"),
        ("cargo fmt --check", "read"),
        ("go fmt ./...", "write"),
        ("cargo build", "run"),
    ],
)
def test_formatters_write_unless_they_check(command: str, judged: str) -> None:
    """A formatter that rewrites files is a write (``black f.py`` was a run: its edit was no
    progress); told to check or print, it reads."""
    assert effect(command) == judged


@pytest.mark.parametrize(
    ("code", "judged"),
    [
        ("print(open('django/db/backends/base.py').read())", "run"),
        ("with open('app/base.py', 'r') as f:\n    text = f.read()", "run"),
        ("open(path, 'rb')", "run"),
        ("Path('data.csv').open()", "run"),
        ("plt.legend(mode='expand'); open('data.csv')", "run"),
        ("open('x.py', 'w')", "write"),
        ("open(p, 'r+')", "write"),
        ("open(os.path.join(d, 'base.py'), 'a')", "write"),
        ("with open(f'{d}/x.py', \"w\", encoding='utf-8') as f:", "write"),
        ("open(path, encoding='utf-8', mode='w')", "write"),
        ("Path('a.py').open('w')", "write"),
        ("codecs.open(p, 'wb', 'utf-8')", "write"),
        ("edit_file_by_replace('app.py', to_replace='x', new_content='y')", "write"),
        ("insert_content_at_line('app.py', 3, 'import os')", "write"),
        ("fs.writeFileSync('out.json', data)", "write"),
        ("print(fs.readFileSync('in.json'))", "run"),
    ],
)
def test_code_opening_a_file_writes_only_in_a_writing_mode(code: str, judged: str) -> None:
    """A mode is looked for where ``open()`` takes one: before, any quoted text after
    ``open(`` holding a ``w``, ``a`` or ``x`` was one, so reading ``base.py`` (its ``a``) was
    a write, and a script that only reads made progress. OpenHands' IPython editing helpers
    and Node's ``fs`` writes are writes."""
    assert classify_code(code) == judged
    assert effect(f"python3 - <<'EOF'\n{code}\nEOF") == judged
