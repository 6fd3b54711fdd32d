"""Redaction of captured content: a hook applied to every text before it is exported.

With content capture on (``TracingObserver(capture_content=...)``), prompts,
answers, tool arguments and tool results go on spans and events. A ``redact``
callable given to the observer receives every text of that content — each
string inside a message, a tool argument or a tool result, never the JSON
around it — and its return value is what is exported. It runs on the hot
path of the events that carry content, and only when content is captured.

:func:`redact_common_secrets` is a ready-made hook (opt-in: nothing is redacted
unless it is passed): API keys and tokens of common services, bearer tokens,
private-key blocks, e-mail addresses and phone numbers become ``[REDACTED:<kind>]``.
It is a safety net, not a guarantee; pass your own callable for your data.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Redactor", "redact_common_secrets", "redact_value"]

Redactor = Callable[[str], str]
"""A redaction hook: content text in, the text to export out."""

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
            re.DOTALL,
        ),
    ),
    ("api_key", re.compile(r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}")),
    ("api_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("api_key", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),
    ("api_key", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b")),
    ("api_key", re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}\b")),
    ("api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")),
    ("bearer", re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*")),
    ("email", re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")),
    # International numbers (+…), and the 3-3-4 national form; never dates or versions.
    (
        "phone",
        re.compile(
            r"(?<![\w+])(?:\+\d{1,3}[\s.-]?(?:\(\d{1,4}\)[\s.-]?)?\d{1,4}(?:[\s.-]?\d{2,4}){2,4}"
            r"|\(\d{3}\)\s?\d{3}[\s.-]\d{4}|\d{3}[\s.-]\d{3}[\s.-]\d{4})(?!\w)"
        ),
    ),
)


def redact_common_secrets(text: str) -> str:
    """``text`` with API keys, tokens, private keys, e-mail addresses and phone numbers replaced.

    Each match becomes ``[REDACTED:<kind>]`` (``api_key``, ``jwt``, ``bearer``,
    ``private_key``, ``email``, ``phone``).
    """
    for kind, pattern in _PATTERNS:
        text = pattern.sub(f"[REDACTED:{kind}]", text)
    return text


def redact_value(value: Any, redact: Redactor) -> Any:
    """``value`` with ``redact`` applied to every string value in it.

    Mappings, lists and tuples are rebuilt (keys are kept: they are the message
    schema's field names or the tool's parameter names); other values are
    returned as they are.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v, redact) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, redact) for v in value]
    return value
