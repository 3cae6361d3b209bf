"""What LoRA is put on in the Llama-family models the learner trains (SmolLM2): one definition
for policy PPO (`llm.model`), KALM's grounding (`llmrl.recipes.kalm.grounded_lm`) and chat SFT
(`algorithms.sft`)."""

from __future__ import annotations

from typing import Any

# the linear projections of a Llama decoder layer: attention and MLP
LLAMA_LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def top_layers(model: Any, count: int | None) -> list[int] | None:
    """Indices of the top `count` decoder layers of `model` (None: every layer)."""
    if count is None:
        return None
    total = int(model.config.num_hidden_layers)
    if not 1 <= count <= total:
        raise ValueError(f"lora_layers must be in [1, {total}] for this model, got {count}")
    return list(range(total - count, total))
