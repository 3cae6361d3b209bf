"""Fixtures shared by every test area: the tiny random Llama (built once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tiny_llm import make_tiny_llama


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer, 32-wide random Llama with SmolLM2's tokenizer and chat template
    (`tiny_llm.make_tiny_llama`); serve it with `tiny_llm.tiny_gateway_settings`."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
