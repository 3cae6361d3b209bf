"""The OpenAI-compatible routes: POST /v1/chat/completions, POST /v1/completions,
POST /v1/embeddings, GET /v1/models, in OpenAI's shapes plus `usage` and an `llmrl` object."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from llmrl.common.bounds import MAX_INT64
from llmrl.llm_gateway.api_types import (
    MAX_N,
    MAX_TOKENS_LIMIT,
    ChatResult,
    EmbedRequest,
    GenerateRequest,
    GuidedLines,
)
from llmrl.llm_gateway.errors import InvalidRequestError
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.rest_requests import (
    MESSAGES,
    METADATA,
    STRING,
    GatewayDep,
    cache_header,
    declared_body,
    in_thread,
    json_body,
    key_models,
    llmrl_extra,
    request_context,
    text_content,
    unless_disconnected,
)

router = APIRouter()
GENERATION = {
    "model": STRING,
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS_LIMIT},
    "n": {"type": "integer", "minimum": 1, "maximum": MAX_N},
    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
    "top_p": {"type": "number", "minimum": 0, "maximum": 1},
    "stop": {"type": "array", "items": STRING},
    "seed": {"type": "integer", "minimum": 0, "maximum": MAX_INT64},
    "metadata": METADATA,
}

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


def _refuse_unsupported(body: dict[str, Any]) -> None:
    for name, default in UNSUPPORTED.items():
        value = body.get(name, default)
        if value is None or value is False or value == default or value in ("", [], {}):
            continue
        raise InvalidRequestError(
            f"{name} is not supported by this gateway (got {value!r}); leave it unset", name
        )


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


def _reasons(result: ChatResult) -> list[str]:
    return result.finish_reasons or ["stop"] * len(result.texts)


@router.get("/v1/models")
def list_models(request: Request, gateway: GatewayDep) -> dict[str, Any]:
    allowed = key_models(request)  # an issued key sees the models it may call
    return {
        "object": "list",
        "data": [
            {"id": m["id"], "object": "model", "created": 0, "owned_by": "llmrl", **m}
            for m in gateway.models()
            if allowed is None or m["id"] in allowed
        ],
    }


async def _generation_answer(
    request: Request,
    gateway: Gateway,
    body: dict[str, Any],
    prompt: dict[str, Any],
    kind: str,
    choice: Callable[[str], dict[str, Any]],
) -> JSONResponse:
    """What chat and plain completions share: generate from `prompt` (messages or a prompt) and
    the body's generation fields, then answer in OpenAI's shape, `choice(text)` giving each
    choice's content (a message or a text)."""
    context = request_context(request, body, gateway.settings.default_model)
    generate = GenerateRequest(**prompt, **_generation_fields(body), **context)
    result = await unless_disconnected(request, gateway.generate, generate)
    choices = [
        {"index": i, **choice(text), "finish_reason": reason, "logprobs": None}
        for i, (text, reason) in enumerate(zip(result.texts, _reasons(result), strict=True))
    ]
    prefix = "chatcmpl" if kind == "chat.completion" else "cmpl"
    response = {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": result.model,
        "choices": choices,
        "usage": _usage(result),
        "llmrl": llmrl_extra(result, context["run_id"]),
    }
    return JSONResponse(response, headers=cache_header(result))


@router.post(
    "/v1/chat/completions",
    openapi_extra=declared_body({"messages": MESSAGES, **GENERATION}, ("messages",)),
)
async def chat_completions(request: Request, gateway: GatewayDep) -> JSONResponse:
    body = await json_body(request)
    _refuse_unsupported(body)
    if "messages" not in body:
        raise InvalidRequestError("messages is required", "messages")
    return await _generation_answer(
        request, gateway, body, {"messages": text_content(body["messages"])}, "chat.completion",
        lambda text: {"message": {"role": "assistant", "content": text}},
    )  # fmt: skip


@router.post(
    "/v1/completions", openapi_extra=declared_body({"prompt": STRING, **GENERATION}, ("prompt",))
)
async def completions(request: Request, gateway: GatewayDep) -> JSONResponse:
    body = await json_body(request)
    _refuse_unsupported(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise InvalidRequestError("prompt must be a string (or a list of one string)", "prompt")
    return await _generation_answer(
        request, gateway, body, {"prompt": prompt}, "text_completion",
        lambda text: {"text": text},
    )  # fmt: skip


@router.post(
    "/v1/embeddings",
    openapi_extra=declared_body(
        {
            "input": {"anyOf": [STRING, {"type": "array", "items": STRING}]},
            "model": STRING,
            "encoding_format": {"enum": ["float", "base64"]},
            "metadata": METADATA,
        },
        ("input",),
    ),
)
async def embeddings(request: Request, gateway: GatewayDep) -> JSONResponse:
    body = await json_body(request)
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
    context = request_context(request, body, gateway.settings.default_embedding_model)
    embed = EmbedRequest(texts=texts, model=body.get("model"), **context)  # type: ignore[arg-type]
    result = await in_thread(gateway.embed, embed)
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
        "llmrl": llmrl_extra(result, context["run_id"]),
    }
    return JSONResponse(response, headers=cache_header(result))
