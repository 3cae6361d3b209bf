"""RL policy training jobs on the learner service (`POST /policy-jobs`).

Recipes train their RL policies here in service mode: the job carries the simulator and
gateway addresses, the learner trains (Stable-Baselines3) and writes the model where the job
says (the artifact volume that the orchestrator and workers share). `run_on_learner` is the
client side a recipe phase calls (see `llmrl.learner.client`).
Job kinds come from recipes: today When2Ask's `PolicyTrainingJob` (asking policy, never-ask).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmrl.learner.client import run_learner_job
from llmrl.learner.jobs import BackgroundJobs, jobs_router
from llmrl.recipes.when2ask.training import PolicyTrainingJob, train_policy


def policy_jobs(jobs_dir: Any) -> BackgroundJobs:
    """The learner's policy-training job runner (one job at a time)."""
    return BackgroundJobs(
        jobs_dir, run=lambda job, report: train_policy(job, report), id_prefix="rl"
    )


def policy_jobs_router(jobs: BackgroundJobs) -> Any:
    """POST / (202, the job), GET / (all), GET /{job_id} (status, progress, result or error)."""
    return jobs_router(jobs, PolicyTrainingJob, "policy training job", "policy training")


def run_on_learner(
    job: PolicyTrainingJob,
    on_progress: Callable[[int], None] | None = None,
    url: str | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Run `job` on the learner service and wait for it; returns its result."""
    return run_learner_job("/policy-jobs", job.model_dump(), on_progress, url, timeout_s)
