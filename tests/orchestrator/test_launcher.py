"""The done criterion of issue 4: `llmrl up`, then one REST call runs `evaluate` (SimpleDoorKey,
oracle planner) to completion through Redis, rollout workers and the simulator over gRPC;
SIGTERM then stops every process. The deployment is closed: the user's LLMRL_TOKEN is required."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import httpx
import pytest
import redis
from support.net import free_port
from support.processes import REPO, child_env, wait_until

from llmrl.common.config import DEFAULT_PORTS
from llmrl.orchestrator.rest_client import OrchestratorClient, OrchestratorError

TOKEN = "launcher-test-t0ken"


def test_llmrl_up_then_a_rest_call_runs_evaluate_to_completion(tmp_path):
    ports = {f"LLMRL_{s.upper()}_PORT": str(free_port()) for s in DEFAULT_PORTS}
    ports.update(
        {f"LLMRL_{s.upper()}_GRPC_PORT": str(free_port()) for s in ("simulator", "llm_gateway")}
    )
    env = child_env({**ports, "LLMRL_TOKEN": TOKEN})
    home = tmp_path / "home"
    redis_port = free_port()
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmrl.cli",
            "up",
            "--workers",
            "2",
            "--home",
            str(home),
            "--redis-port",
            str(redis_port),
        ],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{ports['LLMRL_ORCHESTRATOR_PORT']}"
    health = [
        f"http://127.0.0.1:{port}/health"
        for port in (
            ports["LLMRL_SIMULATOR_PORT"],
            ports["LLMRL_ORCHESTRATOR_PORT"],
            ports["LLMRL_WORKER_PORT"],
            int(ports["LLMRL_WORKER_PORT"]) + 1,
        )
    ]
    try:

        def ready() -> bool:
            assert up.poll() is None, up.stdout.read()
            try:
                return all(httpx.get(url, timeout=1).status_code == 200 for url in health)
            except httpx.HTTPError:
                return False

        wait_until(ready, 150, "llmrl up: every service healthy", interval=0.3)
        assert httpx.get(f"{url}/runs", timeout=5).status_code == 401  # closed by default
        with pytest.raises(OrchestratorError) as refused:  # says which variable, not the token
            OrchestratorClient(url, token="not-the-token").runs()
        assert "LLMRL_TOKEN" in str(refused.value) and "not-the-token" not in str(refused.value)
        client = OrchestratorClient(url, token=TOKEN)
        config = {"env": "SimpleDoorKey", "planner": "oracle", "episodes": 10}
        run_id = client.submit("evaluate", config)["run_id"]
        final = client.wait(run_id, timeout=120)
        assert final["status"] == "completed", final
        assert final["episodes_stored"] == 10
        assert final["summary"]["success_rate"] == 1.0
        results = client.http.get(f"/runs/{run_id}/artifacts/results.json").json()
        assert results["rows"][0]["env"] == "SimpleDoorKey"
        client.close()
        simulator_metrics = httpx.get(
            f"http://127.0.0.1:{ports['LLMRL_SIMULATOR_PORT']}/metrics",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=5,
        ).text
        assert "llmrl_simulator_env_steps_total" in simulator_metrics  # stepped over gRPC
        with pytest.raises(redis.AuthenticationError):  # its Redis requires a password
            redis.Redis(port=redis_port).ping()
        served = [simulator_metrics] + [
            httpx.get(address, timeout=5).text for address in health
        ]  # what /health and /metrics show
    finally:
        up.send_signal(signal.SIGTERM)
        output, _ = up.communicate(timeout=90)
    assert up.returncode == 0, output
    for name in ("redis", "simulator", "orchestrator", "worker-1", "worker-2"):
        assert re.search(rf"{name}\s.*\bready\b", output), (name, output)
    assert "stopped" in output
    password = re.search(r'requirepass "(.+)"', (home / "redis" / "llmrl-redis.conf").read_text())
    logs = [path.read_text() for path in (home / "logs").glob("*.log")]
    assert password and all(password[1] not in text for text in [output, *logs, *served])
    assert f"redis://:***@127.0.0.1:{redis_port}/0" in output
    assert "token: LLMRL_TOKEN from your environment" in output
    assert TOKEN not in output  # a token the user set is never echoed
    for port in (ports["LLMRL_ORCHESTRATOR_PORT"], ports["LLMRL_SIMULATOR_PORT"]):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            raise AssertionError(f"a service still answers on port {port}")
        except httpx.HTTPError:
            pass
