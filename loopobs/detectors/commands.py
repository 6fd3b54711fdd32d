"""What a command line does: reads, writes or runs something, told from the parsed command.

Coding agents do most of their work through one generic shell tool (``bash``), so the
tool's name says nothing about a call's side effects. :func:`classify_command` parses
the command line with the standard library's :mod:`shlex` (quoting, escapes and the
operators ``|``, ``&&``, ``||``, ``;``, ``&``, newlines and redirections), cuts
heredoc bodies out first (their content is part of the call's identity), and judges
each simple command of the line after its prefixes (``cd X &&``, ``VAR=value``, and
the wrappers ``timeout``, ``sudo``, ``nohup``, ``env``, ``time``, ``nice``, ``xargs`` …):

- ``write``: ``sed -i``, ``perl -i``, a ``>``/``>>`` redirection or ``tee`` into a file,
  ``cp``/``mv``/``rm``/``mkdir``/``touch`` …, ``git add|commit|apply|checkout`` …,
  ``patch``, ``find -delete`` or ``-exec rm``, ``tar x``, package installs, and code run
  with ``python -c`` / a heredoc that opens a file for writing;
- ``run``: a program whose effects cannot be told (``python script.py``, ``pytest``,
  ``make``, an unknown program): re-running it with nothing changed is a repeat;
- ``read``: ``cat``, ``ls``, ``grep``, ``find``, ``head``, ``sed -n``, ``git status``,
  ``git diff`` … only, and ``cd``/``echo`` without a redirection.

A line is the strongest effect of its parts (write over run over read). A command that
cannot be parsed (an unclosed quote) yields ``None``: the caller falls back to its rules
for the tool. :func:`classify_code` judges a code-execution tool's code the same way.
Neither ever raises, whatever the text.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from typing import Any, Final, Literal, NamedTuple

from loopobs.contract.hashing import text_key

__all__ = [
    "CallEffect",
    "CommandEffect",
    "CommandInfo",
    "ToolRole",
    "call_effect",
    "classify_code",
    "classify_command",
    "clear_cache",
    "command_line_effect",
    "command_text",
    "failed_output",
    "role_by_arguments",
    "join_continuations",
    "strip_comments",
    "tool_role",
]

CommandEffect = Literal["read", "run", "write"]

_MAX_CHARS: Final = 20_000
"""Characters of a command line that are parsed; a longer one is judged on its start."""

_OPERATORS: Final = frozenset({"|", "||", "&&", ";", "&", "\n", ";;", "|&", "(", ")", "{", "}"})
_REDIRECT_OUT: Final = frozenset({">", ">>", "&>", "&>>", ">|", ">&"})
_REDIRECT_IN: Final = frozenset({"<", "<<<", "<>", "<&"})
_NULL_TARGETS: Final = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# A heredoc's operator and word; "<<<" (a herestring) is none.
_HEREDOC: Final = re.compile(r"(?<!<)<<(?!<)(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_.-]*)\2")


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


_KEYWORDS: Final = frozenset(
    {
        "then",
        "do",
        "else",
        "elif",
        "if",
        "while",
        "until",
        "!",
        "time",
        "exec",
        "command",
        "builtin",
        "done",
        "fi",
        "esac",
    }
)
# Wrappers: the program they run comes after their own options (and a value for some).
_WRAPPERS: Final = frozenset(
    {
        "sudo",
        "timeout",
        "nohup",
        "env",
        "nice",
        "ionice",
        "stdbuf",
        "xargs",
        "doas",
        "chronic",
        "unbuffer",
        "gtimeout",
        "caffeinate",
    }
)
_WRAPPER_VALUE_OPTS: Final = frozenset(
    {"-u", "-g", "-n", "-s", "-k", "-I", "-d", "-P", "-L", "-E", "-o", "-e", "-i", "-c", "-C", "-a"}
)
_NEUTRAL: Final = frozenset(
    {
        "cd",
        "pushd",
        "popd",
        "export",
        "set",
        "unset",
        "source",
        ".",
        "true",
        "false",
        ":",
        "echo",
        "printf",
        "read",
        "sleep",
        "wait",
        "alias",
        "shopt",
        "trap",
        "return",
        "exit",
        "local",
        "declare",
        "eval",
        "hash",
        "ulimit",
        "umask",
        "clear",
        "history",
        # A loop's header (for f in *.py): its words are a name and a list; the loop's
        # body comes after "do" as commands of its own.
        "for",
        "select",
    }
)
_READERS: Final = _set(
    "cat tac ls ll dir tree grep egrep fgrep rg ag ack find fd locate head tail less more nl "
    "wc sort uniq cut tr awk gawk mawk column paste join comm diff cmp sdiff colordiff file "
    "stat du df pwd which whereis type readlink realpath dirname basename od xxd hexdump "
    "strings jq yq xmllint md5sum sha1sum sha256sum cksum ps top pgrep id whoami groups "
    "hostname uname date cal env printenv test [ [[ lsof free uptime man help info "
    "zcat zgrep zless bzcat xzcat unzip-l lscpu lsblk nproc getent dpkg-query rpm-q "
    "git-status ping curl-head wget-spider"
)
_WRITERS: Final = _set(
    "rm rmdir mv cp mkdir touch ln chmod chown chgrp install patch truncate dd shred rsync "
    "kill pkill killall unlink mkfifo mknod mktemp useradd userdel chattr setfacl "
    "systemctl service crontab apply_patch applypatch"
)
_RUNNERS_READ_ONLY_FLAGS: Final = frozenset({"--version", "-V", "--help", "-h"})
_GIT_READS: Final = _set(
    "status diff log show blame grep ls-files ls-tree rev-parse describe shortlog reflog "
    "cat-file show-ref whatchanged name-rev rev-list merge-base count-objects help version "
    "--version"
)
_GIT_LISTS: Final = frozenset({"branch", "tag", "remote", "stash", "config", "worktree"})
_GIT_LISTING: Final = frozenset(
    {"-l", "--list", "--contains", "--no-contains", "--merged", "--no-merged", "--points-at"}
)
_GIT_CONFIG_READS: Final = frozenset(
    {"--get", "--get-all", "--get-regexp", "-l", "--list", "--show-origin", "--get-urlmatch"}
)
_GIT_CONFIG_WRITES: Final = frozenset(
    {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section", "--remove-section"}
)
_GIT_LIST_WORDS: Final = frozenset(
    {
        "list",
        "show",
        "-l",
        "--list",
        "-a",
        "-r",
        "-v",
        "-vv",
        "--get",
        "--get-all",
        "-n",
        "--show-current",
    }
)
_INSTALLERS: Final = frozenset(
    {
        "pip",
        "pip3",
        "uv",
        "npm",
        "yarn",
        "pnpm",
        "apt",
        "apt-get",
        "conda",
        "mamba",
        "gem",
        "cargo",
        "go",
        "brew",
        "poetry",
        "pipx",
        "dnf",
        "yum",
        "apk",
        "pacman",
        "bundle",
        "composer",
    }
)
_INSTALL_VERBS: Final = frozenset(
    {
        "install",
        "uninstall",
        "remove",
        "add",
        "update",
        "upgrade",
        "i",
        "get",
        "sync",
        "purge",
        "ci",
        "rm",
        "link",
    }
)
_INTERPRETERS: Final = re.compile(r"(?:python|pypy|ipython)[0-9.]*")
_INTERPRETER_PREFIXES: Final = ("python", "pypy", "ipython")
_SPECIAL_WORDS: Final = frozenset({"{}", ";", "+", "\\;", "--", "-", "{", "}"})

# Code that writes: files opened for writing (a mode with w, a, x or +, given second to
# open() or as mode=, or first to a path's .open()), pathlib writes, removals, subprocesses,
# editing helpers. A mode is looked for where open() takes one: a path holding an "a"
# ("base.py") is none. Each pattern starts with one literal, which the engine finds at
# memchr speed; their alternation would try every position.
_OPEN_ARG: Final = r"""(?:[^,()'"\n]|'[^'\n]*'|"[^"\n]*"|\([^()\n]*\))+"""
_WRITE_MODE: Final = r"""['"][rbt]*[wax+][rwaxbt+]*['"]"""
_OPENS_TO_WRITE: Final = re.compile(
    rf"""open\(\s*{_OPEN_ARG},\s*(?:mode\s*=\s*)?{_WRITE_MODE}"""
    rf"""|open\((?:[^()]|\([^()]*\))*?\bmode\s*=\s*{_WRITE_MODE}"""
    rf"""|(?<=\.)open\(\s*(?:mode\s*=\s*)?{_WRITE_MODE}"""
)
_METHODS_THAT_WRITE: Final = re.compile(
    r"\.(?:write_(?:text|bytes)|unlink|mkdir|rename|touch|to_csv|savefig)\("
)
_OS_CALLS_THAT_WRITE: Final = re.compile(
    r"os\.(?:remove|unlink|rename|replace|makedirs|mkdir|rmdir|system)\("
)
# OpenHands' IPython editing helpers (its agent skills), and Node's fs writes.
_HELPERS_THAT_WRITE: Final = re.compile(
    r"""(?:create|append)_file\(|edit_file_by_replace\(|insert_content_at_line\("""
    r"""|fs\.(?:writeFile|appendFile|unlink|rm|mkdir|rename|copyFile)(?:Sync)?\("""
)


def _code_writes(code: str) -> bool:
    """Whether ``code`` visibly writes files or runs processes."""
    if "open(" in code and _OPENS_TO_WRITE.search(code) is not None:
        return True
    if _METHODS_THAT_WRITE.search(code) is not None:
        return True
    if "os." in code and _OS_CALLS_THAT_WRITE.search(code) is not None:
        return True
    if "shutil." in code or "subprocess." in code or "json.dump(" in code:
        return True
    if "_file" in code or "insert_content_at_line(" in code or "fs." in code:
        return _HELPERS_THAT_WRITE.search(code) is not None
    return False


_FAILURE: Final = re.compile(
    r"^\s*(?:<returncode>[1-9]\d*</returncode>|error\b|fatal\b|usage:)|command not found|"
    r"no such file or directory|permission denied|cannot (?:open|create|stat|remove|move)|"
    r"not permitted|no replacement was performed|did not appear verbatim|traceback \(most "
    r"recent call last\)|hunks? failed|is not unique|exit (?:code|status):? [1-9]|"
    r"exited with (?:code|status) [1-9]|\"exit_code\": ?[1-9]|<tool_use_error>|string to "
    r"replace not found|found \d+ matches of the string to replace|failed to find expected "
    r"lines|failed to find context"
)
"""Matched against the lower-cased output: a case-insensitive search of these alternatives
costs five times as much."""
_FAILURE_START: Final = re.compile(
    r"\s*(?:<returncode>[1-9]\d*</returncode>|error\b|fatal\b|usage:)"
)
"""The alternatives of _FAILURE at the start of the output."""
_FAILURE_WORDS: Final = (
    "command not found",
    "no such file or directory",
    "permission denied",
    "cannot ",
    "not permitted",
    "no replacement was performed",
    "did not appear verbatim",
    "traceback (most recent call last)",
    "hunk",
    "is not unique",
    "exit ",
    "exited ",
    '"exit_code"',
    "<tool_use_error>",
    "string to replace",
    "failed to find",
)
"""Text each of the other alternatives of _FAILURE holds: output with none of them (and
no failure at its start) did not fail, told by substring searches alone."""
_FAILURE_SCAN: Final = 2_000


ToolRole = Literal["command", "code", "editor"]


class CommandInfo(NamedTuple):
    """What one command line does, and what a write acts on.

    ``effect``: ``read``, ``run`` or ``write``. ``programs``: the programs of its simple
    commands, in order (wrappers and prefixes removed). ``target``: what a ``write`` acts
    on, order-free: its programs, the operands that are not options, the files it writes
    into and its heredoc bodies (``sed -i`` with another script is another target,
    ``rm -f X`` and ``rm -rf X`` are one); empty for other effects.
    """

    effect: CommandEffect
    programs: tuple[str, ...]
    target: frozenset[str]
    key: str
    """The command in a canonical spelling: its tokens (whitespace and quoting do not
    matter) and heredoc bodies."""
    key_hash: int
    """:func:`~loopobs.contract.hashing.text_key` of ``key``."""
    target_hash: int | None
    """:func:`~loopobs.contract.hashing.text_key` of a write's ``target`` (its sorted
    words); ``None`` for other effects."""


def _cut_heredocs(command: str) -> tuple[str, list[str]]:
    """The command without its heredoc bodies (each replaced by a marker word), and the
    bodies.

    A body is the lines after its command's line up to the first that is its word
    (surrounding whitespace aside: ``<<-``'s tabs too), or the rest of the text.
    """
    if "<<" not in command:
        return command, []
    out: list[str] = []
    bodies: list[str] = []
    pos, end = 0, len(command)
    while pos <= end:  # each line, as command.split("\n") has them
        stop = command.find("\n", pos)
        if stop < 0:
            stop = end
        line = command[pos:stop]
        pos = stop + 1
        if "<<" not in line:
            out.append(line)  # most lines of a command with a heredoc: no scan needed
            continue
        rebuilt = ""
        done = 0  # how much of the line is in rebuilt
        for m in _HEREDOC.finditer(line):
            rebuilt += line[done : m.start()]
            done = m.end()
            if "'" in command or '"' in command or "#" in command:
                before = "\n".join(out) + "\n" + rebuilt if out else rebuilt
                if _quoted_or_commented(before):
                    # Inside quotes (bash -lc "cat > f <<'EOF' …"): no heredoc of this
                    # line's; a shell's script is cut on its own when it is parsed. In a
                    # comment ("# then cat <<EOF"): no heredoc at all.
                    rebuilt += m.group()
                    continue
            body, pos = _heredoc_body(command, pos, m.group(3))
            # Each body becomes an input word, like a herestring's: "<<< __heredoc0__".
            rebuilt += f"<<< __heredoc{len(bodies)}__"
            bodies.append(body)
        out.append(rebuilt + line[done:])
    return "\n".join(out), bodies


# A word (its plain characters, quoted parts and escapes), a comment (a "#" that starts a
# word, to the end of its line), or a quote that nothing closes: shlex's rules, and the
# shell's for comments. A "#" inside a word (a#b, ${#x}, "\ #") is part of the word.
_QUOTED: Final = r"""'[^']*'|"[^"\\]*(?:\\.[^"\\]*)*"|\\."""
_QUOTING: Final = re.compile(
    rf"""(?:[^ \t\r\n;&|()<>'"\\#]|{_QUOTED})(?:[^ \t\r\n;&|()<>'"\\]|{_QUOTED})*+"""
    r"""|#[^\n]*|['"]""",
    re.DOTALL,
)


def _quoted_or_commented(text: str) -> bool:
    """Whether ``text`` ends inside quotes (one of its quotes is never closed) or inside a
    comment (its last line has one)."""
    last = None
    for m in _QUOTING.finditer(text):
        part = m.group()
        if part in ("'", '"'):
            return True
        last = m
    return last is not None and last.group()[0] == "#" and last.end() == len(text)


def _drop_comment(m: re.Match[str]) -> str:
    part = m.group()
    return "" if part[0] == "#" else part


def strip_comments(command: str) -> str:
    """``command`` without its comments, as the shell reads it: a ``#`` that starts a word
    outside quotes (at a line's start, after whitespace or an operator) starts one, to the
    end of its line (the newline stays). Agents comment the lines of their scripts
    (``# Let's fix the parser`` above a ``sed -i``), and a comment's apostrophe is no
    quote: read as one, it made the whole line unparseable."""
    return _QUOTING.sub(_drop_comment, command)


def _heredoc_body(command: str, pos: int, word: str) -> tuple[str, int]:
    """The body of a heredoc whose lines start at ``pos``, and where the line after its end
    starts (past the text's end when none is left).

    The end is the first line that is ``word`` once stripped, found by searching for the
    word rather than looking at each line (a body has dozens).
    """
    end = len(command)
    if pos > end:
        return "", pos  # the heredoc's line was the last: an empty body
    at = command.find(word, pos)
    while at >= 0:
        before = command.rfind("\n", pos, at)
        start = pos if before < 0 else before + 1
        stop = command.find("\n", at)
        if stop < 0:
            stop = end
        if command[start:stop].strip() == word:
            return command[pos : start - 1] if start > pos else "", stop + 1
        at = command.find(word, stop)
    return command[pos:], end + 1


def shlex_tokens(command: str) -> list[str] | None:
    """The tokens :mod:`shlex` makes of ``command`` (POSIX rules, whitespace split, the
    shell's operator characters as punctuation, no comments); ``None`` where it raises
    (an unclosed quote, a trailing backslash). :func:`tokens` follows its rules but one:
    shlex keeps a run of operator characters whole (and, unquoted, cannot tell ``'()'``
    from ``()``)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


# shlex's rules in one pattern: a word is a run of unquoted characters, '…' (literal),
# "…" (a backslash escapes only " and \) and \x (escaped). Operators are the shell's,
# longest first: shlex keeps a run of punctuation characters whole, so ";" and a newline,
# a blank line or ");" were one unknown word. Whitespace before a token is part of its
# match (one match per token); the last alternative catches what shlex refuses. One group
# for all three, so findall hands back the tokens themselves: a refused character is a
# lone quote or backslash, a token that neither a word (two characters at least) nor an
# operator can be.
_SHELL_OPERATORS: Final = (
    *("&>>", "<<<", ";;", "&&", "||", "|&", ">>", "&>", ">|", ">&", "<>", "<&", "<<"),
    *(";", "&", "|", "(", ")", "<", ">", "\n"),
)
_OPERATOR_TOKEN: Final = "|".join(re.escape(op) for op in _SHELL_OPERATORS if len(op) > 1) + (
    r"|[;&|()<>\n]"  # one class for the one-character operators: a single test
)
_QUOTED_OPERATORS: Final[dict[str, str]] = {
    **{f"{q}{op}{q}": "\\" + op for op in _SHELL_OPERATORS for q in "'\""},
    **{"\\" + op: "\\" + op for op in _SHELL_OPERATORS if len(op) == 1},
}
"""A word that is one operator quoted or escaped (``';'``, ``"|"``, ``\\;``), as
:data:`_TOKEN` finds it, and the token it is: the operator behind a backslash, a word
that no operator or redirection is (``grep -c ';' f`` greps for a semicolon)."""
_TOKEN: Final = re.compile(
    r"""[ \t\r]*+((?:[^ \t\r'"\\;&|()<>\n]++|'[^']*+'|"[^"\\]*+(?:\\.[^"\\]*+)*+"|\\.)++"""
    rf"""|{_OPERATOR_TOKEN}|[^ \t\r])""",
    re.DOTALL,
)
# Words of letters, digits and punctuation that shlex gives no meaning (no quote,
# backslash, operator or brace) between spaces only (no tab, newline or other whitespace):
# the most common agent command line ("ls -la src", "python x.py", "cat a.py"). Possessive:
# a line that is not one fails at its first other character, with no backtracking.
_SIMPLE_LINE: Final = re.compile(r"[\w ./:=,+%@~^*?!$#\[\]-]*+", re.ASCII)
_PLAIN: Final = re.compile(rf"[^ \t\r;&|()<>\n]+|{_OPERATOR_TOKEN}")
_REFUSED: Final = frozenset({"'", '"', "\\"})
"""The tokens _TOKEN makes of what shlex refuses: a lone quote or backslash."""
_PART: Final = re.compile(r"""'([^']*)'|"([^"\\]*(?:\\.[^"\\]*)*)"|\\(.)""", re.DOTALL)
_DQ_ESCAPE: Final = re.compile(r'\\(["\\])')


def _unquote(m: re.Match[str]) -> str:
    single, double, escaped = m.groups()
    if single is not None:
        return single
    if double is not None:
        return _DQ_ESCAPE.sub(r"\1", double) if "\\" in double else double
    return escaped


def _unquoted(word: str) -> str:
    """A word (a token _TOKEN found) with its quotes and escapes removed."""
    if word[0] == "'" and word[-1] == "'" and word.count("'") == 2:
        return word[1:-1]  # one single-quoted part (a sed script): its text is literal
    if "\\" not in word:
        if '"' not in word:
            return word.replace("'", "")  # see _lexed: each quote is a delimiter
        if "'" not in word:
            return word.replace('"', "")
    elif "'" not in word and '"' not in word and "\\\\" not in word:
        # Escapes only, and no escaped backslash: each backslash goes, the character
        # after it stays ("\;", a line continuation's newline).
        return word.replace("\\", "")
    return _PART.sub(_unquote, word)


def tokens(command: str) -> list[str] | None:
    """:func:`shlex_tokens`, done by regular expressions: shlex reads a character at a
    time in Python (about 40 µs for a typical agent command), this costs a few. The
    tokens of :func:`_lexed`, the parse every judgement starts from. Unlike shlex's, an
    unquoted run of operator characters is read as the shell's operators, longest first
    (``;`` and a newline, a blank line, ``);``; ``2>&1``'s ``>&``)."""
    lexed = _lexed(command)
    return None if lexed is None else lexed[0]


def _lexed(command: str) -> tuple[list[str], str] | None:
    """:func:`tokens` of ``command`` and their canonical join (``"\\x1f".join``, the start
    of a command line's key); ``None`` where :func:`tokens` is ``None``.

    A line quoted with one kind of quote and no backslash (most quoted agent lines) is
    unquoted on the join, in one ``str.replace``, and split again: a token holds no
    separator when the line holds none.
    """
    # Three substring tests cost half a pattern's search, and they are needed below.
    single = "'" in command
    double = '"' in command
    backslash = "\\" in command
    if not single and not double and not backslash:
        split = (
            command.split()
            if _SIMPLE_LINE.fullmatch(command) is not None
            else _PLAIN.findall(command)
        )
        return split, "\x1f".join(split)
    text = command
    if command[-1] in " \t\r":
        # Trailing whitespace would make a failed attempt at each of its characters; one
        # is kept after a backslash, which may escape it.
        text = command.rstrip(" \t\r")
        if text.endswith("\\"):
            text = command[: len(text) + 1]
    found = _TOKEN.findall(text)
    if not _REFUSED.isdisjoint(found):
        return None
    if single != double and not backslash and "\x1f" not in text:
        # One kind of quote and no backslash: a token is plain runs and complete quoted
        # parts, so no quote character is inside a part and each one is a delimiter,
        # dropped from all the tokens at once (one token per found one: no separator).
        joined = "\x1f".join(found).replace("'" if single else '"', "")
        split = joined.split("\x1f")
        key: str | None = joined
    else:
        split = [_unquoted(t) if "'" in t or '"' in t or "\\" in t else t for t in found]
        key = None
    if not _QUOTED_OPERATORS.keys().isdisjoint(found):
        # An operator quoted or escaped alone: the word _QUOTED_OPERATORS makes of it.
        split = [_QUOTED_OPERATORS.get(raw, t) for raw, t in zip(found, split, strict=True)]
        key = None
    return split, "\x1f".join(split) if key is None else key


_OPERATOR: Final = 1
_TO_FILE: Final = 2
_FROM_FILE: Final = 3
_TOKEN_KINDS: Final[dict[str, int]] = {
    **dict.fromkeys(_OPERATORS, _OPERATOR),
    **dict.fromkeys(_REDIRECT_OUT, _TO_FILE),
    **dict.fromkeys((*_REDIRECT_IN, "<<"), _FROM_FILE),
}


def _simple_commands(tokens: list[str]) -> list[tuple[list[str], list[str]]]:
    """Each simple command: its words, and the files it writes by redirection."""
    if _TOKEN_KINDS.keys().isdisjoint(tokens):
        return [(tokens, [])]  # no operator, no redirection (most lines): one command
    commands: list[tuple[list[str], list[str]]] = []
    words: list[str] = []
    written: list[str] = []
    kind_of = _TOKEN_KINDS.get
    rest = iter(tokens)
    for tok in rest:
        kind = kind_of(tok)
        if kind is None:
            words.append(tok)
        elif kind == _OPERATOR:
            if words or written:
                commands.append((words, written))
                words, written = [], []
        else:
            # A file descriptor before it ("2>") stays a word: the tokens cannot tell
            # "echo 2 > f" from "echo 2>f", and a digit more changes no judgement.
            target = next(rest, "")
            if (
                kind == _TO_FILE
                and target
                and target not in _NULL_TARGETS
                and (target != "-" and not target.isdecimal())
            ):
                written.append(target)
    if words or written:
        commands.append((words, written))
    return commands


_PREFIX_WORDS: Final = _KEYWORDS | _WRAPPERS


def _strip_prefixes(words: list[str]) -> list[str]:
    """The words from the program on: assignments, keywords and wrappers removed."""
    if words:
        first = words[0]
        if first not in _PREFIX_WORDS and "=" not in first and not first.isdigit():
            return words  # the common case: the program comes first
    i, n = 0, len(words)
    while i < n:
        w = words[i]
        if w == "command" and i + 1 < n and words[i + 1][:1] == "-":
            if words[i + 1] in ("-v", "-V"):
                return words[i:]  # command -v x: where x is, a lookup (_PLAIN_EFFECTS)
            i += 2  # command -p x: x, run with the default PATH
            continue
        if w in _KEYWORDS or _ASSIGNMENT.match(w) or w.isdigit():
            i += 1  # a leading number is a file descriptor left by a split: "\; 2>"
            continue
        if w in _WRAPPERS:
            wrapper = w
            i += 1
            while i < n and (words[i].startswith("-") or _ASSIGNMENT.match(words[i])):
                opt = words[i]
                i += 1
                if opt in _WRAPPER_VALUE_OPTS and i < n:
                    i += 1
            if wrapper in ("timeout", "gtimeout") and i < n:
                i += 1  # the duration
            elif wrapper == "nice" and i < n and words[i].lstrip("-").isdigit():
                i += 1
            continue
        break
    return words[i:]


def _program(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word and not word.endswith("/") else word


def _git(words: list[str]) -> CommandEffect:
    i = 1
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] in ("-C", "-c") else 1
    if i >= len(words):
        return "read"
    sub = words[i]
    rest = words[i + 1 :]
    if sub in _GIT_READS:
        return "read"
    if sub in _GIT_LISTS:
        if sub == "stash":  # bare, it pushes; its list and show read
            return "read" if rest and rest[0] in ("list", "show") else "write"
        if sub == "config":  # one name, or a --get/--list form, reads; a name and value set
            named = [w for w in rest if not w.startswith("-")]
            if named and named[0] in ("get", "list", "set", "unset"):  # git 2.46's verbs
                return "read" if named[0] in ("get", "list") else "write"
            if not _GIT_CONFIG_WRITES.isdisjoint(rest):
                return "write"
            return "read" if len(named) <= 1 or not _GIT_CONFIG_READS.isdisjoint(rest) else "write"
        if sub in ("branch", "tag") and not _GIT_LISTING.isdisjoint(rest):
            return "read"  # a listing, with patterns: git tag -l 'v1.*'
        if rest and rest[0] in ("show", "get-url", "list"):
            return "read"  # git remote show origin, git worktree list
        if all(w in _GIT_LIST_WORDS or w.startswith(("--format", "--sort")) for w in rest):
            return "read"
        return "write"
    return "write"


def _short_option(args: list[str], letter: str) -> bool:
    """Whether one of ``args`` is a short option (or a cluster of them) holding ``letter``:
    ``-i``, ``-i.bak``, ``-ni``."""
    for a in args:  # noqa: SIM110 (a loop, not any(): no generator made per command)
        if a[:1] == "-" and a[1:2] != "-" and letter in a:
            return True
    return False


def _sed_in_place(args: list[str]) -> bool:
    """Whether ``sed``'s ``args`` edit in place: a short option (or a cluster of them)
    holding ``i`` (``-i``, ``-i.bak``, ``-ni``), ``--in-place`` or ``--in-place=SUFFIX``.
    One loop over the arguments: sed is a third of agents' programs."""
    for a in args:
        if a[:1] != "-":
            continue
        if a[1:2] != "-":
            if "i" in a:
                return True
        elif a == "--in-place" or a.startswith("--in-place="):
            return True
    return False


def _judge(words: list[str], bodies: list[str], depth: int = 0) -> tuple[str, CommandEffect]:
    """(program, effect) of one simple command (prefixes already stripped); ``depth``: how
    many shells' ``-c`` scripts it is inside."""
    program = words[0]
    if "/" in program and program[-1] != "/":
        program = program.rsplit("/", 1)[-1]  # _program, inline: once per simple command
    plain = _PLAIN_EFFECTS.get(program)
    if plain is not None:
        return program, plain  # the common case: a program whose options do not matter
    if program == "sed":  # a third of agents' programs
        return program, "write" if _sed_in_place(words[1:]) else "read"
    args = words[1:]
    if program not in _SPECIAL:
        if program in _INSTALLERS:
            verbs = (a for a in args if not a.startswith("-"))
            verb = next(verbs, "")
            if verb == "pip":
                verb = next(verbs, "")  # uv pip install
            if verb == "fmt" and program in ("cargo", "go"):  # cargo fmt, go fmt: gofmt -w
                return program, "read" if "--check" in args else "write"
            return program, "write" if verb in _INSTALL_VERBS else "run"
        if program.startswith(_INTERPRETER_PREFIXES) and _INTERPRETERS.fullmatch(program):
            return program, _interpreted(args, bodies)
        return program, "run"
    if program in _FORMATTING:
        return program, _formatted(program, args)
    if program == "perl":
        return program, "write" if _short_option(args, "i") else "run"
    if program in ("awk", "gawk"):
        return program, "write" if "inplace" in args else "read"
    if program == "find":
        if "-delete" in args:
            return program, "write"
        for j, a in enumerate(args):
            if a in ("-exec", "-execdir", "-ok", "-okdir") and j + 1 < len(args):
                sub = _strip_prefixes(args[j + 1 :])
                if sub and _judge(sub, bodies, depth)[1] == "write":
                    return program, "write"
        return program, "read"
    if program == "sort":  # writes with -o FILE (sort -o f f sorts f in place)
        return program, "write" if _short_option(args, "o") or any(
            a.startswith("--output") for a in args
        ) else "read"
    if program == "tee":
        files = [a for a in args if not a.startswith("-") and a not in _NULL_TARGETS]
        return program, "write" if files else "read"
    if program == "git":
        return program, _git(words)
    if program in _SHELLS:
        return program, _shell_run(args, bodies, depth)
    if program == "tar":
        mode = next((a for a in args if not a.startswith("--")), "")
        return program, "write" if (
            "x" in mode or "c" in mode or "r" in mode or "u" in mode
        ) else "read"
    # unzip, gunzip, gzip, bunzip2, xz, zip, 7z
    return program, "read" if "-l" in args or "-t" in args else "write"


def _shell_run(args: list[str], bodies: list[str], depth: int) -> CommandEffect:
    """The effect of a shell (``bash``, ``sh`` …) run with ``args``: of its ``-c`` script,
    parsed as a line of its own (``bash -lc "sed -i … f.py"`` is the edit it wraps, as
    Codex-style agents send every command), at most :data:`_MAX_SHELL_DEPTH` shells deep;
    a script file, standard input or a script that cannot be parsed is ``run``."""
    parsed = _shell_parsed(args, depth)
    return "run" if parsed is None else parsed[0]


def _shell_parsed(
    args: list[str], depth: int
) -> tuple[CommandEffect, frozenset[str] | None, str] | None:
    """:func:`_parse` of a shell's ``-c`` script (``args``: the shell's arguments), ``None``
    when there is none to parse."""
    script = _shell_script(args)
    if script is None or depth >= _MAX_SHELL_DEPTH:
        return None
    return _parse(script, None, depth + 1)


def _write_target(program: str, words: list[str], depth: int) -> list[str]:
    """The words of a write's target for one simple command: its program and operands; a
    shell's ``-c`` script's own target, so that ``bash -lc "rm -f X"`` and ``rm -f X`` are
    one write."""
    if program in _SHELLS:
        parsed = _shell_parsed(words[1:], depth)
        if parsed is not None and parsed[1] is not None:
            return list(parsed[1])
    target = _operands(words)
    target.append(program)
    return target


def _shell_script(args: list[str]) -> str | None:
    """The script of a shell's arguments (the first operand after a short-option cluster
    holding ``c``: ``-c``, ``-lc``, ``-ec`` …), ``None`` when it reads a file or its
    standard input."""
    command = False
    i, n = 0, len(args)
    while i < n:
        a = args[i]
        i += 1
        if a == "--":
            break
        if len(a) > 1 and a[0] in "-+":
            if a[1] == "-":
                continue  # --login, --norc
            if a[1:] == "o" or a[1:] == "O":
                i += 1  # -o pipefail: the option's value
            elif "c" in a[1:]:
                command = True
            continue
        return a if command else None
    return args[i] if command and i < n else None


_SHELLS: Final = frozenset({"bash", "sh", "zsh", "dash", "ksh"})
_MAX_SHELL_DEPTH: Final = 3
"""Shells inside shells' ``-c`` scripts judged (``bash -c "sh -c '…'"``); deeper is ``run``."""


def _interpreted(args: list[str], bodies: list[str]) -> CommandEffect:
    """The effect of a Python interpreter run with ``args`` (heredoc ``bodies`` as input)."""
    if len(args) >= 2 and args[0] == "-m" and args[1] in _FORMATTING:
        return _formatted(args[1], args[2:])  # python -m black f.py
    if len(args) >= 2 and args[0] == "-m" and args[1] in ("pip", "ensurepip"):
        verb = next((a for a in args[2:] if not a.startswith("-")), "")
        return "write" if verb in _INSTALL_VERBS else "run"
    if "-c" in args:
        j = args.index("-c")
        code = args[j + 1] if j + 1 < len(args) else ""
        return "write" if _code_writes(code) else "run"
    if (not args or args[0] == "-") and bodies:
        return "write" if any(_code_writes(b) for b in bodies) else "run"
    if args and _RUNNERS_READ_ONLY_FLAGS.issuperset(args):
        return "read"
    return "run"


_FORMATTERS: Final[dict[str, tuple[CommandEffect, frozenset[str], CommandEffect]]] = {
    # program: its effect, the options that change it, and the effect with one of them.
    # Some rewrite their files unless told to check; others print unless told to write.
    "black": ("write", frozenset({"--check", "--diff"}), "read"),
    "isort": ("write", frozenset({"--check", "--check-only", "-c", "--diff"}), "read"),
    "rustfmt": ("write", frozenset({"--check"}), "read"),
    "autopep8": ("read", frozenset({"-i", "--in-place"}), "write"),
    "yapf": ("read", frozenset({"-i", "--in-place"}), "write"),
    "autoflake": ("read", frozenset({"-i", "--in-place"}), "write"),
    "docformatter": ("read", frozenset({"-i", "--in-place"}), "write"),
    "clang-format": ("read", frozenset({"-i"}), "write"),
    "prettier": ("read", frozenset({"--write", "-w"}), "write"),
    "gofmt": ("read", frozenset({"-w"}), "write"),
    "shfmt": ("read", frozenset({"-w", "--write"}), "write"),
    "eslint": ("run", frozenset({"--fix"}), "write"),
}


_FORMATTING: Final = frozenset({*_FORMATTERS, "ruff"})
"""The formatters and fixers :func:`_formatted` judges."""


def _formatted(program: str, args: list[str]) -> CommandEffect:
    """The effect of a formatter or fixer (:data:`_FORMATTERS`, ``ruff``) run with
    ``args``: ``black f.py`` rewrites f.py, ``black --check f.py`` reads it."""
    if program == "ruff":
        checking = "--check" in args or "--diff" in args
        if args and args[0] == "format":
            return "read" if checking else "write"
        return "write" if "--fix" in args and not checking else "run"  # ruff check: a linter
    effect, options, changed = _FORMATTERS[program]
    return effect if options.isdisjoint(args) else changed


_SPECIAL: Final = frozenset(
    {
        "sed",
        "perl",
        "awk",
        "gawk",
        "find",
        "tee",
        "sort",
        "git",
        "tar",
        "unzip",
        "gunzip",
        "gzip",
        "bunzip2",
        "xz",
        "zip",
        "7z",
        *_FORMATTING,
        *_SHELLS,
    }
)
_READ: Final[CommandEffect] = "read"
_WRITE: Final[CommandEffect] = "write"
_PLAIN_EFFECTS: Final[dict[str, CommandEffect]] = {
    **dict.fromkeys(_READERS - _SPECIAL, _READ),
    **dict.fromkeys(_WRITERS - _SPECIAL, _WRITE),
    **dict.fromkeys(_NEUTRAL, _READ),
    "command": _READ,  # only ever the program in command -v x (see _strip_prefixes)
}


_REMEMBERED: Final = 1024
_REMEMBERED_CHARS: Final = 2048
"""Command lines up to this long are remembered, the latest 1,024 of them process-wide:
agents re-run their commands, and many runs share them (``ls``, ``git diff``, ``pytest``)."""
_REMEMBERED_LONG: Final = 32
"""Longer lines are remembered apart, the latest 32 of them, each by its first
``_MAX_CHARS`` characters (all that is parsed): a heredoc that writes a file is re-run as
it is, and it costs tens of µs to parse. The memory stays bounded: per cache, 32 lines of
at most 20,000 characters, and their judgements (a key as long, and a write's target)."""


def classify_command(command: str) -> CommandInfo | None:
    """What ``command`` (a shell command line) does; ``None`` if it cannot be parsed.

    Never raises: any string is either judged or ``None``. The answer depends on the
    text alone, so it is remembered (bounded caches shared by every caller: at most
    1,024 lines of up to 2,048 characters, and 32 longer ones).
    """
    if len(command) <= _REMEMBERED_CHARS:
        return _classify_remembered(command)
    return _classify_long(command[:_MAX_CHARS])


# What the shell reads in a command line for line continuations: single-quoted text (kept
# as it is), double-quoted text (a backslash-newline inside is removed), an escape.
_CONTINUATION: Final = re.compile(_QUOTED, re.DOTALL)
_ESCAPE: Final = re.compile(r"\\.", re.DOTALL)


def _drop_continuation(m: re.Match[str]) -> str:
    return "" if m.group() == "\\\n" else m.group()


def _join_in(m: re.Match[str]) -> str:
    part = m.group()
    if part == "\\\n":
        return ""
    if part[0] == '"' and "\\\n" in part:
        return _ESCAPE.sub(_drop_continuation, part)
    return part


def join_continuations(command: str) -> str:
    """``command`` with its line continuations (a backslash before a newline, outside
    single quotes) removed, as the shell removes them before it splits words: ``a && \\``
    then ``sed -i …`` on the next line is ``a && sed -i …``. (shlex keeps the newline
    inside the next word.)"""
    if '"' not in command and "\\\\" not in command and "\\'" not in command:
        # No escaped backslash or quote: each backslash escapes the character after it,
        # and the quotes pair up in order, so the text between the pairs (and after an
        # unclosed one) is what the shell joins. str methods, not a call back per match.
        if "'" not in command:
            return command.replace("\\\n", "")
        parts = command.split("'")
        for i in range(0, len(parts), 2):
            parts[i] = parts[i].replace("\\\n", "")
        if len(parts) % 2 == 0:
            parts[-1] = parts[-1].replace("\\\n", "")
        return "'".join(parts)
    return _CONTINUATION.sub(_join_in, command)


_NO_BODIES: Final[list[str]] = []  # never changed
_KIND_TOKENS: Final = frozenset(_TOKEN_KINDS)
"""The operators and redirections: a line with none of them is one simple command."""


def _classify(command: str) -> CommandInfo | None:
    """:func:`classify_command`, parsed anew."""
    programs: list[str] = []
    parsed = _parse(command, programs)
    if parsed is None:
        return None
    effect, target, key = parsed
    # The keys are computed once per line here, where the judgement is remembered, not
    # once per call. (_make: the named tuple built without its keyword-taking __new__.)
    if target is None:
        return CommandInfo._make((effect, tuple(programs), _NO_TARGET, key, text_key(key), None))
    return CommandInfo._make(
        (
            effect,
            tuple(programs),
            target,
            key,
            text_key(key),
            text_key("\x1f".join(sorted(target))),
        )
    )


def _parse(
    command: str, programs: list[str] | None, depth: int = 0
) -> tuple[CommandEffect, frozenset[str] | None, str] | None:
    """The effect of the command line ``command``, a write's target (``None`` for other
    effects) and the line's key, as :class:`CommandInfo` has them; ``None`` if it cannot
    be parsed, or has no program and writes into no file. Each simple command's program
    is appended to ``programs`` when it is given; ``depth``: as :func:`_judge`'s.

    A line of one simple command without a redirection (most lines) is judged with the
    fewest steps; a line of several is cut into its simple commands first.
    """
    if len(command) > _MAX_CHARS:
        command = command[:_MAX_CHARS]
    bodies = _NO_BODIES
    if "<<" in command:
        command, bodies = _cut_heredocs(command)
    if "#" in command:
        command = strip_comments(command)
    if "\\\n" in command:
        command = join_continuations(command)
    lexed = _lexed(command)
    if lexed is None:
        return None
    split, key = lexed
    if bodies:
        key += "\x1e" + "\x1e".join(bodies)
    one = _KIND_TOKENS.isdisjoint(split)
    if one:
        if not split:
            return None
        first = split[0]
        words = (
            _strip_prefixes(split)
            if first in _PREFIX_WORDS or "=" in first or first.isdigit()
            else split
        )
        if not words:
            return None
        program, effect = _judge(words, bodies, depth)
        if programs is not None:
            programs.append(program)
        if effect != "write":
            return effect, None, key
        target = _write_target(program, words, depth)
    else:
        strongest, written = _judge_parts(_simple_commands(split), bodies, programs, depth)
        if strongest is None:
            return None  # only operators, or redirections of nothing
        if written is None:
            return strongest, None, key
        effect, target = strongest, written
    if bodies:
        target.extend([f"<<{text_key(b)}" for b in bodies])
    return effect, frozenset(target), key


def _judge_parts(
    parts: list[tuple[list[str], list[str]]],
    bodies: list[str],
    programs: list[str] | None,
    depth: int = 0,
) -> tuple[CommandEffect | None, list[str] | None]:
    """The strongest effect of the simple commands ``parts`` (their words, the files they
    write into), and the words of a write's target but its heredoc bodies, repeats and all
    (``None`` for other effects); ``(None, None)`` when none has a program or writes into
    a file. Each program is appended to ``programs`` when it is given."""
    effect: CommandEffect | None = None
    target: list[str] | None = None
    for simple, written in parts:
        words = simple
        if words:
            first = words[0]
            if first in _PREFIX_WORDS or "=" in first or first.isdigit():
                words = _strip_prefixes(words)
        if words:
            program, judged = _judge(words, bodies, depth)
            if programs is not None:
                programs.append(program)
            if written:
                judged = "write"  # into a file: what is written is part of the target
        elif written:
            judged = "write"
        else:
            continue
        if judged == "read":
            if effect is None:
                effect = "read"
            continue
        if judged == "run":
            if effect != "write":
                effect = "run"
            continue
        effect = "write"
        if target is None:
            target = written[:]
        else:
            target.extend(written)
        if words:
            target.extend(_write_target(program, words, depth))
    return effect, target


def _operands(words: list[str]) -> list[str]:
    """A write's words after its program that are part of its target: not options, and
    not the special words of ``find -exec`` and the like."""
    return [
        w for w in words[1:] if w not in _SPECIAL_WORDS and not (w.startswith("-") and len(w) > 1)
    ]


_NO_TARGET: Final[frozenset[str]] = frozenset()


_classify_remembered: Final = lru_cache(maxsize=_REMEMBERED)(_classify)
_classify_long: Final = lru_cache(maxsize=_REMEMBERED_LONG)(_classify)


def clear_cache() -> None:
    """Forget the remembered command lines (a benchmark's first sight of every line)."""
    _classify_remembered.cache_clear()
    _classify_long.cache_clear()
    _shell_remembered.cache_clear()
    _shell_long.cache_clear()


def classify_code(code: str) -> CommandEffect:
    """``write`` if ``code`` (Python run by a code-execution tool) visibly writes files or
    runs processes, else ``run``. Never raises."""
    return "write" if _code_writes(code[:_MAX_CHARS]) else "run"


def failed_output(result: str) -> bool:
    """Whether a command's or an editor's output says it failed (a non-zero
    ``<returncode>``, or exit code as other harnesses print it: "[The command completed
    with exit code 1.]", "Exit code: 1", "exit status 2", ``"exit_code": 1``; ``ERROR:``,
    "No such file or directory", "command not found", "No replacement was performed", an
    editor's refusal as Claude Code ("String to replace not found", ``<tool_use_error>``)
    or Codex's ``apply_patch`` ("Failed to find expected lines") word it …): a failed
    write changed nothing."""
    if not result:
        return False
    text = result[:_FAILURE_SCAN].lower()
    if _FAILURE_START.match(text) is not None:
        return True
    # The pattern tries its alternatives at almost every character; a substring search
    # runs at memchr speed, and most outputs hold none of them.
    return any(word in text for word in _FAILURE_WORDS) and _FAILURE.search(text) is not None


# -- which tools run commands, code or edits ---------------------------------------------------

_COMMAND_NAMES: Final = frozenset(
    {
        "bash",
        "shell",
        "sh",
        "zsh",
        "terminal",
        "console",
        "execute_bash",
        "run_command",
        "exec_command",
        "execute_command",
        "run_shell_command",
        "run_terminal_cmd",
        "shell_exec",
        "run_shell",
        "execute_shell",
        "run_bash",
        "bash_tool",
        "local_shell",
        "container_exec",
        "run_in_terminal",
        "cmd",
    }
)
_COMMAND_WORDS: Final = frozenset({"bash", "shell", "sh", "zsh", "terminal", "console"})
_COMMAND_ARGS: Final = ("command", "cmd")
_CODE_WORDS: Final = frozenset({"python", "ipython", "jupyter", "notebook", "interpreter"})
_CODE_ARGS: Final = ("code", "source", "script")
_EDITOR_WORDS: Final = frozenset(
    {
        "editor",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "edit_file",
        "file_editor",
        "apply_patch",
        "text_editor",
    }
)
_EDITOR_READS: Final = frozenset({"view", "read", "show", "cat", "open", "list"})
_EDITOR_WRITES: Final = frozenset(
    {
        "create",
        "str_replace",
        "insert",
        "undo_edit",
        "write",
        "append",
        "replace",
        "edit",
        "delete",
        "patch",
        "apply",
    }
)
_CODE_NAMES: Final = frozenset(
    {"execute_python", "run_python", "python_exec", "code_interpreter", "execute_code", "run_code"}
)
_NAME_WORDS: Final = re.compile(r"[a-z0-9]+")
_LAST_SEGMENT: Final = re.compile(r"^.*(?:__|[./:])")


def _words(tool: str) -> tuple[str, set[str]]:
    """The tool's own name (an MCP server's prefix dropped: ``mcp__shell__run_command``,
    ``shell.exec``) in lower case, and its words."""
    name = tool.strip().lower()
    first = name.split(" ", 1)[0]
    own = _LAST_SEGMENT.sub("", first) or first
    return own, set(_NAME_WORDS.findall(name))


def command_text(value: Any) -> str | None:
    """A command argument as one command line: a string, or an argv list (``["bash",
    "-lc", "make test"]`` is ``make test``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        if (
            len(value) >= 3
            and _program(value[0]) in ("bash", "sh", "zsh")
            and value[1] in ("-c", "-lc", "-ic", "-cl")
        ):
            return str(value[2])
        return shlex.join(value)
    return None


_RUNNERS: Final = _set(
    "make cmake ninja pytest tox nox node npx deno bun ruby java javac mvn gradle dotnet "
    "rustc gcc g++ clang cc ./configure docker kubectl terraform ansible psql mysql sqlite3 "
    "redis-cli xargs time nohup watch"
)
_FILE_ARGS: Final = frozenset(
    {
        "path",
        "file",
        "file_path",
        "filename",
        "file_text",
        "old_str",
        "new_str",
        "view_range",
        "insert_line",
    }
)
"""Arguments of an editor's call: a ``command`` beside them is the editor's sub-command."""


_OLD_TEXT: Final = ("old_string", "old_str")
_PATHS: Final = ("file_path", "path", "absolute_path", "target_file", "filename")


def _replaces_text(args: dict[Any, Any]) -> bool:
    """Whether ``args`` are a text replacement in a file: an old text and a path, or a
    list of such replacements (``edits``, as Claude Code's ``MultiEdit`` takes them)."""
    if not any(k in args for k in _PATHS):
        return False
    if any(k in args for k in _OLD_TEXT):
        return True
    edits = args.get("edits")
    return (
        type(edits) is list
        and bool(edits)
        and all(isinstance(e, dict) and any(k in e for k in _OLD_TEXT) for e in edits)
    )


def role_by_arguments(args: object) -> ToolRole | None:
    """The role of a tool whose name says nothing of it (``mytool``, some MCP server's
    ``run`` or ``fs``), told by the arguments of one call; ``None`` when they tell none.
    Never raises.

    - ``"editor"``: an editor's sub-command (``view``, ``str_replace``, ``create`` …) in
      ``command``, beside a file argument (``path``, ``file_text``, ``old_str`` …).
    - ``"editor"`` too: a text replacement in a file, as Claude Code's ``Edit`` and Gemini
      CLI's ``replace`` take it (``old_string`` and ``new_string`` beside ``file_path``),
      or a list of them (``edits``, Claude Code's ``MultiEdit``).
    - ``"command"``: a shell command line in ``command`` or ``cmd``, with no file argument
      beside it: a string whose first program (after any assignment or wrapper) is one
      agents run (``cd``, ``ls``, ``sed``, ``git``, ``pytest``, ``bash`` …).
    """
    if not isinstance(args, dict):
        return None
    if "command" not in args and "cmd" not in args:
        return "editor" if _replaces_text(args) else None
    if not _FILE_ARGS.isdisjoint(args):
        sub = args.get("command")
        if isinstance(sub, str) and (sub in _EDITOR_READS or sub in _EDITOR_WRITES):
            return "editor"
        return None
    for name in _COMMAND_ARGS:
        text = command_text(args.get(name))
        if text is not None:
            words = _strip_prefixes(text.split(None, 8))
            if not words:
                return None
            program = _program(words[0])
            known = (
                program in _PLAIN_EFFECTS
                or program in _SPECIAL
                or program in _INSTALLERS
                or program in _RUNNERS
                or (
                    program.startswith(_INTERPRETER_PREFIXES)
                    and _INTERPRETERS.fullmatch(program) is not None
                )
            )
            return "command" if known else None
    return None


class CallEffect(NamedTuple):
    """What one call of a command, code or editor tool does: ``effect``; for a ``write``
    its ``target`` (order-free; ``None``: the arguments are the target); for a command
    line its canonical ``key`` and the argument it came from (``arg``)."""

    effect: CommandEffect
    target: frozenset[str] | None
    key: str | None = None
    arg: str | None = None
    key_hash: int | None = None
    """:func:`~loopobs.contract.hashing.text_key` of ``key``."""
    target_hash: int | None = None
    """:func:`~loopobs.contract.hashing.text_key` of ``target``'s sorted words."""


_ROLES_HELD: Final = 4096


def tool_role(tool: str) -> ToolRole | None:
    """Whether ``tool``, by its name, runs commands (``bash``, ``shell``, ``execute_bash``,
    ``run_command``, ``terminal``, an MCP shell server's tool …), runs code (``python``,
    ``execute_python``) or edits files (``str_replace_editor``, ``apply_patch`` …).
    Remembered process-wide for 4,096 names (the answer depends on the name alone)."""
    return _role_of(tool)


@lru_cache(maxsize=_ROLES_HELD)
def _role_of(tool: str) -> ToolRole | None:
    own, words = _words(tool)
    if own in _EDITOR_WORDS or "editor" in words:
        return "editor"
    if own in _CODE_WORDS or words & _CODE_WORDS or own in _CODE_NAMES:
        return "code"
    if own in _COMMAND_NAMES or words & _COMMAND_WORDS:
        return "command"
    return None


def call_effect(
    tool: str, args: object, command_arg: str | None = None, role: ToolRole | None = None
) -> CallEffect | None:
    """The effect of one call of a command, code or editor tool (``role``, else
    :func:`tool_role`): a command line in a ``command`` or ``cmd`` argument (or the
    declared ``command_arg``) is parsed, a code tool's ``code`` scanned, an editor's
    ``command`` (``view``, ``str_replace``, ``create`` …) read. ``None`` for other tools,
    and when the command cannot be parsed: the caller's rules for the tool apply.
    Never raises.
    """
    if not isinstance(args, dict):
        return None
    if command_arg is not None:
        declared = command_text(args.get(command_arg))
        return _shell(declared, command_arg) if declared is not None else None
    if role is None:
        role = tool_role(tool)
        if role is None:
            return None
    if role == "editor":
        sub = args.get("command")
        if not isinstance(sub, str):
            sub = tool.strip().rsplit(" ", 1)[-1].lower()
        if sub in _EDITOR_READS:
            return CallEffect("read", None)
        if sub in _EDITOR_WRITES or "patch" in tool.lower() or _replaces_text(args):
            return CallEffect("write", None)
        return None
    for name in _COMMAND_ARGS:
        text = command_text(args.get(name))
        if text is not None:
            return _shell(text, name)
    if role == "code":
        for name in _CODE_ARGS:
            source = args.get(name)
            if isinstance(source, str):
                return CallEffect(classify_code(source), None)
    return None


def _shell(text: str, arg: str) -> CallEffect | None:
    """The effect of the command line ``text`` in the argument ``arg``; remembered like
    :func:`classify_command`'s judgements, in a cache of its own (a detector asks once per
    line and session, and a fresh detector finds the effect made)."""
    if len(text) <= _REMEMBERED_CHARS:
        return _shell_remembered(text, arg)
    return _shell_long(text[:_MAX_CHARS], arg)


def command_line_effect(text: str, arg: str = "command") -> CallEffect | None:
    """The effect :func:`call_effect` gives a call whose argument ``arg`` holds the command
    line ``text`` (an equal :class:`CallEffect`, or ``None`` for a line that cannot be
    parsed), judged anew: no process-wide cache is read or filled. For a caller that
    remembers effects itself. Never raises."""
    parsed = _parse(text, None)
    if parsed is None:
        return None
    effect, target, key = parsed
    if target is None:
        return _new_tuple(CallEffect, (effect, None, key, arg, text_key(key), None))
    return _new_tuple(
        CallEffect,
        (
            effect,
            target,
            key,
            arg,
            text_key(key),
            text_key("\x1f".join(sorted(target))),
        ),
    )


_new_tuple: Final = tuple.__new__
"""A named tuple made from a tuple of all its fields: no keyword-taking ``__new__``."""


_shell_remembered: Final = lru_cache(maxsize=_REMEMBERED)(command_line_effect)
_shell_long: Final = lru_cache(maxsize=_REMEMBERED_LONG)(command_line_effect)
