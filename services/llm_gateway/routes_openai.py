"""The OpenAI-compatible routes: POST /v1/chat/completions, POST /v1/completions,
POST /v1/embeddings, GET /v1/models, in OpenAI's shapes plus `usage` and an `llmrl` object."""

from __future__ import annotations

import asyncio
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
    MAX_LOGPROBS,
    MAX_N,
    MAX_TOKEN_ID,
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
    generated,
    in_thread,
    json_body,
    key_models,
    llmrl_extra,
    request_context,
    text_content,
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


# The legacy completions serve log-probs as OpenAI's legacy API does (`echo` + `logprobs`: the
# prompt's and the answer's tokens); chat completions do not.
COMPLETION_EXTRAS = ("logprobs", "echo")
TOKEN_IDS: dict[str, Any] = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0, "maximum": MAX_TOKEN_ID},
    "minItems": 1,
}
COMPLETION = {
    **GENERATION,
    "prompt": {
        "anyOf": [
            STRING,
            {"type": "array", "items": STRING, "minItems": 1},
            TOKEN_IDS,
            {"type": "array", "items": TOKEN_IDS, "minItems": 1},
        ]
    },
    "max_tokens": {"type": "integer", "minimum": 0, "maximum": MAX_TOKENS_LIMIT},
    "logprobs": {"type": "integer", "minimum": 0, "maximum": MAX_LOGPROBS},
    "echo": {"type": "boolean"},
}


def _refuse_unsupported(body: dict[str, Any], allowed: tuple[str, ...] = ()) -> None:
    for name, default in UNSUPPORTED.items():
        if name in allowed:
            continue
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
    prompts: list[dict[str, Any]],
    kind: str,
    choice: Callable[[str], dict[str, Any]],
    extra: dict[str, Any] | None = None,
) -> JSONResponse:
    """What chat and plain completions share: generate from each of `prompts` (messages or a
    prompt; several prompts are several requests, each cached and counted, answered together)
    and the body's generation fields (`extra`: a completion's echo and logprobs), then answer
    in OpenAI's shape, `choice(text)` giving each choice's content (a message or a text)."""
    context = request_context(request, body, gateway.settings.default_model)
    fields = {**_generation_fields(body), **(extra or {})}
    generates = [GenerateRequest(**prompt, **fields, **context) for prompt in prompts]
    results: list[ChatResult] = await asyncio.gather(
        *(generated(request, gateway, generate) for generate in generates)
    )
    choices = []
    for result in results:
        rows = result.logprobs or [None] * len(result.texts)
        for text, reason, logprobs in zip(result.texts, _reasons(result), rows, strict=True):
            choices.append(
                {"index": len(choices), **choice(text), "finish_reason": reason,
                 "logprobs": logprobs}
            )  # fmt: skip
    first = results[0]
    usage = {key: sum(_usage(result)[key] for result in results) for key in _usage(first)}
    llmrl = llmrl_extra(first, context["run_id"])
    if len(results) > 1:  # the answer is cached when every prompt's was
        llmrl["cached"] = all(result.cached for result in results)
        llmrl["cost_usd"] = sum(result.cost_usd for result in results)
        llmrl["latency_s"] = max(result.latency_s for result in results)
    prefix = "chatcmpl" if kind == "chat.completion" else "cmpl"
    response = {
        "id": f"{prefix}-{uuid.uuid4().hex}",
        "object": kind,
        "created": int(time.time()),
        "model": first.model,
        "choices": choices,
        "usage": usage,
        "llmrl": llmrl,
    }
    cached = all(result.cached for result in results)
    return JSONResponse(response, headers={"x-llmrl-cache": "hit" if cached else "miss"})


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
        request, gateway, body, [{"messages": text_content(body["messages"])}],
        "chat.completion", lambda text: {"message": {"role": "assistant", "content": text}},
    )  # fmt: skip


def _completion_prompts(body: dict[str, Any], most: int) -> list[str | list[int]]:
    """The prompts of a legacy completion: a string, token ids, or a list of either (each
    a request of its own), at most `most` (limits.max_candidates)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) or _is_token_ids(prompt):
        return [prompt]
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, str) or _is_token_ids(p) for p in prompt)
    ):
        if len(prompt) > most:
            raise InvalidRequestError(
                f"prompt: at most {most} prompts per request (limits.max_candidates); got "
                f"{len(prompt)}",
                "prompt",
            )
        return list(prompt)
    raise InvalidRequestError(
        "prompt must be a string, a list of token ids, or a non-empty list of either", "prompt"
    )


def _is_token_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


@router.post("/v1/completions", openapi_extra=declared_body(COMPLETION, ("prompt",)))
async def completions(request: Request, gateway: GatewayDep) -> JSONResponse:
    body = await json_body(request)
    _refuse_unsupported(body, COMPLETION_EXTRAS)
    prompts = _completion_prompts(body, gateway.settings.limits.max_candidates)
    extra = {"logprobs": body.get("logprobs"), "echo": bool(body.get("echo") or False)}
    if body.get("echo") not in (None, True, False):
        raise InvalidRequestError(f"echo must be true or false; got {body['echo']!r}", "echo")
    return await _generation_answer(
        request, gateway, body, [{"prompt": prompt} for prompt in prompts], "text_completion",
        lambda text: {"text": text}, extra,
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
