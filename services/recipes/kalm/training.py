"""KALM's two training jobs, self-contained: the learner service runs them in service mode
(policy job kinds "kalm-grounding" and "kalm-offline", `POST /policy-jobs`), the recipe runs
them in-process in embedded mode; either way the same function trains.

* `kalm-grounding`: grounding SFT of the LLM on offline datasets (`kalm-grounding` algorithm);
* `kalm-offline`: an offline RL policy (d3rlpy: bc, cql, td3+bc, iql, awac) on offline
  datasets, the observation extended with each episode's instruction embedding (an `.npy`
  of shape (episodes, D) over the datasets' episodes in order).

Datasets are `OfflineDataset` files (`llmrl.common.offline_dataset`); each job writes one
version (`version`) of the checkpoint line at `model_path`, replacing an interrupted one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmrl.common.bounds import Seed, Updates
from llmrl.common.names import Name
from llmrl.common.paths import confined_field
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import setting_field
from llmrl.learner.algorithms.offline_rl import OfflineRLConfig
from llmrl.recipes.kalm.grounding_sft import GroundingSftConfig


def grounding_setting(name: str, description: str | None = None, **bounds: float) -> Any:
    """A field that passes kalm-grounding's setting `name` on (default, bounds, description)."""
    return setting_field(GroundingSftConfig, name, description, **bounds)


def offline_setting(name: str, description: str | None = None, **bounds: float) -> Any:
    """A field that passes the offline RL algorithms' setting `name` on."""
    return setting_field(OfflineRLConfig, name, description, **bounds)


def load_datasets(paths: list[str]) -> Any:
    """The datasets at `paths`, concatenated (a bad file's error names it and the field)."""
    from llmrl.common.offline_dataset import OfflineDataset

    datasets = [OfflineDataset.load(path) for path in paths]
    return datasets[0] if len(datasets) == 1 else OfflineDataset.concatenate(*datasets)


def load_embeddings(path: str, episodes: int) -> np.ndarray:
    """The (episodes, D) float32 instruction embeddings at `path` (a plain .npy)."""
    try:
        embeddings = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"embeddings: {path} is not a readable .npy array ({exc})") from None
    if embeddings.ndim != 2 or len(embeddings) != episodes:
        raise ValueError(
            f"embeddings: {path} has shape {embeddings.shape}; expected ({episodes}, D), one "
            "row per episode of the datasets"
        )
    return embeddings.astype(np.float32)


class KalmGroundingJob(BaseModel):
    """Grounding SFT of `base_model` on `datasets`; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["kalm-grounding"] = Field("kalm-grounding", description="the job kind")
    datasets: list[str] = Field(..., min_length=1, description="OfflineDataset .npz files")
    model_path: str = Field(..., description="the grounded model's checkpoint line (directory)")
    version: Name = Field("1", description="version to write")
    base_model: str = grounding_setting("base_model", "gateway model name or model directory")
    steps: Updates = Field(300, ge=1)
    batch_size: int = grounding_setting("batch_size")
    learning_rate: float = grounding_setting("learning_rate")
    lora_r: int = grounding_setting("lora_r")
    lora_layers: int | None = grounding_setting("lora_layers")
    base_layers: int | None = grounding_setting("base_layers")
    numbers: Literal["tokens", "text"] = grounding_setting("numbers")
    state_target: Literal["absolute", "delta"] = grounding_setting("state_target")
    action_size: int | None = grounding_setting("action_size", "discrete actions (CLEVR-Robot: 40)")
    state_loss_weight: float = grounding_setting("state_loss_weight", le=1e4)
    action_loss_weight: float = grounding_setting("action_loss_weight", le=1e4)
    tasks: list[str] | None = Field(
        None, description="grounding tasks mixed in SFT (default: all four, KALM's)"
    )
    seed: Seed = 0
    tensorboard_dir: str | None = grounding_setting("tensorboard_dir")

    _paths_confined = field_validator("datasets")(confined_field)

    @field_validator("tasks")
    @classmethod
    def _tasks_are_known(cls, value: list[str] | None) -> list[str] | None:
        from llmrl.recipes.kalm.grounding_sft import check_tasks

        if value is not None:
            check_tasks(value)
        return value


# offline_rl settings a kalm-offline job sets from its own fields
JOB_OWNED_OFFLINE_SETTINGS = {"steps", "batch_size", "action_size", "seed", "tensorboard_dir"}


class KalmOfflineJob(BaseModel):
    """An offline RL policy on `datasets` (+ instruction embeddings); unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["kalm-offline"] = Field("kalm-offline", description="the job kind")
    algorithm: Literal["bc", "cql", "td3+bc", "iql", "awac"] = Field(
        ..., description="registered offline RL algorithm"
    )
    datasets: list[str] = Field(..., min_length=1, description="OfflineDataset .npz files")
    embeddings: str | None = Field(None, description=".npy (episodes, D) instruction embeddings")
    model_path: str = Field(..., description="the policy's checkpoint line (directory)")
    version: Name = Field("1", description="version to write")
    steps: int = Field(5000, ge=1, le=10_000_000)
    batch_size: int = offline_setting("batch_size", le=65536)
    action_size: int | None = offline_setting("action_size", "discrete actions (CLEVR-Robot: 40)")
    seed: Seed = 0
    tensorboard_dir: str | None = offline_setting("tensorboard_dir")
    offline: dict[str, Any] = Field(
        default_factory=dict,
        description="further settings of the offline algorithm (learning_rate, hidden_units, "
        "alpha, gamma, steps_per_epoch: `llmrl.learner.algorithms.offline_rl.OfflineRLConfig`)",
    )

    _paths_confined = field_validator("datasets", "embeddings")(confined_field)

    @field_validator("offline")
    @classmethod
    def _offline_settings_are_known(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Checked when the job is parsed (a 422 naming `offline.<key>`), not when it runs: the
        keys the job sets from its own fields are refused, the rest go through offline_rl's
        own checks."""
        from pydantic import ValidationError

        from llmrl.learner.algorithms.base import settings_error

        known = sorted(set(OfflineRLConfig.model_fields) - JOB_OWNED_OFFLINE_SETTINGS)
        for key in value:
            if key not in known:
                raise ValueError(
                    f"offline.{key}: not an offline RL setting a job may set; known: "
                    f"{', '.join(known)}"
                )
        try:
            OfflineRLConfig.model_validate(value)
        except ValidationError as error:
            raise ValueError(settings_error(OfflineRLConfig, error, "offline.")) from None
        return value


@registry.register_policy_job("kalm-grounding", request=KalmGroundingJob)
def train_grounding(
    job: KalmGroundingJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """Grounding SFT; returns the checkpoint and its first and last losses."""
    from llmrl.learner.versions import Versions

    dataset = load_datasets(job.datasets)
    checkpoint = registry.get_algorithm("kalm-grounding").train(
        dataset,
        Versions(job.model_path),
        version=job.version,
        on_progress=on_progress,
        base_model=job.base_model,
        steps=job.steps,
        batch_size=job.batch_size,
        learning_rate=job.learning_rate,
        lora_r=job.lora_r,
        lora_layers=job.lora_layers,
        base_layers=job.base_layers,
        numbers=job.numbers,
        state_target=job.state_target,
        action_size=job.action_size,
        state_loss_weight=job.state_loss_weight,
        action_loss_weight=job.action_loss_weight,
        **({"tasks": list(job.tasks)} if job.tasks is not None else {}),
        seed=job.seed,
        tensorboard_dir=job.tensorboard_dir,
    )
    return {"checkpoint": str(checkpoint.path), **checkpoint.result}


@registry.register_policy_job("kalm-offline", request=KalmOfflineJob)
def train_offline(
    job: KalmOfflineJob, on_progress: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """One offline RL policy; returns its checkpoint and training figures."""
    from llmrl.learner.versions import Versions

    dataset = load_datasets(job.datasets)
    embeddings = (
        None if job.embeddings is None else load_embeddings(job.embeddings, dataset.num_episodes)
    )
    checkpoint = registry.get_algorithm(job.algorithm).train(
        dataset,
        Versions(job.model_path),
        version=job.version,
        on_progress=on_progress,
        instruction_embeddings=embeddings,
        steps=job.steps,
        batch_size=job.batch_size,
        action_size=job.action_size,
        seed=job.seed,
        tensorboard_dir=job.tensorboard_dir,
        **job.offline,
    )
    return {"checkpoint": str(checkpoint.path), "algorithm": job.algorithm, **checkpoint.result}
