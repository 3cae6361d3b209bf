"""One shared bearer token for every service: checked on HTTP and gRPC, sent by every client.

The token comes from LLMRL_TOKEN (LLMRL_ORCHESTRATOR_TOKEN is kept as an alias); `llmrl up`
generates one when the user set none. With no token configured (tests, embedded mode) the
services stay open. With one:
- HTTP (`add_bearer_auth`): every request but `/health` needs `Authorization: Bearer <token>`;
  `/metrics` and the docs (`/docs`, `/redoc`, `/openapi.json`) too unless LLMRL_AUTH_OPEN lists
  them (`metrics`, `docs`, comma-separated). The check runs before routing, so the 401 is the
  same whether the resource exists or not.
- gRPC (`TokenInterceptor`): the `authorization` metadata must be `Bearer <token>`, else
  UNAUTHENTICATED. grpc-python sends no call credentials on insecure channels, so clients wrap
  their channel with `authenticated_channel`, which adds the metadata to every call.
Comparisons are constant-time (hmac.compare_digest).
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from collections.abc import Callable
from typing import Any

import grpc

TOKEN_VAR = "LLMRL_TOKEN"
TOKEN_ALIASES = ("LLMRL_ORCHESTRATOR_TOKEN",)  # the orchestrator's own variable, before LLMRL_TOKEN
OPEN_VAR = "LLMRL_AUTH_OPEN"
ALWAYS_OPEN = frozenset({"/health"})
OPENABLE = {
    "metrics": frozenset({"/metrics"}),
    "docs": frozenset({"/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}),
}
UNAUTHORIZED_DETAIL = "missing or wrong bearer token (send 'Authorization: Bearer <token>')"


def configured_token(explicit: str | None = None) -> str | None:
    """The token services require and clients send: `explicit`, else LLMRL_TOKEN, else an alias."""
    for value in (explicit, os.environ.get(TOKEN_VAR), *map(os.environ.get, TOKEN_ALIASES)):
        if value:
            return value
    return None


def generate_token() -> str:
    return secrets.token_urlsafe(32)


def presented_bearer(header_value: str | bytes | None) -> bytes | None:
    """The credential of an Authorization value `Bearer <credential>`, else None."""
    if header_value is None:
        return None
    raw = header_value if isinstance(header_value, bytes) else header_value.encode("utf-8")
    scheme, _, presented = raw.partition(b" ")
    return presented.strip() if scheme.lower() == b"bearer" else None


def bearer_matches(header_value: str | bytes | None, token: str) -> bool:
    """Whether an Authorization value is `Bearer <token>`, compared in constant time."""
    presented = presented_bearer(header_value)
    return presented is not None and hmac.compare_digest(presented, token.encode("utf-8"))


def open_paths(setting: str | None = None) -> frozenset[str]:
    """Paths served without the token: /health, and what LLMRL_AUTH_OPEN (or `setting`) names."""
    value = os.environ.get(OPEN_VAR, "") if setting is None else setting
    paths = set(ALWAYS_OPEN)
    for name in filter(None, (part.strip() for part in value.split(","))):
        if name not in OPENABLE:
            allowed = ", ".join(sorted(OPENABLE))
            raise ValueError(f"{OPEN_VAR}: unknown entry {name!r} (allowed: {allowed})")
        paths |= OPENABLE[name]
    return frozenset(paths)


def auth_headers(token: str | None = None) -> dict[str, str]:
    """HTTP headers a client sends: the bearer token when one is configured."""
    token = configured_token(token)
    return {"Authorization": f"Bearer {token}"} if token else {}


# A predicate on a presented bearer credential: True leaves the request to an inner check
# (the gateway's issued keys) instead of refusing it for not being the shared token.
Delegate = Callable[[bytes], bool]


class BearerAuth:
    """ASGI middleware: 401 for any HTTP/WebSocket request without the token, except open paths
    (and credentials that `delegate` hands to an inner check)."""

    def __init__(
        self, app: Any, token: str, open_paths: frozenset[str], delegate: Delegate | None = None
    ) -> None:
        self.app, self.token, self.open_paths, self.delegate = app, token, open_paths, delegate

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        header = dict(scope.get("headers") or []).get(b"authorization")
        presented = presented_bearer(header)
        if bearer_matches(header, self.token) or (
            presented is not None and self.delegate is not None and self.delegate(presented)
        ):
            await self.app(scope, receive, send)
            return
        await refuse(scope, send)


async def refuse(
    scope: dict, send: Callable, status: int = 401, detail: str = UNAUTHORIZED_DETAIL
) -> None:
    """Answer an unauthenticated request: a JSON 401 (or `status`), or a closed WebSocket."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.body", "body": body})


def add_bearer_auth(
    app: Any, token: str | None, open_setting: str | None = None, delegate: Delegate | None = None
) -> None:
    """Require `token` on every route of a FastAPI/Starlette app but the open paths (None: open);
    credentials `delegate` accepts are left to a check of the app's own."""
    app.state.token = token
    if token:
        app.add_middleware(
            BearerAuth, token=token, open_paths=open_paths(open_setting), delegate=delegate
        )


class TokenInterceptor(grpc.ServerInterceptor):
    """A gRPC server interceptor: UNAUTHENTICATED unless `authorization` is `Bearer <token>`."""

    def __init__(self, token: str) -> None:
        self.token = token

    def intercept_service(self, continuation: Callable, handler_call_details: Any) -> Any:
        metadata = dict(handler_call_details.invocation_metadata or ())
        if bearer_matches(metadata.get("authorization"), self.token):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:  # an unknown method: refused the same way as a known one
            return grpc.unary_unary_rpc_method_handler(_refuse)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(
                _refuse, handler.request_deserializer, handler.response_serializer
            )
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(
                _refuse, handler.request_deserializer, handler.response_serializer
            )
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(
                _refuse, handler.request_deserializer, handler.response_serializer
            )
        return grpc.unary_unary_rpc_method_handler(
            _refuse, handler.request_deserializer, handler.response_serializer
        )


def _refuse(_request: Any, context: grpc.ServicerContext) -> None:
    context.abort(grpc.StatusCode.UNAUTHENTICATED, UNAUTHORIZED_DETAIL)


def server_interceptors(token: str | None) -> list[grpc.ServerInterceptor]:
    """What a gRPC server is built with: the token check when a token is configured."""
    return [TokenInterceptor(token)] if token else []


class _MetadataInterceptor(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the `authorization` metadata to every call of a client channel."""

    def __init__(self, token: str) -> None:
        self.pair = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> Any:
        metadata = [*(details.metadata or ()), self.pair]
        return _CallDetails(
            details.method, details.timeout, metadata, details.credentials,
            getattr(details, "wait_for_ready", None), getattr(details, "compression", None),
        )  # fmt: skip

    def intercept_unary_unary(self, continuation: Callable, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Callable, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_unary(self, continuation: Callable, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)

    def intercept_stream_stream(self, continuation: Callable, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)


class _CallDetails(grpc.ClientCallDetails):
    def __init__(
        self,
        method: str,
        timeout: float | None,
        metadata: Any,
        credentials: Any,
        wait_for_ready: bool | None,
        compression: Any,
    ) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = (
            credentials,
            wait_for_ready,
            compression,
        )


def authenticated_channel(channel: grpc.Channel, token: str | None = None) -> grpc.Channel:
    """`channel` sending the configured token as `authorization` metadata on every call."""
    token = configured_token(token)
    return grpc.intercept_channel(channel, _MetadataInterceptor(token)) if token else channel
