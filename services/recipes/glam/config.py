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
from llmrl.learner.llm.scorer import Reduction
from llmrl.recipes.base import RecipeConfig, registered_env
from llmrl.recipes.glam.training import PpoSettings, ppo_setting

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


class GlamConfig(RecipeConfig, PpoSettings):
    env: str = Field("BabyAIText-GoToLocalS5N2", description="Registered text env to train on.")
    model: ModelName = Field("smollm2", description="Gateway model name of the base LLM.")
    methods: list[str] = Field(
        list(METHODS), description=f"Methods to run and compare: any of {', '.join(METHODS)}."
    )
    train_steps: Frames = Field(5120, ge=1, description="Training budget in env steps (all envs).")
    num_envs: int = Field(16, ge=1, le=256, description="Envs stepped together in training.")
    num_steps: int = ppo_setting("num_steps", "Steps per env per PPO rollout.")
    minibatch_size: int = ppo_setting("minibatch_size", "Samples per PPO gradient step.")
    microbatch_size: int | None = ppo_setting(
        "microbatch_size",
        "Samples per forward/backward of GLAM's and NPAE's PPO update, gradients "
        f"accumulated over the minibatch (None: GLAM the whole minibatch, NPAE "
        f"{NPAE_MICROBATCH}: full fine-tuning keeps every layer's activations for the backward, "
        "tens of GB for a 64-sample minibatch of SmolLM2-135M).",
    )
    update_epochs: int = ppo_setting("update_epochs", "PPO epochs over each rollout.")
    learning_rate: float = ppo_setting(
        "learning_rate", "Adam learning rate of GLAM (its LoRA, or every weight)."
    )
    finetune: Literal["lora", "full"] = Field(
        "lora",
        description="What GLAM trains: lora (a LoRA, served through the gateway as a versioned "
        "adapter) or full (every weight of the pretrained model, as the paper trains "
        f"Flan-T5; microbatch_size {NPAE_MICROBATCH} unless set, evaluated from its "
        "checkpoint in-process like NPAE).",
    )
    lora_layers: Annotated[int | None, limit("layers")] = Field(
        2,
        ge=1,
        description="Adapt only the top N decoder layers (LoRA only; the setting every README "
        "figure was measured with). The frozen layers below run once per sample, in the "
        "rollout. None: all layers, whose activations a whole minibatch keeps for the backward "
        "(~16 GB for 32 samples of SmolLM2-135M): set microbatch_size (e.g. 8) with it.",
    )
    lora_r: int = ppo_setting(
        "lora_r",
        "Rank of GLAM's and BC's LoRA (alpha = 2 x rank, so the update's scale stays the same "
        "across ranks).",
    )
    eval_every: Updates = Field(
        2,
        ge=1,
        description="Evaluate every trained method on the held-out seeds every this many PPO "
        "updates (num_envs x num_steps env steps each): the learning curve.",
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
    reduction: Reduction = ppo_setting(
        "reduction", "Candidate score: sum or mean of token log-probs."
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
            default_batch = NPAE_MICROBATCH if method == "npae" else self.minibatch_size
            samples = min(self.microbatch_size or default_batch, self.minibatch_size)
            layers = geometry["layers"] if full or self.lora_layers is None else self.lora_layers
            weights = geometry["parameters"] * 4
            parts = {
                "weights": weights,
                "gradients and Adam": 3 * weights if full else 0,
                f"{method}'s activations": samples * min(layers, geometry["layers"])
                * ACTIVATION_BYTES_PER_SAMPLE_LAYER,
            }  # fmt: skip
            estimates.append(MemoryEstimate(
                {name: size for name, size in parts.items() if size},
                ("microbatch_size", "minibatch_size", "lora_layers", "finetune"),
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
