"""A scripted OpenAI-compatible chat server on 127.0.0.1: it answers each chat request with the
next answer of its script (then "mission complete") and records the prompts it was sent."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request


@dataclass
class Script:
    answers: list[str] = field(default_factory=list)
    prompts: list[list[dict[str, str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def create_scripted_llm(script: Script) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        with script.lock:
            script.prompts.append(body["messages"])
            text = script.answers.pop(0) if script.answers else "mission complete"
        return {
            "id": "chatcmpl-scripted", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }  # fmt: skip

    return app
