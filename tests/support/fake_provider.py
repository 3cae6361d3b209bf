"""A small OpenAI-compatible server standing in for a remote provider (OpenAI, vLLM...).

It answers /v1/chat/completions, /v1/completions and /v1/embeddings deterministically
("echo: <last user message>") and can be told to misbehave per model id: fail the next k
requests with 429 + Retry-After or with 500, always fail, answer slowly, or echo the
caller's Authorization header in an error (a provider leaking the key back). It records every
request it receives.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


@dataclass
class Behaviour:
    fail_next: int = 0  # how many of the next requests fail
    status: int = 500  # with this status
    retry_after: str | None = None  # Retry-After header on failures
    always_fail: bool = False
    delay_s: float = 0.0
    leak_key: bool = False  # answer 401 quoting the Authorization header


@dataclass
class Received:
    model: str
    path: str
    at: float
    authorization: str
    body: dict[str, Any]


@dataclass
class ProviderState:
    behaviours: dict[str, Behaviour] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def requests_for(self, model: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.model == model]


def create_provider(state: ProviderState) -> FastAPI:
    app = FastAPI()

    async def misbehave(model: str, request: Request) -> JSONResponse | None:
        behaviour = state.behaviours.get(model, Behaviour())
        if behaviour.delay_s:
            await asyncio.sleep(behaviour.delay_s)
        if behaviour.leak_key:
            auth = request.headers.get("authorization", "")
            return JSONResponse(
                {"error": {"message": f"invalid key {auth}", "type": "auth"}}, status_code=401
            )
        failing = behaviour.always_fail
        with state.lock:
            if behaviour.fail_next > 0:
                behaviour.fail_next -= 1
                failing = True
        if failing:
            headers = {"retry-after": behaviour.retry_after} if behaviour.retry_after else {}
            return JSONResponse(
                {"error": {"message": "try later", "type": "server"}},
                status_code=behaviour.status,
                headers=headers,
            )
        return None

    async def record(request: Request) -> dict[str, Any]:
        body = await request.json()
        with state.lock:
            state.received.append(
                Received(
                    body.get("model", ""),
                    request.url.path,
                    time.monotonic(),
                    request.headers.get("authorization", ""),
                    body,
                )
            )
        return body

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await record(request)
        failure = await misbehave(body["model"], request)
        if failure is not None:
            return failure
        text = "echo: " + body["messages"][-1]["content"]
        choices = [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            for i in range(body.get("n") or 1)
        ]
        prompt_tokens = sum(len(m["content"].split()) + 3 for m in body["messages"])
        completion = len(text.split()) * len(choices)
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
        }

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        body = await record(request)
        failure = await misbehave(body["model"], request)
        if failure is not None:
            return failure
        text = " and so on"
        return {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "text": text, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> Any:
        body = await record(request)
        failure = await misbehave(body["model"], request)
        if failure is not None:
            return failure
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(t)), 1.0, 0.0]}
            for i, t in enumerate(inputs)
        ]
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
        }

    return app
