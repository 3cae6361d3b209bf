"""The llm-personalize config: its keys (`llmrl recipes`), their checks, and the run's names.

Every key is documented by its field description; a bad value is a config error naming the
key. Stages are named "zero-shot", "bootstrap" (stage 0) and "round k" (`stage_name`).
"""

from __future__ import annotations

import os
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from llmrl.common.bounds import Episodes, EpisodeSteps, Seed, Tokens, limit
from llmrl.common.datasets import HOUSEKEEP, dataset_dir, missing_hint, placeholder
from llmrl.common.names import ModelName
from llmrl.learner.algorithms.base import setting_field
from llmrl.learner.algorithms.sft import SftSettings
from llmrl.recipes.config import RecipeConfig

ENV = "Housekeep"
PROCEDURAL = "procedural"
HELD_OUT_SEED_OFFSET = 100_000  # procedural houses: held-out houses never meet training ones
ZERO_SHOT = "zero-shot"
# planner seeds stay below 2**31 after the planner's `seed * 1000 + query number`
SAMPLING_SEEDS = 2_000_000
# an OpenAI model id (`gpt-4o-mini-2024-07-18`, `ft:gpt-4o-mini:org::id`): never a path or URL
OPENAI_MODEL_PATTERN = r"^[A-Za-z0-9_.:-]{1,256}$"


def default_data_dir() -> str:
    """The Housekeep data where `dataset_dir` finds it ($LLMRL_HOUSEKEEP_DATA, else
    `llmrl data get housekeep`'s copy under LLMRL_HOME), else its placeholder
    `$LLMRL_HOUSEKEEP_DATA`, left unresolved: a config validates on any machine and plans the
    same runs everywhere (`llmrl results list` counts kept runs on a machine without the data
    too), and a run there fails saying how to get the data. Generated houses are asked for
    (`data_dir: procedural`), never fallen back to."""
    found = dataset_dir("housekeep")
    return str(found) if found else placeholder(HOUSEKEEP)


def stage_name(stage: int | str) -> str:
    """ "zero-shot", "bootstrap" (stage 0), "round k"."""
    if stage == ZERO_SHOT:
        return ZERO_SHOT
    return "bootstrap" if int(stage) == 0 else f"round {stage}"


class LlmPersonalizeConfig(RecipeConfig):
    data_dir: str | None = Field(
        default_factory=default_data_dir,
        description="Housekeep data directory ('procedural' or null: generated houses; "
        "'$LLMRL_HOUSEKEEP_DATA', the default: the copy llmrl finds, as kept reports write "
        "it; a run on a machine without one fails saying how to get it).",
    )
    scenes: list[str] | None = Field(
        None, description="Scenes to personalise to (default: the data's val scenes)."
    )
    train_episodes: Episodes = Field(10, description="Training episodes per scene.")
    eval_episodes: Episodes = Field(5, description="Evaluation episodes per scene and split.")
    collect_samples: Annotated[int, limit("episodes")] = Field(
        4,
        ge=1,
        description="Sampled episodes per training episode in each self-training round (each "
        "with its own sampling seed, at collect_temperature).",
    )
    collect_episodes: Annotated[int | None, limit("episodes")] = Field(
        None,
        ge=1,
        description="Training episodes per scene played while collecting in each round: the "
        "first N (null: all train_episodes). Fewer make the rounds cheaper after a bootstrap "
        "on many demonstrations.",
    )
    selection: Literal["episode", "query"] = Field(
        "episode",
        description="Self-training selection. episode: every query of the collected episodes "
        "whose plans raised the number of correctly placed objects; query: only the queries "
        "whose own steps did (the placing query alone).",
    )
    min_placement_gain: EpisodeSteps = Field(
        1, ge=1, description="Correctly placed objects a kept episode (or query) must add."
    )
    rounds: int = Field(2, ge=0, le=20, description="Self-training rounds (K).")
    model: ModelName = Field(
        "smollm2",
        description="Gateway model to personalise (hf backend; with finetune_backend=openai, "
        "openai_model is personalised instead).",
    )
    planner_mode: Literal["generate", "score"] = Field(
        "generate",
        description="generate: the model writes plans; score: it picks the feasible skill it "
        "scores highest (one step per query, greedy even while collecting).",
    )
    few_shot: bool = Field(True, description="Put the worked example into every prompt.")
    guided: bool | None = Field(
        None,
        description="generate mode: guided decoding keeps plan lines within the skills over "
        "names the agent knows (local models only; null: on unless finetune_backend=openai).",
    )
    guided_max_lines: int = Field(6, ge=1, le=64, description="Guided plans: lines per query.")
    max_steps: EpisodeSteps = Field(
        40, ge=1, description="Skill steps per episode (the env's limit)."
    )
    max_tokens: Tokens = Field(96, ge=8, description="Tokens per planner answer.")
    collect_temperature: float = Field(
        0.7, ge=0, le=10, description="Sampling temperature while collecting self-training data."
    )
    demo_plan_length: EpisodeSteps = Field(
        6, ge=1, description="Skills per demonstrator plan (the length of the SFT targets)."
    )
    demo_query_every_step: bool = Field(
        False,
        description="Ask the demonstrator at every step (its plan logged, its first skill "
        "played), not only when its plan runs out: every state of a demonstration gets an "
        "example, including the mid-plan states a planner whose plans end early is asked in. "
        "Up to demo_plan_length times the bootstrap data and its SFT steps (5-skill plans on "
        "the val scenes: 25 examples per episode instead of 6.7).",
    )
    bootstrap_dedupe: bool = Field(
        False,
        description="Keep identical demonstrated (prompt, plan) pairs once in the bootstrap "
        "data. Off: every demonstrated query is an example, so a situation weighs as often as "
        "the demonstrator met it (an episode's first query is the same in every episode of a "
        "scene; kept once, the planner hardly learns how to start).",
    )
    replay_bootstrap: bool = Field(
        True, description="Self-training rounds also train on the bootstrap data."
    )
    replay_bootstrap_examples: Annotated[int | None, limit("examples")] = Field(
        None,
        ge=1,
        description="With replay_bootstrap: replay at most this many bootstrap examples in "
        "each round, a seeded random subset (null: all of them). The whole bootstrap data "
        "costs every round its SFT time again (402 examples: 35 min on 2 CPU cores); a subset "
        "about the size of a round's selection keeps the demonstrated routine in the mix at a "
        "fraction of that.",
    )
    replay_rounds: bool = Field(
        True,
        description="Round k also trains on the selections of rounds 1..k-1 (data replay: "
        "what earlier rounds taught is not forgotten).",
    )
    sft_steps: int | None = setting_field(SftSettings, "steps", "SFT steps (default: sft_epochs).")
    sft_epochs: float = Field(2.0, gt=0, le=100, description="SFT passes over the data.")
    sft_batch_size: int = setting_field(SftSettings, "batch_size", "SFT batch size.", le=512)
    sft_lr: float = setting_field(SftSettings, "learning_rate", "SFT learning rate.")
    round_sft_lr: Annotated[float | None, limit("learning_rate")] = Field(
        None,
        gt=0,
        description="SFT learning rate of the self-training rounds, which continue from an "
        "adapter that already fits (null: sft_lr). At the bootstrap's lr 1e-3 a round's loss "
        "rose from 0.07 to 0.25 on data that was 95% the bootstrap's own.",
    )
    lora_r: int = setting_field(SftSettings, "lora_r", "LoRA rank.")
    lora_targets: list[str] = setting_field(
        SftSettings, "target_modules", "Modules that get LoRA weights."
    )
    lora_layers: int | None = setting_field(
        SftSettings,
        "lora_layers",
        "LoRA on the top N decoder layers only (null: all; fewer: faster SFT).",
    )
    sft_max_length: Tokens = Field(1536, ge=64, description="SFT examples longer are dropped.")
    sft_bf16: bool | None = setting_field(
        SftSettings, "bf16", "bf16 autocast during SFT (null: the process's precision)."
    )
    sft_gradient_checkpointing: bool = setting_field(
        SftSettings,
        "gradient_checkpointing",
        "Recompute activations during SFT backward (much less memory).",
    )
    finetune_backend: Literal["local", "openai"] = Field(
        "local",
        description="local: LoRA SFT of `model`; openai: the OpenAI fine-tuning API on "
        "openai_model (stages evaluated through the gateway's openai backend).",
    )
    openai_model: str = Field(
        "gpt-4o-mini-2024-07-18",
        pattern=OPENAI_MODEL_PATTERN,
        description="openai: the base model to tune (an OpenAI model id: letters, digits, "
        "'_', '.', ':', '-').",
    )
    openai_base_url: str | None = Field(
        default_factory=lambda: os.environ.get("OPENAI_BASE_URL") or None,
        description="openai: API base URL (default $OPENAI_BASE_URL, else api.openai.com); "
        "with openai_api_key_env it picks a configured provider ($LLMRL_PROVIDERS), never an "
        "endpoint of its own.",
    )
    openai_api_key_env: str = Field(
        "OPENAI_API_KEY",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="openai: the environment variable holding the API key (never logged).",
    )
    openai_poll_s: float = Field(
        10.0, gt=0, le=3600, description="openai: seconds between fine-tuning job polls."
    )
    num_envs: int = Field(4, ge=1, le=64, description="Episodes played at once.")
    seed: Seed = Field(0, description="Seed of houses, sampling and SFT.")

    @field_validator("data_dir")
    @classmethod
    def _data_dir(cls, value: str | None) -> str | None:
        if value in (None, "", PROCEDURAL, "none", "null"):
            return None
        if value == placeholder(HOUSEKEEP):  # as a kept report writes the data llmrl finds
            found = dataset_dir("housekeep")
            if found is None:  # valid anywhere; a run here fails saying how to get the data
                return value
            value = str(found)
        from llmrl.common.paths import confine
        from llmrl.simulator.envs.housekeep.data import check_data_dir

        confine(value, "data_dir")  # under LLMRL_HOME or a data root, before anything is read
        try:
            return str(check_data_dir(value))
        except FileNotFoundError as exc:  # a config error, named by pydantic as data_dir
            raise ValueError(str(exc)) from None

    @property
    def names_real_scenes(self) -> bool:
        return self.scenes not in (None, [PROCEDURAL])

    @property
    def data_missing(self) -> bool:
        """Whether `data_dir` names the Housekeep data and this machine has none."""
        return self.data_dir == placeholder(HOUSEKEEP)

    def data_folder(self) -> str:
        """The Housekeep folder this run reads (`data_dir` set: not procedural houses);
        FileNotFoundError saying how to get the data when this machine has none."""
        if self.data_dir is None:
            raise ValueError("data_dir: procedural houses read no data folder")
        if self.data_missing:
            raise FileNotFoundError(
                f"data_dir: {self.data_dir} names the Housekeep data, and none was found on "
                f"this machine; {missing_hint('housekeep')} (or set data_dir=procedural for "
                "generated houses)"
            )
        return self.data_dir

    @model_validator(mode="after")
    def _scenes(self) -> LlmPersonalizeConfig:
        if self.data_dir is None:
            if self.names_real_scenes:
                raise ValueError("scenes: procedural houses have no scenes (set data_dir)")
            return self
        if self.data_missing:
            # the file is valid (it validates anywhere); running it says how to get the data
            return self
        from llmrl.simulator.envs.housekeep.data import available_scenes, split_scenes

        if self.scenes is None:  # the val scenes (scene_list): a config error if there are none
            try:
                split_scenes(self.data_dir, "val")
            except ValueError as exc:
                raise ValueError(f"scenes: unset, and {exc}; name the scenes to use") from None
            return self
        scenes = available_scenes(self.data_dir)
        unknown = [s for s in self.scenes if s not in scenes]
        if unknown:
            raise ValueError(f"scenes: unknown {unknown}; scenes in data_dir: {', '.join(scenes)}")
        return self

    @model_validator(mode="after")
    def _collect_episodes(self) -> LlmPersonalizeConfig:
        if self.collect_episodes is not None and self.collect_episodes > self.train_episodes:
            raise ValueError(
                f"collect_episodes: {self.collect_episodes} is more than train_episodes "
                f"({self.train_episodes}); rounds collect on training episodes only: set it "
                "to at most train_episodes, or null for all of them"
            )
        return self

    @model_validator(mode="after")
    def _openai(self) -> LlmPersonalizeConfig:
        if self.finetune_backend != "openai":
            return self
        if not os.environ.get(self.openai_api_key_env):
            raise ValueError(
                f"openai_api_key_env: finetune_backend=openai reads the OpenAI API key from "
                f"the environment variable {self.openai_api_key_env}, which is unset; set it "
                "(or name another variable in openai_api_key_env)"
            )
        if self.planner_mode != "generate":
            raise ValueError(
                "planner_mode: finetune_backend=openai needs planner_mode=generate "
                "(remote models do not score candidates)"
            )
        if self.guided:
            raise ValueError(
                "guided: remote OpenAI models cannot guide their decoding; leave guided unset "
                "or set guided=false with finetune_backend=openai"
            )
        return self

    @model_validator(mode="after")
    def _openai_provider(self) -> LlmPersonalizeConfig:
        """`openai_base_url` (with `openai_api_key_env`) picks a provider the server
        configured, never an endpoint of its own: refused here when none matches, not when
        the run reaches its fine-tuning."""
        if self.finetune_backend == "openai" or "openai_base_url" in self.model_fields_set:
            from llmrl.common.providers import provider_named_by

            provider_named_by(self.openai_base_url, self.openai_api_key_env, "openai_base_url")
        return self

    @property
    def guided_decoding(self) -> bool:
        """`guided`, its default resolved: on for local models."""
        if self.guided is None:
            return self.finetune_backend == "local"
        return self.guided

    @property
    def collected_episodes(self) -> int:
        """Training episodes per scene each round collects on (`collect_episodes` resolved)."""
        return self.collect_episodes or self.train_episodes

    @property
    def train_eval_episodes(self) -> int:
        """Training episodes also evaluated (the "train" split): the first eval_episodes."""
        return min(self.eval_episodes, self.train_episodes)

    def round_learning_rate(self, k: int) -> float:
        """SFT learning rate of train/<k>: the bootstrap's `sft_lr`, a round's `round_sft_lr`
        where set."""
        return (self.round_sft_lr or self.sft_lr) if k > 0 else self.sft_lr

    def scene_list(self) -> list[str]:
        if self.data_dir is None:
            return [PROCEDURAL]
        folder = self.data_folder()  # FileNotFoundError, saying how to get it, without data
        if self.scenes:
            return list(self.scenes)
        from llmrl.simulator.envs.housekeep.data import split_scenes

        return split_scenes(folder, "val")
