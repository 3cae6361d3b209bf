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
PUT /v1/budgets/{run_id} ({"usd": .., "calls": ..}), GET /health, GET /metrics.

Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}: 400 for a malformed
request (param names the field), 404 for an unknown model, 429 when the run's budget is spent
(with `x-should-retry: false`, so clients do not retry what cannot succeed), 504 on timeout,
502 when a remote provider failed.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from llmrl.llm_gateway.api_types import (
    ChatResult,
    EmbedRequest,
    GenerateRequest,
    GuidedLines,
    ScoreRequest,
    cache_policy,
)
from llmrl.llm_gateway.errors import GatewayError, InvalidRequestError
from llmrl.llm_gateway.gateway import Gateway

log = logging.getLogger("llmrl.llm_gateway.rest")

# OpenAI parameters we do not implement: a non-default value is refused, never ignored
# (an ignored parameter would make two different requests share an answer).
UNSUPPORTED = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "logit_bias": None,
    "logprobs": None,
    "top_logprobs": None,
    "tools": None,
    "tool_choice": None,
    "functions": None,
    "function_call": None,
    "response_format": None,
    "stream": False,
    "echo": False,
    "best_of": None,
    "suffix": None,
}


def _error_response(exc: GatewayError) -> JSONResponse:
    body = {
        "error": {
            "message": exc.message,
            "type": exc.kind,
            "param": exc.field or None,
            "code": exc.kind,
        }
    }
    headers = {} if exc.http_status in (502, 504) else {"x-should-retry": "false"}
    return JSONResponse(body, status_code=exc.http_status, headers=headers)


async def _json_body(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidRequestError(f"the request body is not valid JSON: {exc}", "body") from None
    if not isinstance(body, dict):
        raise InvalidRequestError("the request body must be a JSON object", "body")
    return body


def _context(request: Request, body: dict[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidRequestError("metadata must be an object", "metadata")
    run_id = request.headers.get("x-llmrl-run") or metadata.get("run_id") or "default"
    tag = request.headers.get("x-llmrl-tag") or metadata.get("tag") or ""
    cache: Any = request.headers.get("x-llmrl-cache") or body.get("cache", True)
    timeout: Any = request.headers.get("x-llmrl-timeout")
    if timeout is not None:
        try:
            timeout = float(timeout)
        except ValueError:
            raise InvalidRequestError(
                f"X-LLMRL-Timeout must be a number of seconds; got {timeout!r}", "X-LLMRL-Timeout"
            ) from None
    return {"run_id": run_id, "tag": tag, "cache": cache_policy(cache), "timeout_s": timeout}


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, default in UNSUPPORTED.items():
        value = body.get(name, default)
        if value is None or value is False or value == default or value in ("", [], {}):
            continue
        raise InvalidRequestError(
            f"{name} is not supported by this gateway (got {value!r}); leave it unset", name
        )


def _text_content(messages: Any) -> Any:
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


def _guided_lines(body: dict[str, Any]) -> GuidedLines | None:
    """Guided decoding, as llmrl's `guided_lines` or vLLM's `guided_choice` (extra_body)."""
    lines, choice = body.get("guided_lines"), body.get("guided_choice")
    if lines is not None and choice is not None:
        raise InvalidRequestError("give guided_lines or guided_choice, not both", "guided_choice")
    if choice is not None:
        if not isinstance(choice, list):
            raise InvalidRequestError(
                "guided_choice must be a non-empty list of strings", "guided_choice"
            )
        return GuidedLines.from_value({"choices": choice, "max_lines": 1}, "guided_choice")
    return None if lines is None else GuidedLines.from_value(lines)


def _generation_fields(body: dict[str, Any]) -> dict[str, Any]:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    return {
        "guided_lines": _guided_lines(body),
        "model": body.get("model"),
        "n": body.get("n", 1) if body.get("n") is not None else 1,
        "temperature": body.get("temperature") if body.get("temperature") is not None else 0.0,
        "top_p": body.get("top_p") if body.get("top_p") is not None else 1.0,
        "max_tokens": 128 if max_tokens is None else max_tokens,
        "stop": body.get("stop"),
        "seed": body.get("seed"),
    }


def _usage(result: ChatResult) -> dict[str, int]:
    return {
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "total_tokens": result.prompt_tokens + result.completion_tokens,
    }


def _extra(result: Any, run_id: str) -> dict[str, Any]:
    return {
        "cached": result.cached,
        "cost_usd": result.cost_usd,
        "latency_s": result.latency_s,
        "run_id": run_id,
    }


def _cache_header(result: Any) -> dict[str, str]:
    return {"x-llmrl-cache": "hit" if result.cached else "miss"}


def create_app(gateway: Gateway) -> FastAPI:
    app = FastAPI(
        title="llmrl LLM gateway",
        description="OpenAI-compatible API with caching, cost ledger and budgets.",
        version="1",
    )

    @app.exception_handler(GatewayError)
    async def gateway_error(_: Request, exc: GatewayError) -> JSONResponse:
        return _error_response(exc)

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return _error_response(GatewayError(f"internal error: {type(exc).__name__}"))

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "models": list(gateway.settings.models), "mode": gateway.mode}

    @app.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST

        return Response(gateway.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    def list_models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": m["id"], "object": "model", "created": 0, "owned_by": "llmrl", **m}
                for m in gateway.models()
            ],
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> JSONResponse:
        body = await _json_body(request)
        _refuse_unsupported(body)
        if "messages" not in body:
            raise InvalidRequestError("messages is required", "messages")
        context = _context(request, body)
        generate = GenerateRequest(
            messages=_text_content(body["messages"]), **_generation_fields(body), **context
        )
        result = await _in_thread(gateway.generate, generate)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "finish_reason": reason,
                "logprobs": None,
            }
            for i, (text, reason) in enumerate(zip(result.texts, _reasons(result), strict=True))
        ]
        response = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": result.model,
            "choices": choices,
            "usage": _usage(result),
            "llmrl": _extra(result, context["run_id"]),
        }
        return JSONResponse(response, headers=_cache_header(result))

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await _json_body(request)
        _refuse_unsupported(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise InvalidRequestError("prompt must be a string (or a list of one string)", "prompt")
        context = _context(request, body)
        generate = GenerateRequest(prompt=prompt, **_generation_fields(body), **context)
        result = await _in_thread(gateway.generate, generate)
        choices = [
            {"index": i, "text": text, "finish_reason": reason, "logprobs": None}
            for i, (text, reason) in enumerate(zip(result.texts, _reasons(result), strict=True))
        ]
        response = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": result.model,
            "choices": choices,
            "usage": _usage(result),
            "llmrl": _extra(result, context["run_id"]),
        }
        return JSONResponse(response, headers=_cache_header(result))

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        body = await _json_body(request)
        texts = body.get("input")
        if isinstance(texts, list) and texts and not all(isinstance(t, str) for t in texts):
            raise InvalidRequestError("input must be a string or a list of strings", "input")
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise InvalidRequestError(
                f"encoding_format must be float or base64; got {encoding!r}", "encoding_format"
            )
        if body.get("dimensions") is not None:
            raise InvalidRequestError("dimensions is not supported; leave it unset", "dimensions")
        context = _context(request, body)
        embed = EmbedRequest(texts=texts, model=body.get("model"), **context)  # type: ignore[arg-type]
        result = await _in_thread(gateway.embed, embed)
        vectors = np.ascontiguousarray(result.vectors, dtype="<f4")
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": (
                    base64.b64encode(row.tobytes()).decode()
                    if encoding == "base64"
                    else row.astype(float).tolist()
                ),
            }
            for i, row in enumerate(vectors)
        ]
        response = {
            "object": "list",
            "data": data,
            "model": result.model,
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
            "llmrl": _extra(result, context["run_id"]),
        }
        return JSONResponse(response, headers=_cache_header(result))

    @app.post("/v1/score")
    async def score(request: Request) -> JSONResponse:
        body = await _json_body(request)
        context = _context(request, body)
        score_request = ScoreRequest(
            prompt=_text_content(body.get("prompt")),
            candidates=body.get("candidates"),  # type: ignore[arg-type]
            model=body.get("model"),
            **context,
        )
        result = await _in_thread(gateway.score, score_request)
        response = {
            "object": "score",
            "model": result.model,
            "logprobs": result.logprobs,
            "token_logprobs": result.token_logprobs,
            "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
            "llmrl": _extra(result, context["run_id"]),
        }
        return JSONResponse(response, headers=_cache_header(result))

    @app.post("/v1/count_tokens")
    async def count_tokens(request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        text = body.get("messages") if "messages" in body else body.get("input")
        if not isinstance(text, str | list):
            raise InvalidRequestError("give input (a string) or messages", "input")
        tokens = await _in_thread(gateway.count_tokens, _text_content(text), body.get("model"))
        return {"tokens": tokens}

    @app.get("/v1/usage/{run_id}")
    def usage(run_id: str) -> dict[str, Any]:
        return gateway.usage(run_id)

    @app.put("/v1/budgets/{run_id}")
    async def set_budget(run_id: str, request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        unknown = set(body) - {"usd", "calls"}
        if unknown:
            raise InvalidRequestError(
                f"unknown budget fields {sorted(unknown)}; allowed: usd, calls", sorted(unknown)[0]
            )
        gateway.set_budget(run_id, body.get("usd"), body.get("calls"))
        return gateway.usage(run_id)

    return app


def _reasons(result: ChatResult) -> list[str]:
    return result.finish_reasons or ["stop"] * len(result.texts)


async def _in_thread(fn: Any, *args: Any) -> Any:
    """Run a blocking gateway call off the event loop (the model thread does the work)."""
    from starlette.concurrency import run_in_threadpool

    return await run_in_threadpool(fn, *args)
