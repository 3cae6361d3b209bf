"""What every REST router of the gateway shares: the gateway of the app serving the request,
the JSON body, the run/tag/cache context (headers or `metadata`), OpenAI's content parts, and
the `llmrl` extras every model answer carries."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request

from llmrl.llm_gateway.api_types import GenerateRequest, ScoreRequest, cache_policy
from llmrl.llm_gateway.cache import cache_namespace
from llmrl.llm_gateway.errors import InvalidRequestError, PermissionDeniedError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.key_auth import STATE_FIELD
from llmrl.llm_gateway.keys import KeyRecord


def gateway_of(request: Request) -> Gateway:
    """The gateway `create_app` put in the app's state."""
    return request.app.state.gateway


async def _gateway_dependency(request: Request) -> Gateway:
    """`gateway_of` as a route dependency. Async on purpose: FastAPI runs a plain `def`
    dependency in a worker thread, a thread hop there and back on every request just to read
    an attribute (4-7% of the gateway's CPU on a cache miss; bench/gateway_peers.py)."""
    return gateway_of(request)


# A route parameter annotated with this receives the app's gateway (not a request field).
GatewayDep = Annotated[Gateway, Depends(_gateway_dependency)]


async def json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}", "body") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object", "body")
    return body


def declared_body(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """`openapi_extra` declaring a route's JSON object body (the routes parse it themselves, to
    answer in OpenAI's error shape): clients and fuzzers see the fields and their types."""
    schema = {"type": "object", "properties": properties, "required": list(required)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


STRING: dict[str, Any] = {"type": "string"}
MESSAGES: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"role": STRING, "content": STRING},
        "required": ["role", "content"],
    },
}
METADATA: dict[str, Any] = {"type": "object", "properties": {"run_id": STRING, "tag": STRING}}


def request_context(
    request: Request, body: dict[str, Any], default_model: str | None = None
) -> dict[str, Any]:
    """run_id, tag, cache policy and timeout: X-LLMRL-* headers first, then the body. A request
    made with an issued key runs as the key's run (its budget), on the models it allows
    (`default_model`: the model the route uses when the body names none), and sees only its
    own cached answers (`cache.share`)."""
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidRequestError("metadata must be an object", "metadata")
    run_id = request.headers.get("x-llmrl-run") or metadata.get("run_id") or "default"
    key: KeyRecord | None = getattr(request.state, STATE_FIELD, None)
    if key is not None:
        run_id = key.run_id
        _check_key_model(key, body.get("model") or default_model)
    tag = request.headers.get("x-llmrl-tag") or metadata.get("tag") or ""
    cache: Any = request.headers.get("x-llmrl-cache") or body.get("cache", True)
    timeout = _timeout_header(request)
    share = gateway_of(request).settings.cache.share
    return {
        "run_id": run_id,
        "tag": tag,
        "cache": cache_policy(cache),
        "timeout_s": timeout,
        # never from the request itself: a caller cannot read another tenant's answers
        "cache_namespace": cache_namespace(None if key is None else key.id, share),
        # whose rate limits and fair share at a model: the key's (never from the request)
        "tenant": "" if key is None else key.run_id,
    }


def _timeout_header(request: Request) -> float | None:
    """X-LLMRL-Timeout in seconds, capped at the gateway's `limits.max_timeout_s`."""
    raw = request.headers.get("x-llmrl-timeout")
    if raw is None:
        return None
    cap = gateway_of(request).settings.limits.max_timeout_s
    try:
        timeout = float(raw)
    except ValueError:
        timeout = math.nan
    if not timeout > 0 or math.isinf(timeout):
        raise InvalidRequestError(
            f"X-LLMRL-Timeout must be a number of seconds > 0 (at most {cap:g} are used, "
            f"limits.max_timeout_s); got {raw!r}",
            "X-LLMRL-Timeout",
        )
    return min(timeout, cap)


def key_models(request: Request) -> list[str] | None:
    """The models the request's issued key may call (None: no key, or every model)."""
    key: KeyRecord | None = getattr(request.state, STATE_FIELD, None)
    return None if key is None else key.models


def _check_key_model(key: KeyRecord, model: Any) -> None:
    if key.models is None or not isinstance(model, str):
        return  # every model; a malformed name is refused later, naming the field
    if model.partition(":")[0] not in key.models:
        raise PermissionDeniedError(
            f"model: this key may only call the models {key.models}", "model"
        )


def text_content(messages: Any) -> Any:
    """OpenAI content may be a list of parts; text parts are joined, others refused."""
    if not isinstance(messages, list):
        return messages
    result = []
    for i, message in enumerate(messages):
        if isinstance(message, dict) and isinstance(message.get("content"), list):
            parts = message["content"]
            texts = []
            for j, part in enumerate(parts):
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise InvalidRequestError(
                        f"messages[{i}].content[{j}]: only text parts are supported",
                        f"messages[{i}].content[{j}]",
                    )
                texts.append(str(part.get("text", "")))
            message = {**message, "content": "".join(texts)}
        if isinstance(message, dict):
            message = {k: message[k] for k in ("role", "content") if k in message}
        result.append(message)
    return result


def llmrl_extra(result: Any, run_id: str) -> dict[str, Any]:
    """The `llmrl` object of an answer: what the OpenAI shape has no field for."""
    return {
        "cached": result.cached,
        "cost_usd": result.cost_usd,
        "latency_s": result.latency_s,
        "run_id": run_id,
    }


def cache_header(result: Any) -> dict[str, str]:
    return {"x-llmrl-cache": "hit" if result.cached else "miss"}


async def in_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking gateway call off the event loop (the model thread does the work)."""
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args)


async def generated(request: Request, gateway: Gateway, model_request: GenerateRequest) -> Any:
    """`gateway.generate(model_request)` for a route: on the event loop itself where the
    gateway can (`Gateway.generates_async`: a remote engine on plain http, no hop to a worker
    thread and back, ~15% of a cache miss's CPU), else in a worker thread
    (`unless_disconnected`)."""
    if gateway.generates_async(model_request):
        return await gateway.agenerate(model_request)
    return await unless_disconnected(request, gateway.generate, model_request)


DISCONNECT_POLL_S = 0.25


async def unless_disconnected(
    request: Request, operation: Callable[[Any], Any], model_request: GenerateRequest | ScoreRequest
) -> Any:
    """`operation(model_request)` (a gateway's generate or score) off the event loop; when the
    client disconnects first, the request is marked abandoned, so a local model drops it from
    its queue, or stops it at its next decoding step or scoring forward pass, instead of
    holding the model for a caller that is gone."""
    call = asyncio.ensure_future(in_thread(operation, model_request))
    while not call.done():
        await asyncio.wait({call}, timeout=DISCONNECT_POLL_S)
        if not call.done() and await request.is_disconnected():
            model_request.abandoned.set()
            break
    return await call
