"""RL policy training jobs on the learner service (`POST /policy-jobs`).

Recipes train their RL policies here in service mode: the job carries the simulator and
gateway addresses, the learner trains (Stable-Baselines3) and writes the model where the job
says (the artifact volume that the orchestrator and workers share). `run_on_learner` is the
client side a recipe phase calls: submit, follow the progress, return the result or raise.
Job kinds come from recipes: today When2Ask's `PolicyTrainingJob` (asking policy, never-ask).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from llmrl.learner.jobs import FineTuneJobs
from llmrl.recipes.when2ask.training import PolicyTrainingJob, train_policy

POLL_S = 0.5


def policy_jobs(jobs_dir: Any) -> FineTuneJobs:
    """The learner's policy-training job runner (one job at a time)."""
    return FineTuneJobs(jobs_dir, run=lambda job, report: train_policy(job, report), id_prefix="rl")


def policy_jobs_router(jobs: FineTuneJobs) -> Any:
    """POST / (202, the job), GET / (all), GET /{job_id} (status, progress, result or error)."""
    from fastapi import APIRouter, HTTPException

    router = APIRouter(tags=["policy training"])

    @router.post("", status_code=202, summary="Start an RL policy training job")
    def start_job(job: PolicyTrainingJob) -> dict[str, Any]:
        return jobs.submit(job)

    @router.get("", summary="Every policy training job")
    def list_jobs() -> list[dict[str, Any]]:
        return jobs.list()

    @router.get("/{job_id}", summary="One policy training job")
    def get_job(job_id: str) -> dict[str, Any]:
        found = jobs.get(job_id)
        if found is None:
            raise HTTPException(404, f"job_id: no policy training job {job_id!r}")
        return found

    return router


def run_on_learner(
    job: PolicyTrainingJob,
    on_progress: Callable[[int], None] | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run `job` on the learner service and wait for it; returns its result."""
    import httpx

    from llmrl.common.config import http_url

    base = (url or http_url("learner")).rstrip("/")
    with httpx.Client(base_url=base, timeout=30.0) as client:
        response = client.post("/policy-jobs", json=job.model_dump())
        if response.status_code != 202:
            raise RuntimeError(
                f"the learner at {base} refused the training job ({response.status_code}): "
                f"{response.text[:500]}"
            )
        job_id = response.json()["job_id"]
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        reported = 0
        while True:
            state = client.get(f"/policy-jobs/{job_id}").json()
            done = int(state.get("progress", 0))
            if on_progress is not None and done > reported:
                on_progress(done - reported)
                reported = done
            if state["status"] == "succeeded":
                return state["result"]
            if state["status"] == "failed":
                raise RuntimeError(f"learner job {job_id} failed: {state.get('error')}")
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"learner job {job_id} still {state['status']}")
            time.sleep(POLL_S)
