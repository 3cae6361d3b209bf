"""KALM's grounding SFT: the LLM learns an environment's states and actions (family
`grounding-sft`, registered `kalm-grounding`).

Learns from a dataset (`source`: an `OfflineDataset`, or several) and saves each version as a
LoRA adapter beside the grounding layers (`llmrl.recipes.kalm.grounded_lm`: slot embeddings,
state/action/stop heads, the state normaliser), under the adapter line the caller names
(`adapter_versions(model, adapter)` keeps it beside the other adapters). The gateway cannot
serve it (its inputs are not only tokens): imagination loads it in-process.

The loop reads top to bottom: episodes as (instruction, states, actions); the model with a
fresh LoRA (or the latest version's, to continue); then AdamW, each batch a uniform mix of the
four tasks over random episodes (`task_items`), TensorBoard `losses/<task loss>` and
`charts/SPS`, progress per step; then save.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import (
    Coefficient,
    EpisodeSteps,
    LearningRate,
    LlmBatch,
    LoraRank,
    Updates,
    limit,
)
from llmrl.common.devices import Device, device_field
from llmrl.common.numerics import adam_options
from llmrl.common.registry import registry
from llmrl.learner.algorithms.base import (
    Algorithm,
    AlgorithmSettings,
    Progress,
    validate_settings,
)
from llmrl.learner.algorithms.offline_rl import check_action_size
from llmrl.learner.versions import Checkpoint, Versions, as_versions, find_checkpoint
from llmrl.recipes.kalm.grounded_lm import (
    TASKS,
    GroundedLM,
    GroundingSpec,
    check_number_settings,
    episode_arrays,
    task_items,
)

NAME = "kalm-grounding"


class GroundingSftConfig(AlgorithmSettings):
    """Every setting of `kalm-grounding`, with its description and bounds (a bad or unknown one
    is a ValueError naming it: `validate_settings`)."""

    base_model: str = Field(
        "smollm2", description="a gateway model served from local weights, or a directory"
    )
    steps: Updates = Field(200, gt=0, description="optimizer steps")
    batch_size: LlmBatch = Field(8, gt=0, description="grounding examples per step")
    learning_rate: LearningRate = Field(3e-4, gt=0, description="the LoRA's learning rate")
    head_learning_rate: LearningRate = Field(
        1e-3, gt=0, description="the slot layers' and heads' learning rate"
    )
    # KALM sums its losses unweighted (1), but a normalised state's MSE is far smaller than the
    # action and text cross-entropies, so under the shared gradient clip a small model learns
    # the dynamics slowly (README, kalm)
    state_loss_weight: Coefficient = Field(
        1.0, gt=0, description="the state MSE's weight in the summed loss (KALM: 1)"
    )
    action_loss_weight: Coefficient = Field(
        1.0, gt=0, description="the action head's loss's weight in the summed loss (KALM: 1)"
    )
    lora_r: LoraRank = Field(16, gt=0, description="LoRA rank")
    lora_layers: Annotated[int | None, limit("layers")] = Field(
        None, gt=0, description="adapt only the top N decoder layers (None: all)"
    )
    base_layers: Annotated[int | None, limit("layers")] = Field(
        None,
        gt=0,
        description="keep only the base model's first N decoder layers (small CPUs; None: all)",
    )
    numbers: str = Field(
        "tokens", description="tokens: placeholder slots (KALM); text: the numbers-as-text ablation"
    )
    state_target: str = Field(
        "absolute",
        description="what the state head predicts: absolute (the state) or delta (its change; "
        "numbers=tokens only)",
    )
    tasks: list[str] = Field(
        default_factory=lambda: list(TASKS),
        strict=False,  # a tuple is a list of tasks too
        description=f"the grounding tasks mixed uniformly: any of {', '.join(TASKS)}",
    )
    max_episode_steps: EpisodeSteps = Field(
        20, gt=0, description="longer episodes are cut to their first steps (trajectory tasks)"
    )
    action_size: int | None = Field(
        None, gt=0, description="discrete actions (None: the dataset's largest id + 1)"
    )
    seed: int = Field(0, ge=0, description="seed of the batches and the initialisation")
    continue_training: bool = Field(False, description="start from the line's latest version")
    tensorboard_dir: str | None = Field(None, description="TensorBoard directory (None: none)")
    device: Device = device_field("trains")

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, value: list[str]) -> list[str]:
        check_tasks(value)
        return value

    @model_validator(mode="after")
    def _numbers_fit_the_state_target(self) -> GroundingSftConfig:
        check_number_settings(self.numbers, self.state_target)
        return self


# what the continued version's model is made of: a change would be silently ignored
FIXED_ON_CONTINUE = (
    "base_model", "numbers", "state_target", "base_layers", "lora_r", "lora_layers",
)  # fmt: skip


def check_tasks(tasks: Sequence[str]) -> None:
    """The grounding tasks to mix: a non-empty list of known ones (an empty list is refused,
    not read as the default)."""
    if not tasks or any(t not in TASKS for t in tasks):
        raise ValueError(f"tasks: expected a non-empty list of {', '.join(TASKS)}, got {tasks}")


def check_sources_agree(sources: Sequence[Any]) -> None:
    """One grounding learns one state and action layout: datasets that differ are refused
    before training (they would fail at their first batch, mid-run)."""
    first = sources[0]
    kinds = {True: "discrete", False: "continuous (Box)"}
    for i, dataset in enumerate(sources[1:], start=1):
        if bool(dataset.discrete) != bool(first.discrete):
            raise ValueError(
                f"source[{i}]: {kinds[bool(dataset.discrete)]} actions, but source[0]'s are "
                f"{kinds[bool(first.discrete)]}; ground one action kind per model"
            )
        for field in ("observations", "actions"):
            ours, theirs = getattr(dataset, field).shape[1:], getattr(first, field).shape[1:]
            if ours != theirs:
                raise ValueError(
                    f"source[{i}].{field}: shape {ours} per step, but source[0]'s is {theirs}"
                )


def check_continuable(latest: Checkpoint, cfg: dict[str, Any], spec: GroundingSpec) -> None:
    """continue_training keeps the latest version's model: a setting or dataset layout that
    would change it is refused rather than ignored."""
    before = latest.config
    for key in FIXED_ON_CONTINUE:
        if key in before and before[key] != cfg[key]:
            raise ValueError(
                f"{key}: {cfg[key]!r} differs from {before[key]!r} of version "
                f"{latest.version} that continue_training continues; keep it, or train a new "
                "line (continue_training=false)"
            )
    saved = latest.result.get("spec", {})
    for key in ("state_dim", "action_size", "action_dim"):
        if key in saved and saved[key] != getattr(spec, key):
            raise ValueError(
                f"source: {key} {getattr(spec, key)} differs from {saved[key]} of version "
                f"{latest.version} that continue_training continues"
            )


def dataset_episodes(sources: Sequence[Any], max_steps: int) -> list[tuple[str, Any, Any]]:
    """(instruction, states T+1, actions T) of every episode with at least one action."""
    episodes = []
    for dataset in sources:
        for episode in dataset.episodes():
            states, actions = episode_arrays(episode)
            if len(actions) == 0:
                continue
            if len(actions) > max_steps:
                states, actions = states[: max_steps + 1], actions[:max_steps]
            episodes.append((episode.instruction, states, actions))
    if not episodes:
        raise ValueError("source: no episode with at least one step to ground the model on")
    return episodes


class GroundingSft(Algorithm):
    """Grounding SFT on offline datasets; settings: `GroundingSftConfig`'s fields."""

    settings_model = GroundingSftConfig

    name = NAME
    family = "grounding-sft"
    learns_from = "dataset"

    def train(
        self,
        source: Any,
        checkpoints: Versions | str | Path,
        *,
        version: str | int | None = None,
        on_progress: Progress | None = None,
        **settings: Any,
    ) -> Checkpoint:
        import torch

        cfg = validate_settings(NAME, GroundingSftConfig, settings).model_dump()
        sources = list(source) if isinstance(source, list | tuple) else [source]
        check_sources_agree(sources)
        rng = random.Random(int(cfg["seed"]))
        torch.manual_seed(int(cfg["seed"]))
        episodes = dataset_episodes(sources, int(cfg["max_episode_steps"]))

        line = as_versions(checkpoints)
        latest = line.latest() if cfg["continue_training"] and line.versions() else None
        if latest is not None:
            self.check_written_by_me(latest)  # before its metadata is trusted
            if cfg["action_size"] is None:  # the continued model's
                cfg["action_size"] = latest.result.get("spec", {}).get("action_size")
        first = sources[0]
        discrete = bool(first.discrete)
        if discrete:
            for dataset in sources:
                check_action_size(dataset, cfg["action_size"])
            seen = max(int(np.max(a)) for _, _, a in episodes) + 1
            spec = GroundingSpec(
                state_dim=int(first.observations.shape[1]),
                action_size=int(cfg["action_size"] or seen),
                numbers=cfg["numbers"],
                base_layers=cfg["base_layers"],
                state_target=cfg["state_target"],
            )
        else:
            spec = GroundingSpec(
                state_dim=int(first.observations.shape[1]),
                action_dim=int(first.actions.shape[1]),
                numbers=cfg["numbers"],
                base_layers=cfg["base_layers"],
                state_target=cfg["state_target"],
            )
        if latest is not None:
            check_continuable(latest, cfg, spec)
            model = GroundedLM.load(latest.path, device=cfg["device"])
        else:
            all_states = np.concatenate([s for _, s, _ in episodes])
            model = GroundedLM.create(
                str(cfg["base_model"]),
                spec,
                lora_r=int(cfg["lora_r"]),
                lora_layers=cfg["lora_layers"],
                states=all_states,
                device=cfg["device"],
            )
        model.train()
        optimizer = torch.optim.AdamW(
            [
                {"params": [p for p in model.lm.parameters() if p.requires_grad]},
                {
                    "params": [p for p in model.modules.parameters() if p.requires_grad],
                    "lr": float(cfg["head_learning_rate"]),
                },
            ],
            lr=float(cfg["learning_rate"]),
            **adam_options(),
        )
        writer = None
        if cfg["tensorboard_dir"]:
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(str(cfg["tensorboard_dir"]))

        weights = {
            "state": float(cfg["state_loss_weight"]),
            "action": float(cfg["action_loss_weight"]),
        }
        started, history = time.perf_counter(), []
        for step in range(1, int(cfg["steps"]) + 1):
            batch = []
            for _ in range(int(cfg["batch_size"])):
                instruction, states, actions = episodes[rng.randrange(len(episodes))]
                task = cfg["tasks"][rng.randrange(len(cfg["tasks"]))]
                batch.append(task_items(task, instruction, states, actions, rng))
            loss, parts = model.loss(batch, weights)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            history.append({"loss": float(loss.detach()), **parts})
            if writer is not None:
                writer.add_scalar("losses/total", float(loss.detach()), step)
                for key, value in parts.items():
                    writer.add_scalar(f"losses/{key}", value, step)
                writer.add_scalar("charts/SPS", step / (time.perf_counter() - started), step)
            if on_progress is not None:
                on_progress(1)
        if writer is not None:
            writer.close()
        model.train(False)

        def mean_of(rows: list[dict[str, float]]) -> dict[str, float]:
            keys = {k for row in rows for k in row}
            return {k: float(np.mean([r[k] for r in rows if k in r])) for k in sorted(keys)}

        window = max(1, len(history) // 10)
        result = {
            "steps": len(history),
            "episodes": len(episodes),
            "seconds": time.perf_counter() - started,
            "first_losses": mean_of(history[:window]),
            "last_losses": mean_of(history[-window:]),
            "spec": {
                "state_dim": spec.state_dim,
                "action_size": spec.action_size,
                "action_dim": spec.action_dim,
                "numbers": spec.numbers,
            },
        }
        saved = {k: v for k, v in cfg.items() if k != "tensorboard_dir"}
        return line.save(model.save, self.name, version, config=saved, result=result)

    def load(self, checkpoint: Checkpoint | str | Path) -> GroundedLM:
        found = find_checkpoint(checkpoint)
        self.check_written_by_me(found)
        model = GroundedLM.load(found.path)
        model.train(False)
        return model


registry.register_algorithm(
    NAME,
    "KALM grounding SFT: LoRA + state/action slots and heads on the four grounding tasks",
    family="grounding-sft",
    learns_from="dataset",
)(GroundingSft())
