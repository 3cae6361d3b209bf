"""`llmrl submit glam ...` on a real stack: the orchestrator runs the recipe, its training runs
as the learner service's policy job "glam" stepping the simulator service over gRPC, and a
rollout worker evaluates the trained adapter through its gateway (tiny model, tiny budget)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from support.net import free_port
from support.processes import REPO, RedisServer, Service, Stack, child_env, wait_until
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings
from support.tiny_text_env import ENV_ID


@pytest.fixture
def glam_stack(tmp_path: Path, flat_model_dir: Path) -> Iterator[tuple[Stack, Service]]:
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


def test_submitted_glam_trains_on_the_learner_against_the_simulator_service(glam_stack):
    stack, learner = glam_stack
    overrides = [
        f"env={ENV_ID}",
        f"model={TINY_MODEL}",
        'methods=["glam"]',
        "train_steps=16",
        "ppo.num_envs=4",
        "ppo.num_steps=2",
        "ppo.minibatch_size=8",
        "ppo.update_epochs=1",
        "eval_every=1",
        "eval_episodes=2",
    ]
    submitted = subprocess.run(
        [sys.executable, "-m", "llmrl.cli", "submit", "glam", *overrides, "--url", stack.url],
        env=stack.env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.split()[0]

    def finished() -> dict | None:
        run = httpx.get(f"{stack.url}/runs/{run_id}", timeout=5).json()
        return run if run["status"] in ("completed", "failed", "cancelled") else None

    run = wait_until(finished, 480, f"run {run_id}", interval=1.0)
    assert run["status"] == "completed", run.get("error")

    # the training was the learner's policy job, stepping the simulator service
    jobs = httpx.get(f"{learner.health_url.rsplit('/', 1)[0]}/policy-jobs", timeout=5).json()
    (job,) = [j for j in jobs if j["request"]["kind"] == "glam"]
    assert job["request"]["simulator"] == stack.env["LLMRL_SIMULATOR_ADDRESS"]
    assert job["status"] == "succeeded"
    assert job["result"]["global_step"] == 16

    # the worker evaluated the adapter version the learner saved, through its gateway
    results = json.loads(next(stack.home.rglob("results.json")).read_text())
    glam = next(row for row in results["rows"] if row["method"] == "glam")
    assert glam["env_steps"] == 16 and glam["episodes"] == 2
