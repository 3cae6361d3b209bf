"""Requests that present a gateway-issued key (`sk-llmrl-…`) as their bearer credential.

The shared-token check (`llmrl.common.auth.BearerAuth`) leaves such requests to this
middleware, which serves them only if the key is usable (known, right secret, not expired,
not revoked; else the same 401 as a wrong token) and only on the model endpoints (else 403:
keys never manage budgets or other keys); `/health`, open to everyone, is served as without
a credential. The key's record then rides in the request's state,
where `rest_requests.request_context` binds the request to the key's ledger run and models.

Here too, before the body is read, a request to a model endpoint is admitted against its
tenant's rate limits (`admission.Admission`: the key's requests in flight and tokens per
minute; the service token's callers when `limits.service_*` are set): over one, a 429 with
`Retry-After`, naming the limit and its setting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse

from llmrl.common.auth import ALWAYS_OPEN, presented_bearer, refuse
from llmrl.llm_gateway.admission import STATE_FIELD, Admission
from llmrl.llm_gateway.errors import RateLimitedError, error_body, error_headers
from llmrl.llm_gateway.keys import KeyRecord, KeyStore, looks_like_key

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
# What is admitted against a tenant's rate limits: the paths that may make a model work.
LIMITED_PATHS = KEY_PATHS - {"/v1/models"}
FORBIDDEN_DETAIL = "a gateway key may only call the model endpoints: " + ", ".join(
    sorted(KEY_PATHS)
)


class GatewayKeyAuth:
    """ASGI middleware: binds a request presenting a gateway key to that key's record."""

    def __init__(self, app: Any, keys: KeyStore, admission: Admission | None = None) -> None:
        self.app, self.keys, self.admission = app, keys, admission

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        presented = presented_bearer(dict(scope.get("headers") or []).get(b"authorization"))
        if presented is None or not looks_like_key(presented) or scope["path"] in ALWAYS_OPEN:
            # the shared token (or an open gateway); /health is open to every caller, so a
            # key there is as good as none (as a wrong token is for the shared-token check)
            await self._admitted(None, scope, receive, send)
            return
        record = await run_in_threadpool(self.keys.verify, presented.decode("utf-8", "replace"))
        if record is None:
            await refuse(scope, send)
            return
        if scope["path"] not in KEY_PATHS:
            await refuse(scope, send, 403, FORBIDDEN_DETAIL)
            return
        scope.setdefault("state", {})[STATE_FIELD] = record
        await self._admitted(record, scope, receive, send)

    async def _admitted(
        self, record: KeyRecord | None, scope: dict, receive: Callable, send: Callable
    ) -> None:
        """The request, if its tenant's limits let it in (held until it is answered)."""
        if self.admission is None or scope["type"] != "http" or scope["path"] not in LIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        try:
            release = self.admission.admit(record)
        except RateLimitedError as exc:
            refusal = JSONResponse(error_body(exc), exc.http_status, headers=error_headers(exc))
            await refusal(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            release()
