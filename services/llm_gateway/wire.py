"""Conversions between the gateway's dataclasses and the gRPC messages (both directions), so
that the gRPC client and the in-process client hand back identical results."""

from __future__ import annotations

from typing import Any

import numpy as np

from llmrl.llm_gateway.api_types import (
    ChatResult,
    EmbedRequest,
    EmbedResult,
    GenerateRequest,
    GuidedLines,
    ScoreRequest,
    ScoreResult,
)
from llmrl.llm_gateway.v1 import llm_gateway_pb2 as pb

_POLICY_TO_PB = {"auto": pb.CACHE_AUTO, "bypass": pb.CACHE_BYPASS, "always": pb.CACHE_ALWAYS}
_POLICY_FROM_PB = {v: k for k, v in _POLICY_TO_PB.items()}


# -- requests ----------------------------------------------------------------------------------
def _context(request: GenerateRequest | ScoreRequest | EmbedRequest) -> pb.RequestContext:
    context = pb.RequestContext(run_id=request.run_id, tag=request.tag)
    if request.cache in _POLICY_TO_PB:
        context.cache = _POLICY_TO_PB[request.cache]
    if request.timeout_s is not None:
        context.timeout_s = request.timeout_s
    return context


def _context_fields(context: pb.RequestContext) -> dict[str, Any]:
    return {
        "run_id": context.run_id or "default",
        "tag": context.tag,
        "cache": _POLICY_FROM_PB.get(context.cache, "auto"),
        "timeout_s": context.timeout_s if context.HasField("timeout_s") else None,
    }


def _messages(messages: list[dict[str, str]]) -> list[pb.ChatMessage]:
    return [pb.ChatMessage(role=m.get("role", ""), content=m.get("content", "")) for m in messages]


def _messages_from(messages: Any) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


def generate_to_pb(request: GenerateRequest) -> pb.GatewayRequest:
    params = pb.GenerationParams(
        n=request.n,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        stop=request.stop or [],
    )
    if request.seed is not None:
        params.seed = request.seed
    guided = request.guided_lines
    if guided is not None:
        params.guided_lines.choices.extend(guided.choices)
        params.guided_lines.numbered = guided.numbered
        if guided.max_lines is not None:
            params.guided_lines.max_lines = guided.max_lines
    model, context = request.model or "", _context(request)
    if request.messages is not None:
        chat = pb.ChatRequest(
            model=model, messages=_messages(request.messages), params=params, context=context
        )
        return pb.GatewayRequest(chat=chat)
    completion = pb.CompletionRequest(
        model=model, prompt=request.prompt or "", params=params, context=context
    )
    return pb.GatewayRequest(completion=completion)


def _guided_from(message: pb.GuidedLines) -> GuidedLines:
    return GuidedLines(
        choices=list(message.choices),
        numbered=message.numbered,
        max_lines=message.max_lines if message.HasField("max_lines") else None,
    )


def generate_from_pb(message: pb.ChatRequest | pb.CompletionRequest) -> GenerateRequest:
    params = message.params
    fields: dict[str, Any] = {
        "n": params.n if params.HasField("n") else 1,
        "temperature": params.temperature if params.HasField("temperature") else 0.0,
        "top_p": params.top_p if params.HasField("top_p") else 1.0,
        "max_tokens": params.max_tokens if params.HasField("max_tokens") else 128,
        "stop": list(params.stop) or None,
        "seed": params.seed if params.HasField("seed") else None,
        "guided_lines": _guided_from(params.guided_lines)
        if params.HasField("guided_lines")
        else None,
    }
    if isinstance(message, pb.ChatRequest):
        fields["messages"] = _messages_from(message.messages)
    else:
        fields["prompt"] = message.prompt
    return GenerateRequest(
        model=message.model or None, **fields, **_context_fields(message.context)
    )


def score_to_pb(request: ScoreRequest) -> pb.GatewayRequest:
    message = pb.ScoreRequest(
        model=request.model or "", candidates=request.candidates, context=_context(request)
    )
    if isinstance(request.prompt, str):
        message.text = request.prompt
    else:
        message.chat.messages.extend(_messages(request.prompt))
    return pb.GatewayRequest(score=message)


def score_from_pb(message: pb.ScoreRequest) -> ScoreRequest:
    prompt: Any = (
        _messages_from(message.chat.messages) if message.HasField("chat") else message.text
    )
    return ScoreRequest(
        prompt=prompt,
        candidates=list(message.candidates),
        model=message.model or None,
        **_context_fields(message.context),
    )


def embed_to_pb(request: EmbedRequest) -> pb.GatewayRequest:
    message = pb.EmbedRequest(
        model=request.model or "", texts=request.texts, context=_context(request)
    )
    return pb.GatewayRequest(embed=message)


def embed_from_pb(message: pb.EmbedRequest) -> EmbedRequest:
    return EmbedRequest(
        texts=list(message.texts), model=message.model or None, **_context_fields(message.context)
    )


# -- results -------------------------------------------------------------------------------------
def _generation_fields(result: ChatResult) -> dict[str, Any]:
    return {
        "texts": result.texts,
        "model": result.model,
        "prompt_tokens": result.prompt_tokens,
        "completion_tokens": result.completion_tokens,
        "cost_usd": result.cost_usd,
        "cached": result.cached,
        "latency_s": result.latency_s,
        "finish_reasons": result.finish_reasons,
    }


def chat_result_to_pb(result: ChatResult) -> pb.ChatResponse:
    return pb.ChatResponse(**_generation_fields(result))


def completion_result_to_pb(result: ChatResult) -> pb.CompletionResponse:
    return pb.CompletionResponse(**_generation_fields(result))


def chat_result_from_pb(message: pb.ChatResponse | pb.CompletionResponse) -> ChatResult:
    """Either answer to a generation: the two messages carry the same fields."""
    return ChatResult(
        texts=list(message.texts),
        model=message.model,
        prompt_tokens=message.prompt_tokens,
        completion_tokens=message.completion_tokens,
        cost_usd=message.cost_usd,
        cached=message.cached,
        latency_s=message.latency_s,
        finish_reasons=list(message.finish_reasons),
    )


def score_result_to_pb(result: ScoreResult) -> pb.ScoreResponse:
    return pb.ScoreResponse(
        logprobs=result.logprobs,
        token_logprobs=[pb.TokenLogprobs(values=row) for row in result.token_logprobs],
        model=result.model,
        prompt_tokens=result.prompt_tokens,
        cost_usd=result.cost_usd,
        cached=result.cached,
        latency_s=result.latency_s,
    )


def score_result_from_pb(message: pb.ScoreResponse) -> ScoreResult:
    return ScoreResult(
        logprobs=list(message.logprobs),
        token_logprobs=[list(row.values) for row in message.token_logprobs],
        model=message.model,
        prompt_tokens=message.prompt_tokens,
        cost_usd=message.cost_usd,
        cached=message.cached,
        latency_s=message.latency_s,
    )


def embed_result_to_pb(result: EmbedResult) -> pb.EmbedResponse:
    vectors = np.ascontiguousarray(result.vectors, dtype="<f4")
    return pb.EmbedResponse(
        rows=vectors.shape[0],
        dim=vectors.shape[1] if vectors.ndim > 1 else 0,
        vectors=vectors.tobytes(),
        model=result.model,
        prompt_tokens=result.prompt_tokens,
        cost_usd=result.cost_usd,
        cached=result.cached,
        latency_s=result.latency_s,
    )


def embed_result_from_pb(message: pb.EmbedResponse) -> EmbedResult:
    vectors = np.frombuffer(message.vectors, dtype="<f4").astype(np.float32)
    return EmbedResult(
        vectors=vectors.reshape(message.rows, message.dim),
        model=message.model,
        prompt_tokens=message.prompt_tokens,
        cost_usd=message.cost_usd,
        cached=message.cached,
        latency_s=message.latency_s,
    )


_TOTALS = (
    "requests",
    "cache_hits",
    "model_calls",
    "errors",
    "prompt_tokens",
    "completion_tokens",
    "cost_usd",
    "latency_s",
)


def usage_to_pb(usage: dict[str, Any]) -> pb.UsageResponse:
    message = pb.UsageResponse(
        run_id=usage["run_id"],
        totals=pb.UsageTotals(**{k: usage[k] for k in _TOTALS}),
        tags={tag: pb.UsageTotals(**totals) for tag, totals in usage["tags"].items()},
    )
    budget = usage["budget"]
    for field_name, key in (
        ("budget_usd", "usd"),
        ("budget_calls", "calls"),
        ("usd_remaining", "usd_remaining"),
        ("calls_remaining", "calls_remaining"),
    ):
        if budget[key] is not None:
            setattr(message, field_name, budget[key])
    return message


def _totals(message: pb.UsageTotals) -> dict[str, Any]:
    return {k: getattr(message, k) for k in _TOTALS}


def usage_from_pb(message: pb.UsageResponse) -> dict[str, Any]:
    def optional(name: str) -> Any:
        return getattr(message, name) if message.HasField(name) else None

    return {
        "run_id": message.run_id,
        **_totals(message.totals),
        "budget": {
            "usd": optional("budget_usd"),
            "calls": optional("budget_calls"),
            "usd_remaining": optional("usd_remaining"),
            "calls_remaining": optional("calls_remaining"),
        },
        "tags": {tag: _totals(totals) for tag, totals in sorted(message.tags.items())},
    }


def models_to_pb(models: list[dict[str, Any]]) -> pb.ListModelsResponse:
    return pb.ListModelsResponse(
        models=[
            pb.ModelInfo(
                id=m["id"],
                backend=m["backend"],
                prompt_usd_per_1m=m["prompt_usd_per_1m"],
                completion_usd_per_1m=m["completion_usd_per_1m"],
                fallback=m["fallback"] or "",
                is_default=m["default"],
            )
            for m in models
        ]
    )


def models_from_pb(message: pb.ListModelsResponse) -> list[dict[str, Any]]:
    return [
        {
            "id": m.id,
            "backend": m.backend,
            "prompt_usd_per_1m": m.prompt_usd_per_1m,
            "completion_usd_per_1m": m.completion_usd_per_1m,
            "fallback": m.fallback or None,
            "default": m.is_default,
        }
        for m in message.models
    ]
