"""Fixtures: the scripted chat model behind a real gateway (the tiny local model,
`tiny_model_dir`, comes from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.scripted_llm import Script, create_scripted_llm

from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.service import RestServer


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Script, Any]]:
    """(script, gateway client): model "scripted" answers with the script's next answer."""
    script = Script()
    server = RestServer(create_scripted_llm(script)).start()
    monkeypatch.setenv("SCRIPTED_KEY", "sk-scripted")
    client = connect(
        models={
            "scripted": {
                "backend": "openai",
                "base_url": f"{server.url}/v1",
                "api_key_env": "SCRIPTED_KEY",
                "max_retries": 0,
            }
        },
        default_model="scripted",
        cache={"backend": "none"},
    )
    yield script, client
    client.close()
    server.stop()
