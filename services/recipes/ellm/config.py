"""The recipe `ellm`'s config: every key with its description; bad values name the key."""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import Episodes, Frames, Seed
from llmrl.common.names import ModelName
from llmrl.learner.algorithms.base import setting_field
from llmrl.recipes.config import RecipeConfig, confined_kwargs, registered_env
from llmrl.recipes.ellm.dqn import DqnEllmConfig
from llmrl.recipes.ellm.intrinsic import (
    CONDITIONING,
    LLM_SUGGESTERS,
    METHODS,
    profile_for_env,
)
from llmrl.recipes.ellm.ppo import EllmPpoSettings, rollout_sizes
from llmrl.recipes.ellm.reward import DEFAULT_THRESHOLD
from llmrl.recipes.ellm.training import AGENTS, TASKS


def dqn_setting(name: str) -> Any:
    """A key passed on to dqn-ellm's setting `name` (agent=dqn): its default, bounds and help."""
    own = f"dqn-ellm: {DqnEllmConfig.model_fields[name].description}."
    return setting_field(DqnEllmConfig, name, own)


class EllmConfig(RecipeConfig):
    env: str = Field(
        "CrafterText",
        description="Registered env to train in: CrafterText-like, or Housekeep (its numeric "
        "knowledge for the agent, the housekeep-llm / housekeep-oracle suggesters for the "
        "methods ellm / oracle; all-goals has no Housekeep suggester).",
    )
    env_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="The env's own settings (e.g. {length: 10000}; Housekeep: {data_dir: ..., "
        "split: val, max_steps: 60}).",
    )
    methods: list[str] = Field(
        ["ellm", "oracle", "none"],
        description=f"Intrinsic rewards to pretrain with and compare: any of {', '.join(METHODS)}"
        " (ellm: LLM suggestions; oracle, all-goals: scripted suggestions; rnd, knn: novelty;"
        " none: no reward at all).",
    )
    suggester: str = Field(
        "llm-score",
        description=f"The LLM suggester of the method ellm: {' or '.join(LLM_SUGGESTERS)} "
        "(llm: the model writes goals; llm-score: it ranks the goal list by log-likelihood).",
    )
    model: ModelName = Field("smollm2", description="Gateway model name of the LLM suggester.")
    embed_model: ModelName | None = Field(
        None, description="Gateway embedding model (None: the gateway's default, all-MiniLM-L6-v2)."
    )
    threshold: float = Field(
        DEFAULT_THRESHOLD,
        ge=0,
        le=1,
        description="Cosine similarity between the transition caption and a suggestion above "
        "which the suggestion pays, in [0, 1] (0.8: measured for all-MiniLM-L6-v2, see "
        "llmrl.recipes.ellm.reward).",
    )
    conditioning: str = Field(
        "none",
        description=f"Goal conditioning of the agent: {', '.join(CONDITIONING)} (suggestions: "
        "the mean embedding of the current suggestions; caption: the state caption's).",
    )
    pretrain_frames: Frames = Field(
        200_000, ge=1, description="Pretraining budget per method, in frames (env steps)."
    )
    num_envs: int = Field(8, ge=1, le=256, description="Envs stepped together.")
    eval_episodes: Episodes = Field(20, description="Episodes per evaluation.")
    eval_epsilon: float = Field(0.05, ge=0, le=1, description="Epsilon of evaluation episodes.")
    finetune_task: str | None = Field(
        None,
        description=f"The fine-tuning task (task reward only): {', '.join(TASKS)} (tidy: "
        "Housekeep's, paying the change in correctly placed objects); None: 'place crafting "
        "table' on Crafter, 'tidy' on Housekeep.",
    )
    finetune_frames: Frames = Field(
        50_000, ge=0, description="Fine-tuning budget, in frames (0: no fine-tuning)."
    )
    finetune_from: list[str] = Field(
        ["ellm"],
        description="Pretrained methods to fine-tune (each beside one agent from scratch).",
    )
    agent: str = Field(
        "dqn",
        description=f"The learner of every method: {' or '.join(AGENTS)} (dqn: dqn-ellm, ELLM's "
        "double dueling 3-step DQN, with the settings below; ppo: Stable-Baselines3 PPO, "
        "MultiInputPolicy, with `ppo`'s settings). Report rows of ppo read 'method (ppo)'.",
    )
    ppo: EllmPpoSettings = Field(
        default_factory=EllmPpoSettings,
        description="agent=ppo: SB3 PPO's own settings (e.g. {n_steps: 128, learning_rate: "
        "0.0003, ent_coef: 0.01}); defaults n_steps 128, batch_size 256, lr 3e-4, SB3's others.",
    )
    # agent=dqn: passed on to dqn-ellm as they are (its defaults, bounds and help)
    learning_rate: float = dqn_setting("learning_rate")
    buffer_size: int = dqn_setting("buffer_size")
    learning_starts: int = dqn_setting("learning_starts")
    exploration_fraction: float = dqn_setting("exploration_fraction")
    target_network_frequency: int = dqn_setting("target_network_frequency")
    train_frequency: int = dqn_setting("train_frequency")
    hidden: int = dqn_setting("hidden")
    checkpoint_every: Frames = Field(
        20_000, ge=1, description="Frames between checkpoints (a killed run resumes there)."
    )
    seed: Seed = Field(0, description="Seed of the worlds, the agents and the evaluations.")

    @field_validator("env")
    @classmethod
    def _env_is_registered(cls, value: str) -> str:
        return registered_env(value)

    @field_validator("env_kwargs")
    @classmethod
    def _paths_are_confined(cls, value: dict[str, Any]) -> dict[str, Any]:
        return confined_kwargs(value, "env_kwargs")

    @field_validator("methods")
    @classmethod
    def _methods_are_known(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in METHODS]
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(
                f"expected a non-empty list of distinct methods among {', '.join(METHODS)}, "
                f"got {value}"
            )
        return value

    @field_validator("suggester")
    @classmethod
    def _suggester_is_known(cls, value: str) -> str:
        if value not in LLM_SUGGESTERS:
            raise ValueError(
                f"unknown suggester {value!r}; the method ellm takes one of "
                f"{', '.join(LLM_SUGGESTERS)} (oracle and all-goals are methods of their own)"
            )
        return value

    @field_validator("conditioning")
    @classmethod
    def _conditioning_is_known(cls, value: str) -> str:
        if value not in CONDITIONING:
            raise ValueError(f"expected one of {', '.join(CONDITIONING)}, got {value!r}")
        return value

    @field_validator("agent")
    @classmethod
    def _agent_is_known(cls, value: str) -> str:
        if value not in AGENTS:
            raise ValueError(f"unknown agent {value!r}; agents: {', '.join(AGENTS)}")
        return value

    @field_validator("finetune_task")
    @classmethod
    def _task_is_known(cls, value: str | None) -> str | None:
        if value is not None and value not in TASKS:
            raise ValueError(f"unknown fine-tune task {value!r}; tasks: {', '.join(TASKS)}")
        return value

    @model_validator(mode="after")
    def _fits_the_env(self) -> EllmConfig:
        """Methods and task of the env's family (Crafter or Housekeep)."""
        profile = profile_for_env(self.env)
        if self.finetune_task is None:
            self.finetune_task = profile.default_task
        elif self.finetune_task not in profile.tasks:
            raise ValueError(
                f"finetune_task: {self.finetune_task!r} is no task of {self.env}; its tasks: "
                f"{', '.join(profile.tasks)}"
            )
        unsupported = [
            m for m in self.methods if m not in ("rnd", "knn", "none", *profile.suggesters)
        ]
        if unsupported:
            raise ValueError(
                f"methods: {unsupported} have no suggester on {self.env}; its methods: "
                f"{', '.join(m for m in METHODS if m not in unsupported)}"
            )
        return self

    @model_validator(mode="after")
    def _settings_of_its_own_agent(self) -> EllmConfig:
        """The other agent's settings would be ignored without a word: refuse them."""
        if self.agent == "dqn" and self.ppo.model_fields_set:
            raise ValueError(
                f"ppo: PPO settings ({', '.join(sorted(self.ppo.model_fields_set))}) with agent "
                "'dqn'; set agent: ppo, or dqn-ellm's own settings (learning_rate, buffer_size...)"
            )
        if self.agent == "ppo":
            rollout_sizes(self.ppo, self.pretrain_frames, self.num_envs, "pretrain_frames")
            if self.finetune_frames > 0:
                rollout_sizes(self.ppo, self.finetune_frames, self.num_envs, "finetune_frames")
        return self

    @model_validator(mode="after")
    def _finetune_from_pretrained(self) -> EllmConfig:
        unknown = [m for m in self.finetune_from if m not in self.methods]
        if unknown:
            raise ValueError(
                f"finetune_from: {unknown} are not among the pretrained methods {self.methods}"
            )
        return self
