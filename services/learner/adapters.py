"""LoRA adapter versions: where they live, what they adapt, how they are saved.

Every algorithm that trains an LLM (SFT today, GLAM's LLM-PPO next) writes its adapters here,
as versions of a checkpoint line (`llmrl.learner.versions`) laid out where the LLM gateway
looks for them without configuration:

    $LLMRL_HOME/adapters/<model>/<adapter>/<version>/   served as `<model>:<adapter>@<version>`
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmrl.learner.versions import Checkpoint, Versions, home_versions, save_version


def adapter_versions(model: str, adapter: str) -> Versions:
    """The versions of adapter `adapter` of gateway model `model`."""
    return home_versions("adapters", model, adapter)


def adapter_dir(model: str, adapter: str, version: str | int) -> Path:
    """Where the gateway finds `<model>:<adapter>@<version>` without any configuration."""
    return adapter_versions(model, adapter).path(version)


def served_name(model: str, adapter: str, version: str | int) -> str:
    """The gateway model name of an adapter version."""
    return f"{model}:{adapter}@{version}"


def base_model_dir(model: str, gateway_settings: dict[str, Any] | None = None) -> Path:
    """The local weights directory of gateway model `model` (builtins resolved): an hf model's
    `path`, or the `weights` of a model a serving engine serves (`backend: openai`), whose
    adapters the learner trains here and the engine then serves."""
    from llmrl.llm_gateway.local_models import resolve_path
    from llmrl.llm_gateway.settings import load_settings

    config = load_settings(gateway_settings).model(model)
    weights = getattr(config, "path" if config.backend == "hf" else "weights", None)
    if config.backend not in ("hf", "openai") or not weights:
        raise ValueError(
            f"model {model!r} is served by the {config.backend!r} backend; local LoRA "
            "fine-tuning needs an hf model with a local path, or an engine's model (openai) "
            "with its weights"
        )
    return resolve_path(weights)


def save_adapter(
    model: Any,
    target: str | Path,
    algorithm: str,
    config: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
) -> Checkpoint:
    """Save a peft model's adapter as the version directory `target` (atomically)."""
    return save_version(target, model.save_pretrained, algorithm, config, result)
