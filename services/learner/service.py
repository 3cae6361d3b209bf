"""`llmrl serve learner`: fine-tuning jobs over REST (local LoRA SFT or the OpenAI API).

    POST /jobs         a `llmrl.learner.jobs.FineTuneRequest` -> 202 {"job_id", "status", ...}
    GET  /jobs[/{id}]  status, progress (local training steps), result (adapter directory and
                       `<model>:<adapter>@<version>`, or the OpenAI model id) or error
    POST /policy-jobs  an RL training job of a registered kind (`register_policy_job`; the
                       body's `kind` picks it, e.g. "when2ask": the asking policy or baseline)
    GET  /policy-jobs[/{id}]  status, progress (steps), result or error

plus /health, /metrics and /info. The annotator's `POST /finetune/jobs` lands here too; in
embedded mode recipes call the same training functions in-process. Jobs train with algorithms
looked up by name (`llmrl.learner.algorithms`), which save versioned checkpoints; adapters are
written under `$LLMRL_HOME/adapters/<model>/<adapter>/<version>/`, where the LLM gateway finds
them. Starting needs none of the recipes' packages: policy job kinds load when a job arrives.
Settings: `jobs_dir` (default `$LLMRL_HOME/learner/jobs`), `max_body_bytes` (default
$LLMRL_MAX_BODY_BYTES, else 4 MiB), `cancel_grace_s` (seconds a cancelled job gets to stop at
its next progress report before its process is killed, default 5).

Each job runs in a child process of its own (`llmrl.learner.job_process`), so a cancelled job
always frees the slot, even one that never reports (loading a model, a long first update).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.common.auth import add_bearer_auth, configured_token
from llmrl.common.config import check_settings, home_dir
from llmrl.common.http import configured_max_body_bytes
from llmrl.common.metrics import basic_app, serve_app

DESCRIPTION = "Trains and versions policies. REST API: LLM fine-tuning and RL policy jobs."
INFO = {
    "api": "v1",
    "endpoints": [
        "/health",
        "/metrics",
        "/info",
        "POST /jobs",
        "GET /jobs",
        "GET /jobs/{job_id}",
        "POST /policy-jobs",
        "GET /policy-jobs",
        "GET /policy-jobs/{job_id}",
    ],
    "training_api": "fine-tuning jobs (local LoRA SFT, OpenAI); RL policy jobs (SB3 PPO)",
}
SETTINGS = ("jobs_dir", "max_body_bytes", "cancel_grace_s")
CANCEL_GRACE_S = 5.0


def create_app(
    jobs_dir: str | Path | None = None,
    max_body_bytes: int | None = None,
    token: str | None = None,
    cancel_grace_s: float = CANCEL_GRACE_S,
) -> Any:
    from llmrl.learner.jobs import BackgroundJobs, jobs_router
    from llmrl.learner.policy_jobs import policy_jobs, policy_jobs_router

    jobs_dir = Path(jobs_dir or home_dir() / "learner" / "jobs")
    app = basic_app("learner", DESCRIPTION, INFO, max_body_bytes)
    jobs = BackgroundJobs(jobs_dir, cancel_grace_s=cancel_grace_s)
    app.state.jobs = jobs
    app.router.add_event_handler("shutdown", jobs.close)
    app.include_router(jobs_router(jobs), prefix="/jobs")
    rl_jobs = policy_jobs(jobs_dir / "policy", cancel_grace_s)
    app.state.policy_jobs = rl_jobs
    app.router.add_event_handler("shutdown", rl_jobs.close)
    app.include_router(policy_jobs_router(rl_jobs), prefix="/policy-jobs")
    add_bearer_auth(app, token)
    return app


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    check_settings("learner", settings, SETTINGS)
    limit = configured_max_body_bytes(settings.get("max_body_bytes"))
    grace = settings.get("cancel_grace_s", CANCEL_GRACE_S)
    if isinstance(grace, bool) or not isinstance(grace, int | float) or not 0 <= grace <= 3600:
        raise SystemExit(f"learner: cancel_grace_s: expected seconds in [0, 3600], got {grace!r}")
    app = create_app(settings.get("jobs_dir"), limit, configured_token(), float(grace))
    serve_app(app, "learner", host, port)
