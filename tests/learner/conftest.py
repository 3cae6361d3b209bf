"""Fixtures: the OpenAI fine-tuning stand-in on a free port of 127.0.0.1 (the tiny model,
`tiny_model_dir`, comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support.openai_standin import StandinState, create_standin

from llmrl.llm_gateway.service import RestServer


@pytest.fixture
def standin() -> Iterator[tuple[str, StandinState]]:
    """(base_url, state) of a fresh stand-in server."""
    state = StandinState()
    server = RestServer(create_standin(state)).start()
    yield f"{server.url}/v1", state
    server.stop()
