"""Requests that present a gateway-issued key (`sk-llmrl-…`) as their bearer credential.

The shared-token check (`llmrl.common.auth.BearerAuth`) leaves such requests to this
middleware, which serves them only if the key is usable (known, right secret, not expired,
not revoked; else the same 401 as a wrong token) and only on the model endpoints (else 403:
keys never manage budgets or other keys); `/health`, open to everyone, is served as without
a credential. The key's record then rides in the request's state,
where `rest_requests.request_context` binds the request to the key's ledger run and models.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from llmrl.common.auth import ALWAYS_OPEN, presented_bearer, refuse
from llmrl.llm_gateway.keys import KeyStore, looks_like_key

# What a key may call: the model operations, and the read-only helpers around them.
KEY_PATHS = frozenset(
    {
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/embeddings",
        "/v1/score",
        "/v1/count_tokens",
        "/v1/models",
    }
)
STATE_FIELD = "gateway_key"
FORBIDDEN_DETAIL = "a gateway key may only call the model endpoints: " + ", ".join(
    sorted(KEY_PATHS)
)


class GatewayKeyAuth:
    """ASGI middleware: binds a request presenting a gateway key to that key's record."""

    def __init__(self, app: Any, keys: KeyStore) -> None:
        self.app, self.keys = app, keys

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        presented = presented_bearer(dict(scope.get("headers") or []).get(b"authorization"))
        if presented is None or not looks_like_key(presented) or scope["path"] in ALWAYS_OPEN:
            # the shared token (or an open gateway); /health is open to every caller, so a
            # key there is as good as none (as a wrong token is for the shared-token check)
            await self.app(scope, receive, send)
            return
        record = await run_in_threadpool(self.keys.verify, presented.decode("utf-8", "replace"))
        if record is None:
            await refuse(scope, send)
            return
        if scope["path"] not in KEY_PATHS:
            await refuse(scope, send, 403, FORBIDDEN_DETAIL)
            return
        scope.setdefault("state", {})[STATE_FIELD] = record
        await self.app(scope, receive, send)
