"""The JSON boundary of every HTTP service: what a request body may hold before any parser,
model or handler of the service sees it (`RequestBodyGuard` calls `check_json_body`).

- UTF-8 only: `json.loads` also reads a body with a byte order mark, in UTF-16 or in UTF-32,
  which the byte scans below cannot read (nesting after a BOM, a `\\ud800` escape in UTF-16
  went through), so such a body is refused ("JSON bodies must be UTF-8") before anything else;
- nesting at most `MAX_JSON_DEPTH` levels, counted without recursion (a linear scan of the
  bytes), so no parser downstream can hit Python's recursion limit;
- integers at most `MAX_JSON_INT` (int64) in magnitude, so no SQLite column, numpy array or
  float conversion overflows;
- numbers finite: no `NaN`/`Infinity` literals and nothing that overflows to infinity (`1e400`);
- strings encodable: no lone surrogate (`"\\ud800"` is valid JSON but not text).

A refusal is a `JsonLimitError` naming the field ("body.usd", "body.messages[0].content").
A body that is not JSON (but is UTF-8) passes: the service's own parsing answers it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

MAX_JSON_DEPTH = 64
MAX_JSON_INT = 2**63 - 1
_MAX_INT_DIGITS = len(str(MAX_JSON_INT))

# An escape pair (`\"`, `\\`, `\u`) masked with two NULs keeps every offset and leaves only
# the quotes that delimit strings, so strings are then `"[^"]*"`: linear, no backtracking.
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING = re.compile(rb'"[^"]*"')
_TOKEN = re.compile(rb'"[^"]*"|[\[\]{}:,]')
_CONTAINER = re.compile(rb"\s*[\[{]")
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
# What only a body that breaks a bound holds: a long digit run, a big exponent, a non-finite
# literal, a surrogate escape. Bodies without any are not parsed here at all.
_SUSPECT = re.compile(rb"\d{%d,}|[eE][+-]?\d{3,}|NaN|Infinity|\\u[dD][89a-fA-F]" % _MAX_INT_DIGITS)


class JsonLimitError(ValueError):
    """A JSON body over a bound: the message says which and `field` names where."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


class _Refused:
    """What the parser hooks return for a literal that breaks a bound (found by the walk)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


_UTF8_BOM = b"\xef\xbb\xbf"
_ENCODING_REASON = "JSON bodies must be UTF-8 (without a byte order mark; not UTF-16 or UTF-32)"
_INT_REASON = f"integer out of range (at most {MAX_JSON_INT} in magnitude)"
_FINITE_REASON = "numbers must be finite (no NaN, Infinity, or overflow such as 1e400)"
_SURROGATE_REASON = "invalid Unicode (a lone surrogate); send well-formed UTF-8 text"


def check_json_body(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise `JsonLimitError` if `body` is JSON that breaks a bound, or is not UTF-8 as
    `json.loads` would read it (a BOM, UTF-16, UTF-32); parse it only if it may break one."""
    if body.startswith(_UTF8_BOM) or (body and json.detect_encoding(body) != "utf-8"):
        raise JsonLimitError(f"body: {_ENCODING_REASON}", "body")
    if _CONTAINER.match(body):  # only an array or object nests
        masked = _ESCAPE.sub(b"\0\0", body)
        if _deeper_than(masked, max_depth):
            field = _path_at_depth(body, masked, max_depth)
            raise JsonLimitError(f"{field}: JSON nested deeper than {max_depth} levels", field)
    if not _SUSPECT.search(body):
        return
    try:
        value = json.loads(body, parse_int=_parse_int, parse_constant=_parse_constant)
    except (ValueError, UnicodeDecodeError):
        return  # not JSON: the service's own parsing answers
    found = first_violation(value)
    if found is not None:
        field, reason = found
        raise JsonLimitError(f"{field}: {reason}", field)


def _deeper_than(masked: bytes, max_depth: int) -> bool:
    structure = _STRING.sub(b"", masked).translate(None, _NOT_BRACKET)
    if structure.count(b"[") + structure.count(b"{") <= max_depth:
        return False  # the common case: too few containers to be too deep
    return max(accumulate(map(_STEP.__getitem__, structure))) > max_depth


def _path_at_depth(body: bytes, masked: bytes, max_depth: int) -> str:
    """The path of the container that opens one level below `max_depth` (keys are read from
    the original bytes at the masked string's offsets)."""
    frames: list[list[Any]] = []  # per open container: [is_object, key or index]
    last_key: str | None = None
    for token in _TOKEN.finditer(masked):
        kind = masked[token.start()]
        if kind == ord('"'):
            last_key = _key_text(body[token.start() : token.end()])
        elif kind in b"[{":
            if len(frames) >= max_depth:
                return _path(frames)
            frames.append([kind == ord("{"), None if kind == ord("{") else 0])
        elif kind in b"]}":
            if frames:
                frames.pop()
        elif frames and kind == ord(":") and frames[-1][0]:
            frames[-1][1] = last_key
        elif frames and kind == ord(",") and not frames[-1][0]:
            frames[-1][1] += 1
    return _path(frames)


def _key_text(quoted: bytes) -> str:
    try:
        return str(json.loads(quoted))[:64]
    except (ValueError, UnicodeDecodeError):
        return "?"


def _path(frames: list[list[Any]]) -> str:
    path = "body"
    for is_object, at in frames:
        path += f".{'' if at is None else at}" if is_object else f"[{at}]"
    return _safe_text(path)


def _parse_int(literal: str) -> int | _Refused:
    if len(literal.lstrip("-")) > _MAX_INT_DIGITS:
        return _Refused(_INT_REASON)  # not converted: int() of thousands of digits is slow
    number = int(literal)
    return number if -MAX_JSON_INT <= number <= MAX_JSON_INT else _Refused(_INT_REASON)


def _parse_constant(_literal: str) -> _Refused:
    return _Refused(_FINITE_REASON)


def first_violation(
    value: Any, root: str = "body", check: Callable[[Any], str | None] | None = None
) -> tuple[str, str] | None:
    """(path, reason) of the first value, in document order, that breaks a bound (`check`:
    which value does; default: every bound); iterative, so any depth is safe."""
    check = check or _scalar_violation
    stack: list[tuple[Any, str]] = [(value, root)]
    while stack:
        item, path = stack.pop()
        reason = check(item)
        if reason is not None:
            return _safe_text(path), reason
        if isinstance(item, dict):
            children = []
            for key, child in item.items():
                if check(key) is not None:
                    return _safe_text(path), _SURROGATE_REASON
                children.append((child, f"{path}.{key}"))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend((item[i], f"{path}[{i}]") for i in range(len(item) - 1, -1, -1))
    return None


def _scalar_violation(item: Any) -> str | None:
    if isinstance(item, _Refused):
        return item.reason
    if isinstance(item, float) and not math.isfinite(item):
        return _FINITE_REASON
    if isinstance(item, int) and not isinstance(item, bool):
        return None if -MAX_JSON_INT <= item <= MAX_JSON_INT else _INT_REASON
    return lone_surrogate(item)


def lone_surrogate(item: Any) -> str | None:
    """The reason if `item` is a string holding a lone surrogate, else None."""
    if isinstance(item, str):
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATE_REASON
    return None


def _safe_text(text: str) -> str:
    """`text` with anything unencodable (lone surrogates) replaced, so it can be echoed."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
