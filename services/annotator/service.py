"""`llmrl serve annotator`: episode logs in, fine-tuning datasets out (REST); fine-tuning jobs
are handed to the learner service, which trains.

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
`learner_url`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.config import check_settings, home_dir, http_url
from llmrl.common.metrics import basic_app, serve_app
from llmrl.learner.jobs import FineTuneRequest  # the POST body (FastAPI resolves it by name)

DESCRIPTION = "Turns episode logs into fine-tuning datasets and starts fine-tuning jobs."
INFO = {
    "api": "v1",
    "endpoints": [
        "/health", "/metrics", "/info", "POST /datasets/bootstrap",
        "POST /datasets/self-training", "POST /finetune/jobs", "GET /finetune/jobs",
        "GET /finetune/jobs/{job_id}",
    ],
}  # fmt: skip
SETTINGS = ("jobs_dir", "learner_url")


class DatasetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: list[str] = Field(..., min_length=1, description="episode logs (JSONL files)")
    out_dir: str = Field(..., min_length=1, description="where to write the dataset")
    name: str = Field("dataset", pattern=r"^[A-Za-z0-9_.-]+$", description="file name stem")


class SelfTrainingRequest(DatasetRequest):
    min_placement_gain: int = Field(1, ge=0, description="objects a kept query must place")


def create_app(jobs_dir: str | Path | None = None, learner_url: str | None = None) -> Any:
    from fastapi import HTTPException

    from llmrl.annotator import datasets
    from llmrl.annotator.learner_jobs import LearnerJobs

    app = basic_app("annotator", DESCRIPTION, INFO)
    jobs = LearnerJobs(
        jobs_dir or home_dir() / "annotator" / "jobs", learner_url or http_url("learner")
    )
    app.state.jobs = jobs
    app.router.add_event_handler("shutdown", jobs.close)

    def build(kind: str, request: DatasetRequest, **options: Any) -> dict[str, Any]:
        missing = [path for path in request.episodes if not Path(path).is_file()]
        if missing:
            raise HTTPException(400, f"episodes: no such file(s): {', '.join(missing)}")
        builder = (
            datasets.build_bootstrap_dataset
            if kind == "bootstrap"
            else datasets.build_self_training_dataset
        )
        try:
            built = builder(request.episodes, request.out_dir, request.name, **options)
        except (ValueError, KeyError, TypeError) as exc:  # logs that are not episode records
            raise HTTPException(400, f"episodes: cannot build the {kind} dataset: {exc}") from None
        except OSError as exc:
            raise HTTPException(400, f"out_dir: cannot write there: {exc}") from None
        return {"data": built["data"], "stats_file": built["stats"], "stats": built["stats_data"]}

    @app.post("/datasets/bootstrap", tags=["datasets"], summary="SFT data from demonstrations")
    def bootstrap(request: DatasetRequest) -> dict[str, Any]:
        return build("bootstrap", request)

    @app.post("/datasets/self-training", tags=["datasets"], summary="Self-training selection")
    def self_training(request: SelfTrainingRequest) -> dict[str, Any]:
        return build("self-training", request, min_placement_gain=request.min_placement_gain)

    app.include_router(finetune_router(jobs), prefix="/finetune/jobs")
    return app


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
    app = create_app(settings.get("jobs_dir"), settings.get("learner_url"))
    serve_app(app, "annotator", host, port)
