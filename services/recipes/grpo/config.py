"""The recipe `grpo`'s config: every key with its description; bad values name the key."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import (
    Coefficient,
    Episodes,
    Frames,
    LearningRate,
    LlmBatch,
    LoraRank,
    Seed,
    SeedOffset,
    Updates,
    limit,
)
from llmrl.common.names import ModelName
from llmrl.recipes.config import RecipeConfig, registered_env
from llmrl.recipes.glam.config import GLAM_ENVS

METHODS = ("zero-shot", "base", "grpo", "glam")
# the glam recipe's keys this recipe sets itself, so both methods share them
SHARED_WITH_GLAM = (
    "env",
    "model",
    "train_steps",
    "eval_episodes",
    "eval_seed_offset",
    "max_steps",
    "greedy",
    "seed",
    "methods",
)


class GrpoConfig(RecipeConfig):
    env: str = Field("BabyAIText-GoToLocalS5N2", description="Registered text env to train on.")
    model: ModelName = Field(
        "smollm2",
        description="Gateway model name of the base LLM (its local weights are trained; the "
        "zero-shot and GLAM methods use it through the gateway).",
    )
    hf_model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A Hugging Face model id (or directory) to train with GRPO instead of "
        "`model`'s weights; GPU only (device=cuda). The zero-shot and GLAM methods still use "
        "`model`.",
    )
    methods: list[str] = Field(
        ["zero-shot", "base", "grpo", "glam"],
        description="Methods to run and compare: zero-shot (the base LLM scoring GLAM's prompt "
        "through the gateway, glam's zero-shot row), base (the untrained LLM generating in "
        "GRPO's transcript form), grpo (its LoRA trained by TRL's GRPOTrainer), glam "
        "(the glam recipe's LLM-PPO with a value head, same env, budget and held-out seeds).",
    )
    train_steps: Frames = Field(
        3840, ge=1, description="Training budget in env steps, for GRPO and for GLAM."
    )
    group_size: LlmBatch = Field(
        8,
        ge=2,
        description="G: episodes per group, all on the same env seed; TRL's num_generations "
        "(the group's returns give each episode its advantage).",
    )
    groups_per_step: LlmBatch = Field(
        1, ge=1, description="Groups (seeds) per GRPO optimizer step."
    )
    learning_rate: LearningRate = Field(1e-4, gt=0, description="AdamW learning rate of the LoRA.")
    lora_r: LoraRank = Field(16, ge=1, description="LoRA rank (alpha = 2 x rank), as glam's.")
    lora_layers: Annotated[int | None, limit("layers")] = Field(
        2,
        ge=1,
        description="Adapt only the top N decoder layers (glam's default); None: all layers.",
    )
    beta: Coefficient = Field(
        0.0, ge=0, description="TRL's KL coefficient against the base model (0: no KL term)."
    )
    temperature: Coefficient = Field(
        1.0, gt=0, description="Sampling temperature of training rollouts (over legal tokens)."
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "group", description="TRL's scale_rewards: divide advantages by the group's std or not."
    )
    eval_every: Updates = Field(
        4, ge=1, description="Save and evaluate the adapter every this many GRPO steps."
    )
    eval_episodes: Episodes = Field(50, description="Held-out episodes per evaluation.")
    eval_seed_offset: SeedOffset = Field(
        1_000_000, description="Seed offset of the held-out evaluation episodes (glam's)."
    )
    max_steps: Annotated[int | None, limit("episode_steps")] = Field(
        None,
        ge=1,
        description="Cap on steps per episode, training and evaluation (None: the env's own). "
        "A GRPO episode is one sequence of ~35 tokens a step.",
    )
    greedy: bool = Field(
        False,
        description="Evaluate greedily (argmax); False: sample, seeded by the episode (glam's).",
    )
    device: Literal["cpu", "cuda"] = Field(
        "cpu", description="Where GRPO trains and its policy is evaluated."
    )
    use_vllm: bool = Field(
        False,
        description="Generate training rollouts with TRL's vLLM (colocate mode); needs "
        "device=cuda and vllm installed. Not runnable on a CPU.",
    )
    threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="torch threads for GRPO's training (None: torch's default); the table's "
        "notes record the count used.",
    )
    glam: dict[str, Any] = Field(
        default_factory=dict,
        description="Other settings of the glam method (any key of the glam recipe's config "
        f"but {', '.join(SHARED_WITH_GLAM)}, which this recipe sets), e.g. ppo: {{num_envs: 8}}.",
    )
    seed: Seed = Field(0, description="Seed of the training and of the evaluations.")

    @field_validator("env")
    @classmethod
    def _env_is_registered(cls, value: str) -> str:
        return registered_env(value, "glam", GLAM_ENVS)

    @field_validator("methods")
    @classmethod
    def _methods_are_known(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in METHODS]
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(f"expected distinct methods among {', '.join(METHODS)}, got {value}")
        return value

    @field_validator("glam")
    @classmethod
    def _glam_settings(cls, value: dict[str, Any]) -> dict[str, Any]:
        from llmrl.recipes.glam.config import GlamConfig

        shared = sorted(set(value) & set(SHARED_WITH_GLAM))
        if shared:
            raise ValueError(f"{shared} are this recipe's own keys; set them at the top level")
        GlamConfig(**value)  # its own errors name the key (glam.<key>)
        return value

    @model_validator(mode="after")
    def _gpu_options(self) -> GrpoConfig:
        if self.use_vllm and self.device != "cuda":
            raise ValueError("use_vllm: TRL's vLLM generation needs device=cuda")
        if self.hf_model is not None and self.device != "cuda":
            raise ValueError("hf_model: another model than the gateway's is a GPU option")
        return self

    def glam_config(self) -> Any:
        """The glam recipe's config of this run's GLAM and zero-shot methods."""
        from llmrl.recipes.glam.config import GlamConfig

        shared = {key: getattr(self, key) for key in SHARED_WITH_GLAM if key != "methods"}
        return GlamConfig(**shared, methods=["zero-shot", "glam"], **self.glam)
