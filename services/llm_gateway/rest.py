"""The OpenAI-compatible REST API, plus the gateway's own endpoints.

OpenAI-compatible: POST /v1/chat/completions, POST /v1/completions, POST /v1/embeddings,
GET /v1/models; responses carry `usage` and an extra `llmrl` object (cached, cost_usd,
latency_s, run_id). The official `openai` client works against it unchanged.

Run, tag and cache policy travel in headers (so an unmodified OpenAI client can set them with
`default_headers` or `extra_headers`), or in the body's `metadata` object:
    X-LLMRL-Run: <run id>        (or metadata.run_id; default "default")
    X-LLMRL-Tag: <tag>           (or metadata.tag)
    X-LLMRL-Cache: auto|bypass|always
    X-LLMRL-Timeout: <seconds>
Gateway endpoints: POST /v1/score, POST /v1/count_tokens, GET /v1/usage/{run_id},
PUT /v1/budgets/{run_id} ({"usd": .., "calls": ..}), GET /health, GET /metrics; issued keys:
POST /v1/keys, GET /v1/keys, DELETE /v1/keys/{key_id} (routes_keys; a client holding a key
spends only its budget, under the run `key:<id>`); vLLM's runtime LoRA API, POST
/v1/load_lora_adapter and POST /v1/unload_lora_adapter (routes_lora, `runtime_adapters`).

Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}: 400 for a malformed
request (param names the field), 404 for an unknown model, 429 when the run's budget is spent
(with `x-should-retry: false`, so clients do not retry what cannot succeed) or a rate limit
is reached (type `rate_limit_exceeded`, param the setting, with `Retry-After`: `admission`),
504 on timeout, 502 when a remote provider failed; 413 for a body over
`limits.max_body_bytes` (or its route's `limits.route_max_body_bytes`) or a prompt over
`limits.max_prompt_chars` or `limits.max_prompt_tokens`, 422 for a field of the wrong type or
range, and a 400 naming the field for a lone surrogate in any JSON string
(`llmrl.common.http`).

The routes live in one router per group (routes_openai, routes_scoring, routes_accounting,
routes_service); `create_app` puts the gateway in the app's state and includes them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from llmrl.common.auth import add_bearer_auth
from llmrl.common.http import ERROR_RESPONSES, guard_app
from llmrl.llm_gateway import (
    routes_accounting,
    routes_keys,
    routes_lora,
    routes_openai,
    routes_scoring,
    routes_service,
)
from llmrl.llm_gateway.admission import RouteBodyLimit
from llmrl.llm_gateway.errors import GatewayError, error_body, error_headers
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.key_auth import GatewayKeyAuth
from llmrl.llm_gateway.keys import looks_like_key


def error_response(exc: GatewayError) -> JSONResponse:
    """OpenAI's error shape; `Retry-After` where waiting helps (a rate limit), a no-retry hint
    where retrying cannot help."""
    return JSONResponse(error_body(exc), status_code=exc.http_status, headers=error_headers(exc))


async def _gateway_error(_: Request, exc: GatewayError) -> JSONResponse:
    return error_response(exc)


def openai_error_body(status: int, message: str, field: str) -> dict[str, Any]:
    """The shared guard's refusals (`llmrl.common.http`) in OpenAI's error shape."""
    kind = {413: "request_too_large", 422: "invalid_value"}.get(
        status, "invalid_request_error" if status < 500 else "internal_error"
    )
    return {"error": {"message": message, "type": kind, "param": field or None, "code": kind}}


def create_app(gateway: Gateway, token: str | None = None) -> FastAPI:
    app = FastAPI(
        title="llmrl LLM gateway",
        description="OpenAI-compatible API with caching, cost ledger and budgets.",
        version="1",
        responses={
            **ERROR_RESPONSES,
            403: {"description": "An issued key may not call this endpoint or model"},
        },
        exception_handlers={GatewayError: _gateway_error},
    )
    limits = gateway.settings.limits
    guard_app(app, limits.max_body_bytes, openai_error_body)
    app.state.gateway = gateway  # what the routers' GatewayDep reads
    routers = (routes_service, routes_openai, routes_scoring, routes_accounting, routes_keys,
               routes_lora)  # fmt: skip
    for routes in routers:
        app.include_router(routes.router)
    # outermost first: the shared token (keys left to the next), the issued keys and every
    # caller's rate limits (before a body is read), a route's own body limit, the body guard
    app.add_middleware(
        RouteBodyLimit, limits=limits.route_max_body_bytes, error_body=openai_error_body,
        admission=gateway.admission,
    )  # fmt: skip
    app.add_middleware(GatewayKeyAuth, keys=gateway.keys, admission=gateway.admission)
    add_bearer_auth(app, token, delegate=looks_like_key)
    return app
