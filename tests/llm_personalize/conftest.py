"""Fixtures: the scripted chat model behind a real gateway, and a tiny local model."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from personalize_support import Script, create_scripted_llm

from llmrl.llm_gateway.client import connect
from llmrl.llm_gateway.service import RestServer

# the tiny-model helpers live with the learner's tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "learner"))


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


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from learner_support import make_tiny_llama

    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
