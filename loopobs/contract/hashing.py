"""Stable hashes: identical across processes, machines and Python versions.

Python's ``hash()`` is salted per process, so nothing here uses it. Results and
arguments are hashed with BLAKE2b truncated to 64 bits.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import zlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "arguments_hash",
    "canonical_json",
    "encode",
    "result_hash",
    "stable_hash64",
    "text_key",
]


def stable_hash64(data: bytes) -> int:
    """An unsigned 64-bit BLAKE2b digest of ``data``."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def text_key(text: str) -> int:
    """A fast 64-bit key of ``text``, the same in every process (CRC-32 and Adler-32 of its
    UTF-8): the detectors' keys of normalised arguments and results, which a session's
    detector state carries to another worker. Not a digest: for equality of texts only,
    never recorded (a detection's event carries :func:`stable_hash64`)."""
    data = text.encode("utf-8", "surrogatepass")
    return zlib.crc32(data) << 32 | zlib.adler32(data)


def result_hash(text: str) -> int | None:
    """The stable hash of a tool's result text; ``None`` for empty output (nothing to compare)."""
    if not text:
        return None
    return stable_hash64(text.encode("utf-8", "surrogatepass"))


def _normalise(value: Any) -> Any:
    # Exact-type checks first: JSON from a model is dicts, lists and scalars, and the
    # ABC check behind isinstance(value, Mapping) costs more than the rest of the walk.
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is dict:
        return {k if type(k) is str else str(k): _normalise(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [_normalise(v) for v in value]
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


# One encoder built once: ``json.dumps`` with non-default options builds a new
# encoder on every call, which costs about as much as the encoding itself.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
# The C encoder behind it, made once too (``JSONEncoder.encode`` makes one per call).
# No circular-reference markers: tool arguments are parsed JSON, never cyclic; a
# cyclic value ends in RecursionError and is encoded by the pure path below.
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE: Callable[[Any, int], Any] | None = (
    _C_MAKE_ENCODER(None, str, json.encoder.encode_basestring, None, ":", ",", True, False, True)
    if _C_MAKE_ENCODER is not None
    else None
)
_PLAIN = frozenset({str, int, bool, type(None)})


def encode(value: Any) -> str:
    """Compact JSON of an already-normalised value, keys sorted (no other processing)."""
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(value, 0))
        except RecursionError:
            pass
    return _ENCODER.encode(value)


def _is_plain(value: Mapping[Any, Any]) -> bool:
    # A flat mapping with string keys and scalar values that _normalise would
    # leave unchanged: the common shape of tool arguments, encoded directly.
    plain = _PLAIN
    for k, v in value.items():
        if type(k) is not str:
            return False
        t = type(v)
        if t not in plain and not (t is float and not v.is_integer()):
            return False
    return True


def canonical_json(value: Any) -> str:
    """JSON with sorted keys, no whitespace, and integral floats written as integers.

    Two argument objects that differ only in key order, whitespace or number
    formatting (``1`` vs ``1.0``) give the same text.
    """
    if type(value) is dict and _is_plain(value):
        return encode(value)
    return encode(_normalise(value))


def arguments_hash(arguments: Mapping[str, Any]) -> int:
    """The stable 64-bit hash of tool arguments in their :func:`canonical_json` form.

    Equal for arguments that differ only in key order or number formatting, in
    any process on any machine.
    """
    return stable_hash64(canonical_json(arguments).encode("utf-8", "surrogatepass"))
