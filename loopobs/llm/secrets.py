"""Keeping credentials out of what the model clients say: error texts, logs, headers.

:func:`redact` masks a secret in the forms text takes when an exception or a server
echoes it (redact before :func:`~loopobs.contract.errors.shorten`, never after: a cut can
split a secret); :func:`check_secret` refuses a key that cannot be sent in an HTTP header before the
HTTP library could quote it in an error.
"""

from __future__ import annotations

__all__ = ["MIN_SECRET_PREFIX", "REDACTED", "check_secret", "redact"]

REDACTED = "***"
"""What :func:`redact` puts where a secret was."""

#: The shortest prefix of a secret that :func:`redact` masks on its own (a cut-off echo).
MIN_SECRET_PREFIX = 8


def _secret_forms(secret: str) -> list[str]:
    """``secret`` as it may appear in text: raw, and as repr, JSON and URL encodings write it."""
    import json
    import urllib.parse

    forms = [secret]
    for form in (
        secret.encode("unicode_escape").decode("ascii"),
        repr(secret)[1:-1],
        repr(secret.encode("utf-8", "backslashreplace"))[2:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret, safe=""),
    ):
        if form not in forms:
            forms.append(form)
    return forms


def redact(text: str, secret: str | None) -> str:
    """``text`` with ``secret`` masked: whole, escaped, and any cut-off prefix of it.

    Every occurrence of the secret is replaced by :data:`REDACTED`, in the
    forms text takes when an exception or a server echoes it (repr and
    ``bytes`` repr escapes, JSON escapes, percent-encoding), and so is every
    run of at least :data:`MIN_SECRET_PREFIX` characters that starts like
    one of those forms (a key cut off by some other component's shortening).
    Redact before shortening: :func:`shorten` after this never reveals more.
    """
    if not secret or not text:
        return text
    spans: list[tuple[int, int]] = []
    for form in _secret_forms(secret):
        if len(form) < MIN_SECRET_PREFIX:
            text = text.replace(form, REDACTED)
            continue
        head = form[:MIN_SECRET_PREFIX]
        at = text.find(head)
        while at >= 0:
            end = at + MIN_SECRET_PREFIX
            limit = min(len(text), at + len(form))
            while end < limit and text[end] == form[end - at]:
                end += 1
            spans.append((at, end))
            at = text.find(head, at + 1)
    if not spans:
        return text
    # Overlapping matches of different forms mask their union.
    out: list[str] = []
    done = 0
    spans.sort()
    start, end = spans[0]
    for s, e in spans[1:]:
        if s <= end:
            end = max(end, e)
            continue
        out += [text[done:start], REDACTED]
        done, (start, end) = end, (s, e)
    out += [text[done:start], REDACTED, text[end:]]
    return "".join(out)


def check_secret(value: str | None, what: str) -> str | None:
    """A credential ready for an HTTP header: surrounding whitespace stripped, ``""`` as None.

    Keys read from files often end in a newline; that is stripped. A key
    that still holds a control character or a non-ASCII character cannot be
    sent in a header, and would otherwise surface in the HTTP library's
    error (and its logs) with the key in it; it is refused here.

    Raises:
        ValueError: naming ``what`` and the position of the first bad character,
            never the value.
    """
    if value is None:
        return None
    cleaned = value.strip()
    for i, ch in enumerate(cleaned):
        if not (" " <= ch <= "~"):
            kind = "a control character" if ch < " " or ch == "\x7f" else "a non-ASCII character"
            raise ValueError(
                f"{what} contains {kind} at position {i} of {len(cleaned)}; "
                "it cannot be sent in an HTTP header (the value is not shown)"
            )
    return cleaned or None
