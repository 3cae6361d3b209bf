"""The gateway's own model operations: POST /v1/score (log-probabilities of candidate
continuations) and POST /v1/count_tokens (as the model counts them)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from llmrl.llm_gateway.api_types import ScoreRequest
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.rest_requests import (
    MESSAGES,
    METADATA,
    STRING,
    GatewayDep,
    cache_header,
    declared_body,
    in_thread,
    json_body,
    llmrl_extra,
    request_context,
    text_content,
    unless_disconnected,
)

router = APIRouter()


@router.post(
    "/v1/score",
    openapi_extra=declared_body(
        {
            "prompt": {"anyOf": [STRING, MESSAGES]},
            "candidates": {"type": "array", "items": STRING, "minItems": 1},
            "model": STRING,
            "metadata": METADATA,
        },
        ("prompt", "candidates"),
    ),
)
async def score(request: Request, gateway: GatewayDep) -> JSONResponse:
    body = await json_body(request)
    context = request_context(request, body, gateway.settings.default_model)
    score_request = ScoreRequest(
        prompt=text_content(body.get("prompt")),
        candidates=body.get("candidates"),  # type: ignore[arg-type]
        model=body.get("model"),
        **context,
    )
    result = await unless_disconnected(request, gateway.score, score_request)
    response = {
        "object": "score",
        "model": result.model,
        "logprobs": result.logprobs,
        "token_logprobs": result.token_logprobs,
        "usage": {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens},
        "llmrl": llmrl_extra(result, context["run_id"]),
    }
    return JSONResponse(response, headers=cache_header(result))


@router.post(
    "/v1/count_tokens",
    openapi_extra=declared_body({"input": STRING, "messages": MESSAGES, "model": STRING}),
)
async def count_tokens(request: Request, gateway: GatewayDep) -> dict[str, Any]:
    body = await json_body(request)
    text = body.get("messages") if "messages" in body else body.get("input")
    if not isinstance(text, str | list):
        raise InvalidRequestError("give input (a string) or messages", "input")
    tokens = await in_thread(gateway.count_tokens, text_content(text), body.get("model"))
    return {"tokens": tokens}
