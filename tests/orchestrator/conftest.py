"""Fixtures: a real service stack (Redis with AOF, simulator over gRPC, orchestrator, workers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import support.tiny_corridor  # noqa: F401  (registers TinyCorridor in this process too)
from support.net import free_port
from support.processes import RedisServer, Service, Stack, child_env, wait_until


@pytest.fixture(scope="module")  # torn down after each module: no idle services linger
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    home = tmp_path_factory.mktemp("stack")
    redis_server = RedisServer(home / "redis")
    redis_server.start()
    sim_http, sim_grpc, orch_port = free_port(), free_port(), free_port()
    env = child_env(
        {
            "LLMRL_HOME": str(home),
            "LLMRL_REDIS_URL": redis_server.url,
            "LLMRL_SIMULATOR_ADDRESS": f"127.0.0.1:{sim_grpc}",
            "LLMRL_LLM_GATEWAY_ADDRESS": "local",
        }
    )
    simulator = Service(
        "simulator",
        ["serve", "simulator", "--port", str(sim_http), "--grpc-port", str(sim_grpc)],
        env,
        home,
        health_url=f"http://127.0.0.1:{sim_http}/health",
    )
    orchestrator = Service(
        "orchestrator",
        ["serve", "orchestrator", "--port", str(orch_port)],
        env,
        home,
        health_url=f"http://127.0.0.1:{orch_port}/health",
    )
    stack = Stack(home, redis_server, env, orchestrator, simulator)
    stack.url = f"http://127.0.0.1:{orch_port}"
    try:
        simulator.start(wait=False)
        orchestrator.start(wait=False)
        workers = [stack.add_worker(name, wait=False) for name in ("w1", "w2")]
        for service in (simulator, orchestrator, *workers):
            wait_until(service._healthy, 90, service.name)
        yield stack
    finally:
        for service in [*stack.workers, orchestrator, simulator]:
            service.stop()
        redis_server.stop()
