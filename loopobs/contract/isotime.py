"""Reading ``datetime.isoformat()`` text back exactly, UTC offset to the microsecond."""

from __future__ import annotations

import datetime as _dt
import re

__all__ = ["parse_isoformat"]

_OFFSET = re.compile(r"([+-])(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{6}))?)?$")


def parse_isoformat(text: str) -> _dt.datetime:
    """Read what ``datetime.isoformat()`` wrote, UTC offset to the microsecond.

    ``datetime.fromisoformat`` drops the microseconds of an offset (CPython 3.11) and does
    not read a trailing "Z" before 3.11, so the offset is parsed here.
    """
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    match = _OFFSET.search(text) if len(text) > 10 else None
    if match is None:
        return _dt.datetime.fromisoformat(text)
    sign, hours, minutes, seconds, micros = match.groups()
    offset = _dt.timedelta(
        hours=int(hours),
        minutes=int(minutes),
        seconds=int(seconds or 0),
        microseconds=int(micros or 0),
    )
    naive = _dt.datetime.fromisoformat(text[: match.start()])
    return naive.replace(tzinfo=_dt.timezone(-offset if sign == "-" else offset))
