"""The recipe tests' gateway (glam, grpo...): the tiny model served as "tiny", adapters under a tmp
home; a test module that defines its own `tiny_gateway` uses that one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.net import free_port
from support.processes import RedisServer, Service, Stack, child_env, wait_until
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


@pytest.fixture
def service_stack(tmp_path: Path, flat_model_dir: Path) -> Iterator[tuple[Stack, Service]]:
    """A real stack on the tiny model and the tiny text env: Redis, the simulator, the
    orchestrator, the learner and one rollout worker, sharing one LLMRL_HOME; (stack, learner)."""
    home = tmp_path / "home"
    home.mkdir()
    gateway = tmp_path / "gateway.yaml"
    gateway.write_text(yaml.safe_dump(tiny_gateway_settings(flat_model_dir)))
    redis_server = RedisServer(home / "redis")
    redis_server.start()
    sim_http, sim_grpc, orch, learner_port = free_port(), free_port(), free_port(), free_port()
    env = child_env(
        {
            "LLMRL_HOME": str(home),
            "LLMRL_REDIS_URL": redis_server.url,
            "LLMRL_SIMULATOR_ADDRESS": f"127.0.0.1:{sim_grpc}",
            "LLMRL_LLM_GATEWAY_ADDRESS": "local",
            "LLMRL_LLM_GATEWAY_CONFIG": str(gateway),
            "LLMRL_LEARNER_PORT": str(learner_port),
            "LLMRL_PLUGINS": "support.tiny_text_env",
        }
    )

    def service(name: str, args: list[str], port: int) -> Service:
        return Service(name, args, env, home, health_url=f"http://127.0.0.1:{port}/health")

    simulator = service(
        "simulator",
        ["serve", "simulator", "--port", str(sim_http), "--grpc-port", str(sim_grpc)],
        sim_http,
    )
    orchestrator = service("orchestrator", ["serve", "orchestrator", "--port", str(orch)], orch)
    learner = service("learner", ["serve", "learner", "--port", str(learner_port)], learner_port)
    stack = Stack(home, redis_server, env, orchestrator, simulator, url=f"http://127.0.0.1:{orch}")
    try:
        for started in (simulator, orchestrator, learner):
            started.start(wait=False)
        worker = stack.add_worker("w1", wait=False)
        for started in (simulator, orchestrator, learner, worker):
            wait_until(started._healthy, 240, started.name)
        yield stack, learner
    finally:
        for started in [*stack.workers, learner, orchestrator, simulator]:
            started.stop()
        redis_server.stop()
