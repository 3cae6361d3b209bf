"""`llmrl serve learner`: fine-tuning jobs over REST (local LoRA SFT or the OpenAI API).

    POST /jobs         a `llmrl.learner.jobs.FineTuneRequest` -> 202 {"job_id", "status", ...}
    GET  /jobs[/{id}]  status, result (adapter directory and `<model>:<adapter>@<version>`, or
                       the OpenAI model id) or error

plus /health, /metrics and /info. RL training (PPO, DQN...) still runs inside recipes through
the learner's Python modules; this service runs the LLM fine-tuning jobs. Adapters are written
under `$LLMRL_HOME/adapters/<model>/<adapter>/<version>/`, where the LLM gateway finds them.
Settings: `jobs_dir` (default `$LLMRL_HOME/learner/jobs`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.config import home_dir
from llmrl.common.metrics import basic_app, serve_app

DESCRIPTION = "Trains and versions policies. REST API: LLM fine-tuning jobs."
INFO = {
    "api": "v1",
    "endpoints": ["/health", "/metrics", "/info", "POST /jobs", "GET /jobs", "GET /jobs/{job_id}"],
    "training_api": "fine-tuning jobs (local LoRA SFT, OpenAI); RL training runs inside recipes",
}
SETTINGS = ("jobs_dir",)


def create_app(jobs_dir: str | Path | None = None) -> Any:
    from llmrl.learner.jobs import FineTuneJobs, jobs_router

    app = basic_app("learner", DESCRIPTION, INFO)
    jobs = FineTuneJobs(jobs_dir or home_dir() / "learner" / "jobs")
    app.state.jobs = jobs
    app.router.add_event_handler("shutdown", jobs.close)
    app.include_router(jobs_router(jobs), prefix="/jobs")
    return app


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown learner settings {unknown}; allowed: {', '.join(SETTINGS)}")
    serve_app(create_app(settings.get("jobs_dir")), "learner", host, port)
