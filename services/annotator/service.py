"""`llmrl serve annotator`: episode logs in, fine-tuning datasets and jobs out (REST).

    POST /datasets/bootstrap      {"episodes": [JSONL paths], "out_dir": DIR, "name": "bootstrap"}
    POST /datasets/self-training  {..., "min_placement_gain": 1}
        -> {"data": DIR/NAME.jsonl (OpenAI chat fine-tuning format), "stats": {...}}
    POST /finetune/jobs           a `llmrl.learner.jobs.FineTuneRequest` (local LoRA SFT, or the
                                  OpenAI fine-tuning API) -> 202 {"job_id", "status", ...}
    GET  /finetune/jobs[/{id}]    status, result (adapter / model id) or error

plus /health, /metrics and /info. Paths are on the service's machine (the platform shares a
filesystem between services; episode logs are the runs' `episodes/*.jsonl`). Bad requests get
a 4xx naming the field; a failing job is reported as failed and the service keeps serving.
Settings: `jobs_dir` (default `$LLMRL_HOME/annotator/jobs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.config import home_dir
from llmrl.common.metrics import basic_app, serve_app

DESCRIPTION = "Turns episode logs into fine-tuning datasets and starts fine-tuning jobs."
INFO = {
    "api": "v1",
    "endpoints": [
        "/health", "/metrics", "/info", "POST /datasets/bootstrap",
        "POST /datasets/self-training", "POST /finetune/jobs", "GET /finetune/jobs",
        "GET /finetune/jobs/{job_id}",
    ],
}  # fmt: skip
SETTINGS = ("jobs_dir",)


class DatasetRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    episodes: list[str] = Field(..., min_length=1, description="episode logs (JSONL files)")
    out_dir: str = Field(..., min_length=1, description="where to write the dataset")
    name: str = Field("dataset", pattern=r"^[A-Za-z0-9_.-]+$", description="file name stem")


class SelfTrainingRequest(DatasetRequest):
    min_placement_gain: int = Field(1, ge=0, description="objects a kept query must place")


def create_app(jobs_dir: str | Path | None = None) -> Any:
    from fastapi import HTTPException

    from llmrl.annotator import datasets
    from llmrl.learner.jobs import BackgroundJobs, jobs_router

    app = basic_app("annotator", DESCRIPTION, INFO)
    jobs = BackgroundJobs(jobs_dir or home_dir() / "annotator" / "jobs")
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

    app.include_router(jobs_router(jobs), prefix="/finetune/jobs")
    return app


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown annotator settings {unknown}; allowed: {', '.join(SETTINGS)}")
    serve_app(create_app(settings.get("jobs_dir")), "annotator", host, port)
