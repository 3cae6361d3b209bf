"""The recipe `glam`'s config: every key with its description; bad values name the key."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from llmrl.common.bounds import (
    Episodes,
    Frames,
    LearningRate,
    LlmBatch,
    Seed,
    SeedOffset,
    Updates,
    limit,
)
from llmrl.common.memory_fit import GIB, MemoryEstimate
from llmrl.common.names import ModelName
from llmrl.learner.algorithms.base import setting_field
from llmrl.learner.algorithms.sft import SftSettings
from llmrl.recipes.config import RecipeConfig, registered_env
from llmrl.recipes.glam.llm_ppo import LlmPpoSettings

NPAE_MICROBATCH = 8  # NPAE's default microbatch_size: fits a few GB of activations
METHODS = ("zero-shot", "glam", "npae", "symbolic-ppo", "drrn", "bc", "random")
# methods that train on the env's reward (a learning curve each) and the ones that learn at all
RL_METHODS = ("glam", "npae", "symbolic-ppo", "drrn")
TRAINED_METHODS = (*RL_METHODS, "bc")
TEST_MIXES = ("BabyAIText-MixTestNewObjects", "BabyAIText-MixTestNewCompositions")
# SmolLM2-135M's geometry, and what one sample of GLAM's update keeps per trained decoder layer
# for the backward (its prompt and every action phrase, fp32): ~0.5 GB a sample through all 30
# layers, measured as ~16 GB for 32 samples (the lora_layers=None note below). Other models'
# geometry is not known before they load: no estimate for them.
MODEL_GEOMETRY = {"smollm2": {"parameters": 134_515_008, "layers": 30}}
ACTIVATION_BYTES_PER_SAMPLE_LAYER = int(0.5 * GIB / 30)
# what an env must give GLAM's LLM policy (the envs registered with tag "glam")
GLAM_ENVS = "text and mission observations, BabyAI-Text's six action phrases as skills"


class GlamConfig(RecipeConfig):
    env: str = Field("BabyAIText-GoToLocalS5N2", description="Registered text env to train on.")
    model: ModelName = Field("smollm2", description="Gateway model name of the base LLM.")
    methods: list[str] = Field(
        list(METHODS), description=f"Methods to run and compare: any of {', '.join(METHODS)}."
    )
    train_steps: Frames = Field(5120, ge=1, description="Training budget in env steps (all envs).")
    ppo: LlmPpoSettings = Field(
        default_factory=LlmPpoSettings,
        description="LLM-PPO's hyperparameters (`ppo: {learning_rate: 0.001, ...}`, or "
        "`ppo.learning_rate=0.001`), GLAM's as given and NPAE's with its own learning rate "
        "(npae_learning_rate), every layer trained and microbatches of "
        f"{NPAE_MICROBATCH} unless set; Symbolic-PPO, DRRN and behaviour cloning share its "
        "rollout shape (num_envs x num_steps, update_epochs, minibatch_size) and LoRA (lora_r, "
        "lora_layers).",
    )
    finetune: Literal["lora", "full"] = Field(
        "lora",
        description="What GLAM trains: lora (a LoRA, served through the gateway as a versioned "
        "adapter) or full (every weight of the pretrained model, as the paper trains "
        f"Flan-T5; ppo.microbatch_size {NPAE_MICROBATCH} unless set, evaluated from its "
        "checkpoint in-process like NPAE).",
    )
    eval_every: Updates = Field(
        2,
        ge=1,
        description="Evaluate every trained method on the held-out seeds every this many PPO "
        "updates (ppo.num_envs x ppo.num_steps env steps each): the learning curve.",
    )
    npae_learning_rate: LearningRate = Field(
        1e-4, gt=0, description="Adam learning rate of NPAE (random weights, full fine-tuning)."
    )
    symbolic_learning_rate: LearningRate = Field(
        3e-4, gt=0, description="Adam learning rate of Symbolic-PPO (SB3 PPO on the grid)."
    )
    drrn_learning_rate: LearningRate = Field(
        1e-4, gt=0, description="Adam learning rate of DRRN (SB3 DQN on the text; GLAM's: 1e-4)."
    )
    bc_steps: Updates = Field(
        200, ge=1, description="SFT optimizer steps of behaviour cloning (batch bc_batch_size)."
    )
    bc_batch_size: LlmBatch = Field(
        8, ge=1, description="Examples per SFT step of behaviour cloning."
    )
    bc_learning_rate: float = setting_field(
        SftSettings, "learning_rate", "Learning rate of the BC LoRA."
    )
    greedy: bool = Field(
        False,
        description="Evaluate greedily (argmax); False (the original's tests): sample from the "
        "policy, seeded by the episode.",
    )
    eval_episodes: Episodes = Field(50, description="Episodes per evaluation.")
    eval_seed_offset: SeedOffset = Field(
        1_000_000, description="Seed offset of the held-out evaluation episodes."
    )
    variants: list[str] = Field(
        default_factory=list,
        description="Generalisation tests: BabyAI-Text variants (e.g. nouns, french) and test "
        f"mixes ({', '.join(TEST_MIXES)}), each evaluated on held-out seeds.",
    )
    max_steps: Annotated[int | None, limit("episode_steps")] = Field(
        None, ge=1, description="Cap on steps per evaluation episode."
    )
    seed: Seed = Field(0, description="Seed of the training and of the evaluations.")

    @classmethod
    def unknown_key_message(cls, key: str) -> str:
        if key in LlmPpoSettings.model_fields:
            return f"moved into the ppo group: write ppo.{key}=... (YAML: ppo: {{{key}: ...}})"
        return super().unknown_key_message(key)

    def full_finetune(self, method: str) -> bool:
        """Whether `method` trains every weight (NPAE always; GLAM with finetune=full), so is
        played from its checkpoint in-process rather than served as an adapter."""
        return method == "npae" or (method == "glam" and self.finetune == "full")

    def memory_estimate(self) -> MemoryEstimate | None:
        """The largest in-process LLM update among the methods: fp32 weights, with full
        fine-tuning their gradients and Adam's two moments, and the activations a microbatch
        keeps through every trained layer."""
        geometry = MODEL_GEOMETRY.get(self.model)
        trained = [m for m in ("glam", "npae") if m in self.methods]
        if geometry is None or not trained:
            return None
        estimates = []
        for method in trained:
            full = self.full_finetune(method)
            ppo = self.ppo
            default_batch = NPAE_MICROBATCH if full else ppo.minibatch_size
            samples = min(ppo.microbatch_size or default_batch, ppo.minibatch_size)
            layers = geometry["layers"] if full or ppo.lora_layers is None else ppo.lora_layers
            weights = geometry["parameters"] * 4
            parts = {
                "weights": weights,
                "gradients and Adam": 3 * weights if full else 0,
                f"{method}'s activations": samples * min(layers, geometry["layers"])
                * ACTIVATION_BYTES_PER_SAMPLE_LAYER,
            }  # fmt: skip
            estimates.append(MemoryEstimate(
                {name: size for name, size in parts.items() if size},
                ("ppo.microbatch_size", "ppo.minibatch_size", "ppo.lora_layers", "finetune"),
            ))  # fmt: skip
        return max(estimates, key=lambda estimate: estimate.total)

    @field_validator("env")
    @classmethod
    def _env_is_registered(cls, value: str) -> str:
        return registered_env(value, "glam", GLAM_ENVS)

    @field_validator("methods")
    @classmethod
    def _methods_are_known(cls, value: list[str]) -> list[str]:
        unknown = [m for m in value if m not in METHODS]
        if unknown or not value:
            raise ValueError(f"expected a non-empty list of {', '.join(METHODS)}, got {value}")
        return value

    @field_validator("variants")
    @classmethod
    def _variants_are_known(cls, value: list[str]) -> list[str]:
        from llmrl.simulator.envs.babyai_text.variants import VARIANTS

        known = [*VARIANTS, *TEST_MIXES]
        unknown = [v for v in value if v not in known]
        if unknown:
            raise ValueError(f"unknown variants {unknown}; known: {', '.join(known)}")
        return value
