"""`llmrl serve annotator`: episode logs in, fine-tuning datasets out (REST); fine-tuning jobs
are handed to the learner service, which trains.

    GET  /datasets                the registered dataset builders: name, description and the
                                  JSON schema of their request
    POST /datasets/{name}         runs builder `name` on its request (recipes register builders:
                                  `registry.register_dataset`), e.g. LLM-Personalize's
    POST /datasets/bootstrap      {"episodes": [JSONL paths], "out_dir": DIR, "name": "bootstrap"}
    POST /datasets/self-training  {..., "min_placement_gain": 1}
        -> {"data": DIR/NAME.jsonl (OpenAI chat fine-tuning format), "stats": {...}}
    POST /finetune/jobs           a `llmrl.learner.jobs.FineTuneRequest` (local LoRA SFT, or the
                                  OpenAI fine-tuning API), checked here, then started on the
                                  learner (its `POST /jobs`) -> 202, the learner's job
    GET  /finetune/jobs[/{id}]    the jobs started here, as the learner reports them: status,
                                  progress, result (adapter / model id) or error

plus /health, /metrics and /info. The annotator never trains in its own process: the learner
(`llmrl serve learner`; `learner_url`, default $LLMRL_LEARNER_URL, else the learner's host and
port) does. While the learner is unreachable the job endpoints answer 503 saying what to start,
and the dataset endpoints keep working. (Embedded runs need neither service: the recipes build
datasets and train in-process.) Paths are on the service's machine (the platform shares a
filesystem between services; episode logs are the runs' `episodes/*.jsonl`). Bad requests get
a 4xx naming the field; a failing job is reported as failed and the service keeps serving.
Settings: `jobs_dir` (the ids of the jobs started here; default `$LLMRL_HOME/annotator/jobs`),
`learner_url`, `max_body_bytes` (default $LLMRL_MAX_BODY_BYTES, else 4 MiB).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.auth import add_bearer_auth, configured_token
from llmrl.common.config import check_settings, home_dir, http_url
from llmrl.common.http import configured_max_body_bytes
from llmrl.common.metrics import basic_app, serve_app
from llmrl.learner.jobs import FineTuneRequest  # the POST body (FastAPI resolves it by name)

DESCRIPTION = "Turns episode logs into fine-tuning datasets and starts fine-tuning jobs."
INFO = {
    "api": "v1",
    "endpoints": [
        "/health", "/metrics", "/info", "GET /datasets", "POST /datasets/{name}",
        "POST /datasets/bootstrap", "POST /datasets/self-training", "POST /finetune/jobs",
        "GET /finetune/jobs", "GET /finetune/jobs/{job_id}",
    ],
}  # fmt: skip
SETTINGS = ("jobs_dir", "learner_url", "max_body_bytes")


def create_app(
    jobs_dir: str | Path | None = None,
    learner_url: str | None = None,
    max_body_bytes: int | None = None,
    token: str | None = None,
) -> Any:
    from llmrl.annotator.learner_jobs import LearnerJobs

    app = basic_app("annotator", DESCRIPTION, INFO, max_body_bytes)
    jobs = LearnerJobs(
        jobs_dir or home_dir() / "annotator" / "jobs", learner_url or http_url("learner")
    )
    app.state.jobs = jobs
    app.router.add_event_handler("shutdown", jobs.close)
    app.include_router(datasets_router(), prefix="/datasets")
    app.include_router(finetune_router(jobs), prefix="/finetune/jobs")
    add_bearer_auth(app, token)
    return app


def datasets_router() -> Any:
    """GET / (the registered builders) and POST /{name} (run one on its request): a body that
    its request model refuses is a 422 naming the field, as FastAPI answers, and a builder's
    `DatasetError` a 400 naming the field."""
    from fastapi import APIRouter, Body, HTTPException
    from fastapi.exceptions import RequestValidationError
    from pydantic import ValidationError

    from llmrl.annotator.datasets import DatasetError
    from llmrl.common.registry import registry

    router = APIRouter(tags=["datasets"])

    @router.get("", summary="The registered dataset builders and their requests")
    def list_builders() -> list[dict[str, Any]]:
        return [
            {
                "name": entry.name,
                "description": entry.description,
                "request": model.model_json_schema() if model else None,
            }
            for entry in registry.entries("dataset").values()
            for model in [entry.metadata.get("request")]
        ]

    @router.post("/{name}", summary="Build a dataset with a registered builder")
    def build(name: str, body: dict[str, Any] = Body(...)) -> dict[str, Any]:
        builders = registry.entries("dataset")
        if name not in builders:
            known = ", ".join(builders) or "(none)"
            raise HTTPException(404, f"name: no dataset builder {name!r}; builders: {known}")
        entry = builders[name]
        model = entry.metadata.get("request")
        if model is None:  # a programming error of the recipe, said plainly
            raise HTTPException(500, f"dataset builder {name!r} was registered without request=")
        try:
            request = model.model_validate(body)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            raise RequestValidationError(
                [{**error, "loc": ("body", *error["loc"])} for error in errors]
            ) from None
        try:
            return entry.obj(request)
        except DatasetError as exc:
            raise HTTPException(400, str(exc)) from None

    return router


def finetune_router(jobs: Any) -> Any:
    """POST / and GET /[{job_id}] over `jobs` (a `LearnerJobs`): the learner's answers, its
    refusals with their status, and 503 while it is unreachable."""
    from collections.abc import Callable

    from fastapi import APIRouter, HTTPException

    from llmrl.annotator.learner_jobs import LearnerRefused, LearnerUnavailable

    router = APIRouter(tags=["fine-tuning"])

    def answer(call: Callable[[], Any]) -> Any:
        try:
            return call()
        except LearnerUnavailable as exc:
            raise HTTPException(503, str(exc)) from None
        except LearnerRefused as exc:
            raise HTTPException(exc.status_code, exc.detail) from None

    @router.post("", status_code=202, summary="Start a fine-tuning job on the learner")
    def start_job(request: FineTuneRequest) -> dict[str, Any]:
        return answer(lambda: jobs.submit(request))

    @router.get("", summary="The fine-tuning jobs started here, as the learner reports them")
    def list_jobs() -> list[dict[str, Any]]:
        return answer(jobs.list)

    @router.get("/{job_id}", summary="One fine-tuning job: status, progress, result or error")
    def get_job(job_id: str) -> dict[str, Any]:
        job = answer(lambda: jobs.get(job_id))
        if job is None:
            raise HTTPException(404, f"job_id: no fine-tuning job {job_id!r} started here")
        return job

    return router


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    check_settings("annotator", settings, SETTINGS)
    limit = configured_max_body_bytes(settings.get("max_body_bytes"))
    app = create_app(
        settings.get("jobs_dir"), settings.get("learner_url"), limit, configured_token()
    )
    serve_app(app, "annotator", host, port)
