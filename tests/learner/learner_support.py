"""Shared by the learner and llm-personalize tests: a tiny random Llama with SmolLM2's
tokenizer and chat template (fast to train and to serve), and a gateway config for it."""

from __future__ import annotations

from pathlib import Path


def make_tiny_llama(path: Path) -> Path:
    """A 2-layer, 32-wide random Llama saved to `path` (tokenizer included)."""
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
        initializer_range=0.5,  # wide output embeddings: a LoRA can move the logits
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def tiny_gateway_settings(model_dir: Path, cache: str = "none") -> dict:
    return {
        "default_model": "tiny",
        "models": {
            "tiny": {"backend": "hf", "path": str(model_dir), "dtype": "float32", "max_wait_ms": 2}
        },
        "cache": {"backend": cache},
    }
