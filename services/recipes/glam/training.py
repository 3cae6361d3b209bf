"""GLAM's training as a self-contained job: the learner service runs it in service mode (the
policy job kind "glam", `POST /policy-jobs`), the recipe runs it in-process in embedded mode;
either way the same function trains, with the learner's `llm-ppo` algorithm stepping the
simulator (in-process, or the service at `simulator` over gRPC). The adapter line is
`adapter_versions(model, adapter)` under the process's LLMRL_HOME, which the gateway serves as
`<model>:<adapter>@<version>`: in service mode the learner and the gateway must share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmrl.common.registry import registry


class GlamTrainingJob(BaseModel):
    """Everything needed to train one GLAM adapter anywhere; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["glam"] = Field("glam", description="the learner's policy job kind")
    env: str = Field(..., description="registered text env id")
    model: str = Field(..., description="gateway model name of the base LLM")
    adapter: str = Field(..., description="the adapter line's name")
    steps: int = Field(..., ge=1, description="env steps to train for (all envs)")
    num_envs: int = Field(16, ge=1, le=256)
    rollout_steps: int = Field(40, ge=1)
    minibatch_size: int = Field(64, ge=1)
    update_epochs: int = Field(4, ge=1)
    learning_rate: float = Field(1e-4, gt=0)
    lora_layers: int | None = Field(None, ge=1)
    reduction: Literal["sum", "mean"] = "sum"
    seed: int = Field(0, ge=0)
    tensorboard_dir: str | None = None
    simulator: str | None = Field(None, description="simulator address; None: in-process")


@registry.register_policy_job("glam", request=GlamTrainingJob)
def train_glam(
    job: GlamTrainingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """LLM-PPO on the job's env; resumes the adapter line where a killed run left it.
    Returns the served model name of the last version and where training stood."""
    from llmrl.learner.adapters import adapter_versions

    checkpoint = registry.get_algorithm("llm-ppo").train(
        job.env,
        adapter_versions(job.model, job.adapter),
        on_progress=on_progress,
        base_model=job.model,
        total_timesteps=job.steps,
        num_envs=job.num_envs,
        num_steps=job.rollout_steps,
        minibatch_size=job.minibatch_size,
        update_epochs=job.update_epochs,
        learning_rate=job.learning_rate,
        lora_layers=job.lora_layers,
        reduction=job.reduction,
        seed=job.seed,
        address=job.simulator,
        tensorboard_dir=job.tensorboard_dir,
    )
    return {
        "served_model": f"{job.model}:{job.adapter}@{checkpoint.path.name}",
        "checkpoint": str(checkpoint.path),
        "update": checkpoint.result.get("update"),
        "global_step": checkpoint.result.get("global_step"),
    }
