"""A stand-in for the parts of the OpenAI API that llm-personalize uses with
finetune_backend=openai: files + fine-tuning (tests/openai_standin.py) and chat
completions, which answer "mission complete" and record the model, temperature and seed of
every request (so a test sees which model each phase planned with)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from openai_standin import StandinState, create_standin


@dataclass
class ChatLog:
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def create_openai_api(finetuning: StandinState, chats: ChatLog) -> FastAPI:
    app = create_standin(finetuning)  # its bearer-key check covers the chat route too

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        with chats.lock:
            chats.requests.append(
                {key: body.get(key) for key in ("model", "temperature", "seed", "messages")}
            )
        return {
            "id": "chatcmpl-standin", "object": "chat.completion", "created": 0,
            "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "mission complete"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        }  # fmt: skip

    return app
