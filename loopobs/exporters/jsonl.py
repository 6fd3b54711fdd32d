"""The JSONL event log: :class:`JsonlRecorder` writes every event, :func:`replay` re-emits them.

One line per event: ``{"hook": "on_tool_post", "version": 3, "run_id": ..., "time_ns": ...,
<fields>}``. The encoding is stable and documented:

- ``version`` is the event-log format (:data:`LOG_VERSION`); a line without one is
  version 1. Older lines are upgraded when read (fields renamed since are given
  their current names), so every log loopobs wrote replays;
- UUIDs: canonical lowercase hyphenated strings;
- datetimes (``wake_at``): ISO 8601 with offset, as ``datetime.isoformat()`` writes it;
- errors: ``{"type": "<LoopError subclass>", "message": ..., <its fields>}``;
- ``Usage`` and ``DisplayHint``: objects with their field names;
- tool inputs and schemas: the JSON values themselves;
- text is UTF-8, except that a line holding a lone surrogate (half of a UTF-16 pair,
  as a provider's stream can split one) is written ASCII-only with ``\\uXXXX`` escapes,
  so it replays exactly; infinite and NaN floats are ``Infinity`` / ``NaN``.

The event log is the user's own full record: unlike spans and metrics it holds
prompts, answers and tool arguments verbatim. Keep it where you keep transcripts.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from uuid import UUID

from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from loopobs.contract.events import CONTEXT_TYPES, EventContext
from loopobs.contract.observer import EventSink, LoopObserver

__all__ = [
    "LOG_VERSION",
    "JsonlRecorder",
    "ReplayError",
    "ReplayStats",
    "decode_event",
    "encode_event",
    "replay",
]

LOG_VERSION = 3
"""The event-log format this module writes; it reads every version up to this one."""

_RENAMED_FIELDS: Mapping[int, Mapping[str, Mapping[str, str]]] = {
    # version 1 → 2: one name per thing across the contexts
    1: {"on_tool_call_received": {"call_id": "tool_call_id"}},
    # version 2 → 3: new hooks (context providers, session queues and resets) and
    # ToolPostContext.mcp; nothing renamed, so a version-2 line reads as it is
    2: {},
}
"""Per version, the fields renamed in the next one: hook → old name → new name."""


logger = logging.getLogger("loopobs.exporters.jsonl")

_ADAPTERS: dict[str, TypeAdapter[Any]] = {}
_WARN_INTERVAL_S = 60.0


def _adapter(cls: type[EventContext]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(cls.hook)
    if adapter is None:
        adapter = _ADAPTERS[cls.hook] = TypeAdapter(cls)
    return adapter


def encode_event(ctx: EventContext) -> str:
    """One event as its JSONL line (without the newline)."""
    encoder = _ENCODERS.get(ctx.hook)
    if encoder is None:
        encoder = _ENCODERS[ctx.hook] = (_adapter(type(ctx)).dump_json, _head(ctx.hook).encode())
    dump_json, head = encoder
    try:
        raw = dump_json(ctx)
    except PydanticSerializationError:
        raw = _REPLACEMENT  # a lone surrogate in a value: take the exact path below
    if _REPLACEMENT in raw:
        # Lone surrogates cannot be UTF-8: pydantic refuses them in values and silently
        # replaces them with U+FFFD in mapping keys. The stdlib encoder writes ASCII with
        # \uXXXX escapes, exact for them and for a genuine U+FFFD alike.
        return _with_hook(
            ctx,
            json.dumps(
                _adapter(type(ctx)).dump_python(ctx), default=_json_default, separators=(",", ":")
            ),
        )
    # Every context has fields, so the body is never "{}": the head replaces its "{".
    line = (head + raw[1:]).decode()
    return line if line.isascii() else _escape_line_breaks(line)


_ENCODERS: dict[str, tuple[Any, bytes]] = {}
"""Per hook: its adapter's ``dump_json`` and its line's head (``{"hook":...,"version":3,``)."""


def _head(hook: str) -> str:
    return f'{{"hook":"{hook}","version":{LOG_VERSION},'


def _with_hook(ctx: EventContext, body: str) -> str:
    if not body.isascii():
        body = _escape_line_breaks(body)
    return _head(ctx.hook) + body[1:]  # every context has fields: the body is never "{}"


_REPLACEMENT = "\ufffd".encode()

# Characters JSON leaves raw in strings but str.splitlines() (and many JSONL readers) treat
# as line ends; escaped, each event stays on one line for any reader.
_LINE_BREAKS = {"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def _escape_line_breaks(body: str) -> str:
    for raw, escaped in _LINE_BREAKS.items():
        if raw in body:
            body = body.replace(raw, escaped)
    return body


def _json_default(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    raise TypeError(f"cannot encode {type(value).__name__}")


def decode_event(line: str | bytes) -> EventContext:
    """Rebuild the context object of one JSONL line.

    Raises:
        ValueError: the line is not UTF-8 JSON, names an unknown hook, or its fields are invalid.
    """
    try:
        data = json.loads(line.decode("utf-8") if isinstance(line, bytes) else line)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    except RecursionError as exc:
        raise ValueError("not JSON this reader accepts: nested too deeply") from exc
    if not isinstance(data, dict):
        raise ValueError("an event must be a JSON object")
    hook = data.pop("hook", None)
    cls = CONTEXT_TYPES.get(hook) if isinstance(hook, str) else None
    if cls is None:
        raise ValueError(f"unknown hook {hook!r}")
    _upgrade(cls.hook, data)
    try:
        ctx: EventContext = _adapter(cls).validate_python(data)
    except ValidationError as exc:
        raise ValueError(f"invalid {hook} event: {_summarise(exc)}") from exc
    _check_ranges(hook, ctx)
    return ctx


_INT64 = 1 << 63


def _check_ranges(hook: str, ctx: EventContext) -> None:
    """Refuse numbers no exporter can carry: a time or an integer past 64 bits, a NaN time.

    One such value would make the OTLP encoder drop the whole batch it sits in, so the
    line is refused here, where the reader can say which line it was.
    """
    if not 0 <= ctx.time_ns < _INT64:
        raise ValueError(f"invalid {hook} event: time_ns out of range")
    for field in dataclasses.fields(ctx):
        value = getattr(ctx, field.name)
        # Signed or unsigned 64-bit (hashes are unsigned): anything wider is not a value.
        if type(value) is int and not -_INT64 <= value < 2 * _INT64:
            raise ValueError(f"invalid {hook} event: {field.name} out of the 64-bit range")


def _upgrade(hook: str, data: dict[str, Any]) -> None:
    """Bring the fields of a line written by an older version to the current names."""
    version = data.pop("version", 1)
    if type(version) is not int or version < 1:
        raise ValueError(f"invalid log version {version!r}")
    if version > LOG_VERSION:
        raise ValueError(
            f"log version {version} is newer than this reader's ({LOG_VERSION}); "
            "upgrade loopobs to read it"
        )
    for step in range(version, LOG_VERSION):
        for old, new in _RENAMED_FIELDS.get(step, {}).get(hook, {}).items():
            if old in data and new not in data:
                data[new] = data.pop(old)


def _summarise(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(p) for p in err["loc"]) or "(event)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


class JsonlRecorder(EventSink):
    """Writes every event as one JSON line to a path or an open text stream.

    Lines are encoded on the emitting task and buffered. They reach the file
    (written and flushed) at every ``on_run_end``, when ``buffer_lines`` are
    pending, once the oldest pending line is ``flush_interval_s`` old (checked
    at each event and by a small daemon thread, so a stalled run's lines still
    arrive), and on :meth:`force_flush` / :meth:`shutdown`. A crash loses at
    most the lines of that interval.

    A write that fails (a full disk, a closed stream) drops the lines it held
    and counts them in :attr:`dropped_lines` and :attr:`write_failures`, logging
    a warning at most once a minute; nothing is retried, so a failing disk never
    makes the emitting task re-write a growing buffer. Safe when many runs and
    threads share one recorder: each line is written whole and in order. A
    path is opened in append mode and closed by :meth:`shutdown`; a stream
    passed in is flushed but left open.
    """

    def __init__(
        self,
        path_or_stream: str | os.PathLike[str] | IO[str],
        *,
        buffer_lines: int = 256,
        flush_interval_s: float | None = 1.0,
    ) -> None:
        if flush_interval_s is not None and not flush_interval_s > 0:
            raise ValueError("flush_interval_s must be positive, or None for no time bound")
        if isinstance(path_or_stream, (str, os.PathLike)):
            self._stream: IO[str] = Path(path_or_stream).open("a", encoding="utf-8")  # noqa: SIM115
            self._owns_stream = True
        else:
            self._stream = path_or_stream
            self._owns_stream = False
        self._buffer: list[str] = []
        self._buffer_lines = buffer_lines
        self._interval = flush_interval_s
        self._oldest: float | None = None  # monotonic time the oldest pending line arrived
        self._lock = threading.Lock()  # the buffer and counters; never held while writing
        self._io_lock = threading.Lock()  # one write at a time, batches in order
        self._closed = False
        self._dropped = 0
        self._failures = 0
        self._last_warning: float | None = None
        self._wake = threading.Event()
        self._timer_started = False

    @property
    def dropped_lines(self) -> int:
        """Lines lost because a write failed."""
        return self._dropped

    @property
    def write_failures(self) -> int:
        """Writes that failed (each dropped the lines it held)."""
        return self._failures

    def on_event(self, ctx: EventContext) -> None:
        line = encode_event(ctx)
        now = time.monotonic()
        with self._lock:
            if self._closed:
                return
            self._buffer.append(line)
            if self._oldest is None:
                self._oldest = now
            due = (
                ctx.hook == "on_run_end"
                or len(self._buffer) >= self._buffer_lines
                or (self._interval is not None and now - self._oldest >= self._interval)
            )
            start_timer = not due and self._interval is not None and not self._timer_started
            if start_timer:
                self._timer_started = True
        if due:
            self._write_pending()
        elif start_timer:
            self._start_timer()

    def _start_timer(self) -> None:
        ref = weakref.ref(self)
        wake, interval = self._wake, self._interval
        assert interval is not None

        def tick() -> None:
            # Holds the recorder only while flushing: an abandoned recorder is collected.
            while not wake.wait(interval):
                recorder = ref()
                if recorder is None:
                    return
                recorder._flush_if_stale()
                del recorder

        threading.Thread(target=tick, name="loopobs-jsonl-flush", daemon=True).start()

    def _flush_if_stale(self) -> None:
        oldest, interval = self._oldest, self._interval
        if oldest is not None and interval is not None and time.monotonic() - oldest >= interval:
            self._write_pending()

    def _write_pending(self) -> None:
        with self._io_lock:
            with self._lock:
                lines, self._buffer = self._buffer, []
                self._oldest = None
            self._write_locked(lines)

    def _write_locked(self, lines: list[str]) -> None:
        """Write and flush ``lines``; the caller holds ``_io_lock`` (not ``_lock``)."""
        if not lines:
            return
        try:
            self._stream.write("\n".join(lines) + "\n")
            self._stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            self._write_failed(len(lines), exc)

    def _write_failed(self, lines: int, exc: Exception) -> None:
        now = time.monotonic()
        with self._lock:
            self._dropped += lines
            self._failures += 1
            if self._last_warning is not None and now - self._last_warning < _WARN_INTERVAL_S:
                return
            self._last_warning = now
            dropped, failures = self._dropped, self._failures
        logger.warning(
            "JsonlRecorder could not write (%s: %s); %d line(s) dropped in %d failed write(s) "
            "so far",
            type(exc).__name__,
            exc,
            dropped,
            failures,
        )

    def force_flush(self, timeout_s: float | None = None) -> None:
        """Write pending lines and flush the stream (a failing write drops and counts them)."""
        if not self._closed:
            self._write_pending()

    def shutdown(self, timeout_s: float | None = None) -> None:
        """Flush, and close the file if the recorder opened it. Later events are dropped."""
        with self._io_lock:
            with self._lock:
                if self._closed:
                    return
                self._closed = True
                lines, self._buffer = self._buffer, []
            self._wake.set()
            self._write_locked(lines)
            if self._owns_stream:
                try:
                    self._stream.close()
                except OSError as exc:  # closing flushes: a full disk can fail it
                    self._write_failed(0, exc)


class ReplayError(ValueError):
    """A line of an event log could not be decoded; names the file and line number."""

    def __init__(self, source: str, line_no: int, reason: str) -> None:
        super().__init__(f"{source}:{line_no}: {reason}")
        self.source = source
        self.line_no = line_no
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """What :func:`replay` did: events re-emitted, and bad lines skipped (with their errors)."""

    events: int
    skipped: int
    errors: tuple[ReplayError, ...] = ()


def _lines(source: str | os.PathLike[str] | IO[str]) -> Iterator[tuple[str, int, str | bytes]]:
    if isinstance(source, (str, os.PathLike)):
        name = os.fspath(source)
        # Bytes, decoded per line: a line that is not UTF-8 is reported, never patched up.
        with Path(source).open("rb") as fh:
            for no, raw in enumerate(fh, 1):
                yield name, no, raw
    else:
        name = getattr(source, "name", "<stream>")
        for no, text in enumerate(source, 1):
            yield str(name), no, text


def replay(
    source: str | os.PathLike[str] | IO[str],
    observer: LoopObserver,
    *,
    skip_invalid: bool = False,
) -> ReplayStats:
    """Re-emit every event of a JSONL log into ``observer``, in file order.

    Each line is rebuilt into the exact context object that was recorded
    (validated with pydantic) and delivered to the hook it names. Blank lines
    are ignored.

    Args:
        source: a path or an open text stream.
        observer: any observer (an :class:`~loopobs.contract.observer.ObserverSet` to reach many).
        skip_invalid: skip malformed or unknown lines instead of raising; the
            returned stats count them.

    Raises:
        ReplayError: a line is malformed (unless ``skip_invalid``). Events before it
            have already been delivered.
    """
    events = 0
    errors: list[ReplayError] = []
    for name, no, line in _lines(source):
        if not line.strip():
            continue
        try:
            ctx = decode_event(line)
        except ValueError as exc:
            err = ReplayError(name, no, str(exc))
            if not skip_invalid:
                raise err from exc
            errors.append(err)
            continue
        getattr(observer, ctx.hook)(ctx)
        events += 1
    return ReplayStats(events=events, skipped=len(errors), errors=tuple(errors))
