"""The recipe tests' gateway (glam, grpo...): the tiny model served as "tiny", adapters under a tmp
home; a test module that defines its own `tiny_gateway` uses that one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from support.tiny_llm import make_tiny_llama, tiny_gateway_settings

import llmrl.llm_gateway.client as gateway_client


@pytest.fixture(scope="session")
def flat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_llama(tmp_path_factory.mktemp("flat-llama"), initializer_range=0.02)


@pytest.fixture
def tiny_gateway(flat_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The process's embedded gateway serves the tiny model as "tiny"; adapters in tmp."""
    config = tmp_path / "gateway.yaml"
    config.write_text(yaml.safe_dump(tiny_gateway_settings(flat_model_dir)))
    monkeypatch.setenv("LLMRL_LLM_GATEWAY_CONFIG", str(config))
    monkeypatch.setenv("LLMRL_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(gateway_client, "_shared_gateway", None)
    return flat_model_dir
