"""What every HTTP service shares to bound its work and never answer 500 to bad input.

- `RequestBodyGuard`: ASGI middleware that reads a request's body before the app does: over
  `max_bytes` it is a 413 naming the limit; a JSON body nested too deep, holding an integer
  beyond int64, a non-finite number or a lone surrogate ("\\ud800", valid JSON but not
  encodable text) is a 400 naming the field (`llmrl.common.json_limits`), so no parser,
  handler, cache key, database or file name ever meets it.
- `install_error_handlers`: a 422 for a request the schema refuses whose errors never echo
  what cannot be encoded, and a logged 500 without internals for a programming error.
- `configured_max_body_bytes`: the limit: a setting, else $LLMRL_MAX_BODY_BYTES, else 4 MiB.
- `ERROR_RESPONSES`: the error answers every API declares in its OpenAPI schema.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable
from typing import Any

from llmrl.common.json_limits import (
    JsonLimitError,
    check_json_body,
    first_violation,
    lone_surrogate,
)

log = logging.getLogger("llmrl.http")

DEFAULT_MAX_BODY_BYTES = 4 << 20
MAX_BODY_VAR = "LLMRL_MAX_BODY_BYTES"
BODY_METHODS = ("POST", "PUT", "PATCH", "DELETE")

# The error answers every route may give, declared so that clients and fuzzers know them.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "Malformed request: the detail names the field"},
    401: {"description": "Missing or wrong credentials"},
    404: {"description": "Unknown resource"},
    413: {"description": "Request body or input over the configured limit"},
    422: {"description": "A field has the wrong type or an out-of-range value"},
    429: {"description": "A budget or rate limit is spent"},
}

ErrorBody = Callable[[int, str, str], dict[str, Any]]


def detail_body(status: int, message: str, field: str) -> dict[str, Any]:
    """The default error body: FastAPI's `{"detail": ...}`, plus the field at fault."""
    return {"detail": message, "field": field}


def configured_max_body_bytes(value: Any = None, default: int = DEFAULT_MAX_BODY_BYTES) -> int:
    """The body limit: `value` (a setting) if given, else $LLMRL_MAX_BODY_BYTES, else `default`."""
    raw = value if value not in (None, "") else os.environ.get(MAX_BODY_VAR)
    if raw in (None, ""):
        return default
    try:
        limit = int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"max_body_bytes must be a whole number of bytes; got {raw!r}") from None
    if limit <= 0:
        raise ValueError(f"max_body_bytes must be positive; got {limit}")
    return limit


def lone_surrogate_field(value: Any, path: str = "body") -> str | None:
    """The path ("body.messages[0].content") of the first string holding a lone surrogate
    (iterative: any depth is safe)."""
    found = first_violation(value, path, check=lone_surrogate)
    return None if found is None else found[0]


def _safe_text(text: str) -> str:
    """`text` with anything unencodable (lone surrogates) replaced, so it can be echoed."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def replaying(body: bytes, receive: Callable) -> Callable:
    """An ASGI `receive` that first gives the app `body` (read already by a middleware, whole)
    and then whatever the client sends next (its disconnect)."""
    replayed = False

    async def replay() -> dict:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


class RequestBodyGuard:
    """ASGI middleware: the body is read here (at most `max_bytes` of it), checked, then
    replayed to the app. `error_body(status, message, field)` shapes the refusals."""

    def __init__(self, app: Any, max_bytes: int, error_body: ErrorBody = detail_body) -> None:
        self.app, self.max_bytes, self.error_body = app, max_bytes, error_body

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await self._too_large(send)
                return
        body = b"".join(chunks)
        try:
            check_json_body(body)
        except JsonLimitError as exc:
            await _send_json(send, 400, self.error_body(400, str(exc), exc.field))
            return

        await self.app(scope, replaying(body, receive), send)

    async def _too_large(self, send: Callable) -> None:
        message = f"request body too large: the limit is {self.max_bytes} bytes (max_body_bytes)"
        await _send_json(send, 413, self.error_body(413, message, "body"))


async def _send_json(send: Callable, status: int, payload: dict[str, Any]) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def safe_validation_errors(errors: Any) -> list[dict[str, Any]]:
    """FastAPI's validation errors made JSON-safe: `input` and `ctx` are dropped (they may hold
    anything the client sent, or exceptions), locations and messages made encodable."""
    safe = []
    for error in errors:
        loc = [item if isinstance(item, int) else _safe_text(str(item)) for item in error["loc"]]
        safe.append(
            {"loc": loc, "msg": _safe_text(str(error.get("msg", ""))), "type": error["type"]}
        )
    return safe


def field_of(loc: list[Any]) -> str:
    """ "body.messages[0]" from FastAPI's ["body", "messages", 0]."""
    field = ""
    for item in loc:
        field += f"[{item}]" if isinstance(item, int) else (f".{item}" if field else str(item))
    return field


def install_error_handlers(app: Any, error_body: ErrorBody | None = None) -> None:
    """A 422 naming the field for what the schema refuses, and a logged 500 that shows no
    internals for anything unexpected. With `error_body` the 422 takes that shape."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    async def validation_error(_request: Any, exc: RequestValidationError) -> JSONResponse:
        errors = safe_validation_errors(exc.errors())
        if error_body is None:
            return JSONResponse({"detail": errors}, status_code=422)
        first = errors[0] if errors else {"loc": ["body"], "msg": "invalid request"}
        field = field_of(first["loc"])
        return JSONResponse(error_body(422, f"{field}: {first['msg']}", field), status_code=422)

    async def unexpected_error(_request: Any, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        message = f"internal error: {type(exc).__name__}"
        body = error_body(500, message, "") if error_body else {"detail": message}
        return JSONResponse(body, status_code=500)

    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unexpected_error)


def guard_app(app: Any, max_bytes: int, error_body: ErrorBody | None = None) -> None:
    """The body guard and the error handlers on `app`: what every service's factory calls."""
    app.add_middleware(RequestBodyGuard, max_bytes=max_bytes, error_body=error_body or detail_body)
    install_error_handlers(app, error_body)
