"""The tiny random Llama that fast tests serve and train instead of real weights, and gateway
settings for it. Shared by the gateway, learner and llm-personalize tests (the session fixture
`tiny_model_dir` in tests/conftest.py builds it once); tests import it as
`from support.tiny_llm import ...`.

It keeps SmolLM2's real tokenizer and chat template: tests render chats, count tokens, mask
assistant turns and guide decoding exactly as with the real model, at a fraction of the cost.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_MODEL = "tiny"  # the gateway model name the settings below serve it under


def make_tiny_llama(path: Path, initializer_range: float = 0.5) -> Path:
    """A 2-layer, 32-wide random Llama with SmolLM2's tokenizer, saved to `path`. Seeded, so
    every build has the same weights. A small `initializer_range` gives a near-uniform policy
    over candidates (RL tests that must explore every action)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from llmrl.llm_gateway.local_models import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        # Wide weights (std 0.5 by default): log-probabilities differ clearly between tokens,
        # and a LoRA can move the logits.
        initializer_range=initializer_range,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_gateway_settings(
    model_dir: Path, cache: str | dict[str, Any] = "none", **model_options: Any
) -> dict[str, Any]:
    """Gateway settings serving `model_dir` as the default model "tiny" (float32, short
    batching wait). `cache` is a cache backend name or its settings; `model_options` are
    added to (or replace) the model's settings, e.g. max_batch_size=8."""
    model = {"backend": "hf", "path": str(model_dir), "dtype": "float32", "max_wait_ms": 2}
    return {
        "default_model": TINY_MODEL,
        "models": {TINY_MODEL: {**model, **model_options}},
        "cache": {"backend": cache} if isinstance(cache, str) else dict(cache),
    }
