"""A stand-in for the parts of the OpenAI API that llmrl uses, on 127.0.0.1 (for the official
client).

`create_standin`: files + fine-tuning. POST /v1/files (multipart: file, purpose) stores the
file; POST /v1/fine_tuning/jobs creates a job that goes validating_files -> queued -> running
-> succeeded over successive GETs (or "failed" when the training file is not chat JSONL);
GET /v1/fine_tuning/jobs/{id} reads it. Requests without a bearer key are refused (401), as
OpenAI does.

`create_openai_api`: the same plus chat completions (what llm-personalize uses with
finetune_backend=openai), which answer "mission complete" and record the model, temperature
and seed of every request (so a test sees which model each phase planned with).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

PROGRESS = ("validating_files", "queued", "running", "succeeded")


@dataclass
class StandinState:
    files: dict[str, bytes] = field(default_factory=dict)
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    keys_seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _valid_chat_jsonl(content: bytes) -> str | None:
    try:
        lines = [json.loads(line) for line in content.decode().splitlines() if line.strip()]
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"invalid JSONL: {exc}"
    if not lines or any(not isinstance(x, dict) or "messages" not in x for x in lines):
        return "every line needs a messages list"
    return None


def _multipart(content_type: str, body: bytes) -> dict[str, tuple[str | None, bytes]]:
    """name -> (filename, bytes) of a multipart/form-data body (the stdlib's MIME parser)."""
    message = BytesParser(policy=HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[str(name)] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields


def create_standin(state: StandinState) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def require_key(request: Request, call_next: Any) -> Any:
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or len(auth) <= len("Bearer "):
            return JSONResponse({"error": {"message": "missing API key"}}, status_code=401)
        state.keys_seen.append(auth.removeprefix("Bearer "))
        return await call_next(request)

    @app.post("/v1/files")
    async def upload(request: Request) -> Any:
        fields = _multipart(request.headers.get("content-type", ""), await request.body())
        if "file" not in fields or fields.get("purpose", (None, b""))[1] != b"fine-tune":
            return JSONResponse({"error": {"message": "need file and purpose"}}, status_code=400)
        filename, content = fields["file"]
        with state.lock:
            file_id = f"file-{len(state.files) + 1}"
            state.files[file_id] = content
        return {
            "id": file_id, "object": "file", "bytes": len(content), "created_at": int(time.time()),
            "filename": filename, "purpose": "fine-tune", "status": "processed",
        }  # fmt: skip

    def job_view(job_id: str) -> dict[str, Any]:
        return dict(state.jobs[job_id])

    @app.post("/v1/fine_tuning/jobs")
    async def create_job(request: Request) -> Any:
        body = await request.json()
        file_id = body.get("training_file")
        if file_id not in state.files:
            return JSONResponse(
                {"error": {"message": f"training_file {file_id} not found"}}, status_code=400
            )
        with state.lock:
            job_id = f"ftjob-{len(state.jobs) + 1}"
            state.jobs[job_id] = {
                "id": job_id, "object": "fine_tuning.job", "model": body["model"],
                "created_at": int(time.time()), "training_file": file_id,
                "status": PROGRESS[0], "fine_tuned_model": None, "error": None,
                "suffix": body.get("suffix"), "method": body.get("method"),
                "organization_id": "org-standin", "result_files": [], "seed": body.get("seed", 0),
                "hyperparameters": {"n_epochs": "auto"}, "trained_tokens": None,
                "validation_file": None, "finished_at": None,
            }  # fmt: skip
            state.polls[job_id] = 0
        return job_view(job_id)

    @app.get("/v1/fine_tuning/jobs/{job_id}")
    async def retrieve(job_id: str) -> Any:
        if job_id not in state.jobs:
            return JSONResponse({"error": {"message": f"no job {job_id}"}}, status_code=404)
        with state.lock:
            job = state.jobs[job_id]
            state.polls[job_id] += 1
            if job["status"] not in ("succeeded", "failed"):
                problem = _valid_chat_jsonl(state.files[job["training_file"]])
                if problem:
                    job["status"] = "failed"
                    job["error"] = {"code": "invalid_file", "message": problem, "param": None}
                else:
                    job["status"] = PROGRESS[min(state.polls[job_id], len(PROGRESS) - 1)]
                if job["status"] == "succeeded":
                    suffix = job["suffix"] or "standin"
                    job["fine_tuned_model"] = f"ft:{job['model']}:org-standin:{suffix}:{job_id}"
                    job["trained_tokens"] = len(state.files[job["training_file"]]) // 4
                    job["finished_at"] = int(time.time())
        return job_view(job_id)

    return app


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
