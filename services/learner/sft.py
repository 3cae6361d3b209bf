"""Where LoRA SFT lived before the algorithm families: its names, re-exported (the code is in
`llmrl.learner.algorithms.sft`, adapter versions in `llmrl.learner.adapters`)."""

from llmrl.learner.adapters import adapter_dir, base_model_dir
from llmrl.learner.algorithms.sft import (
    ADAPTER_METADATA,
    IGNORE_INDEX,
    LLAMA_LINEAR_LAYERS,
    SftConfig,
    SftResult,
    assistant_loss,
    optimizer_steps,
    read_chat_examples,
    tokenize_chat,
    top_layers,
    train_lora_sft,
)

__all__ = [
    "ADAPTER_METADATA",
    "IGNORE_INDEX",
    "LLAMA_LINEAR_LAYERS",
    "SftConfig",
    "SftResult",
    "adapter_dir",
    "assistant_loss",
    "base_model_dir",
    "optimizer_steps",
    "read_chat_examples",
    "tokenize_chat",
    "top_layers",
    "train_lora_sft",
]
