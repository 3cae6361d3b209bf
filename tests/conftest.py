"""Fixtures shared by every test area: the tiny random Llama (built once per session) and the
real Housekeep data (the Housekeep env's and LLM-Personalize's tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_llm import make_tiny_llama


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide random Llama with SmolLM2's tokenizer and chat template
    (`support.tiny_llm.make_tiny_llama`); serve it with `tiny_gateway_settings`."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real Housekeep data; the test is skipped without it."""
    from support.housekeep import real_data_dir

    from llmrl.simulator.envs.housekeep.data import DATA_ENV_VAR

    path = real_data_dir()
    if path is None:
        pytest.skip(f"no Housekeep data (set {DATA_ENV_VAR} or put it in ../shared/data/housekeep)")
    return path
