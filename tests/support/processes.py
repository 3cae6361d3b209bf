"""Real processes for the orchestrator's tests: a Redis server and llmrl services on free ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from llmrl.orchestrator.launcher import redis_command
from support.net import free_port

TESTS = Path(__file__).resolve().parents[1]  # the folder that holds `support`
REPO = TESTS.parent
CLAIM_IDLE_S = 1.0  # a SIGKILLed worker's job goes to another worker after this long
RESUBMIT_AFTER_S = 3.0  # a run that got no results this long re-queues the jobs Redis lost


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval=0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of every child: the tiny test env importable, short reclaim timeout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), env.get("PYTHONPATH")]))
    env["LLMRL_PLUGINS"] = "support.tiny_corridor"
    env["LLMRL_CLAIM_IDLE_S"] = str(CLAIM_IDLE_S)
    env["LLMRL_RESUBMIT_AFTER_S"] = str(RESUBMIT_AFTER_S)
    env["LLMRL_LOG_LEVEL"] = "WARNING"
    env.pop("LLMRL_ORCHESTRATOR_TOKEN", None)  # the stacks of the tests run open
    env.pop("LLMRL_TOKEN", None)
    env.update(extra or {})
    return env


class RedisServer:
    """redis-server on a free port with AOF persistence in `data_dir` (as `llmrl up` runs it)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", *redis_command(self.port, self.data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)

        def ready() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        wait_until(ready, 10, "redis-server")
        client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(10)

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


class Service:
    """One `llmrl ...` child process with its log in `log_dir`."""

    def __init__(
        self,
        name: str,
        args: list[str],
        env: dict[str, str],
        log_dir: Path,
        health_url: str | None = None,
    ) -> None:
        self.name, self.args, self.env, self.health_url = name, args, env, health_url
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen | None = None

    def start(self, wait: bool = True, timeout: float = 60) -> Service:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "llmrl.cli", *self.args],
                env=self.env,
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if wait and self.health_url:
            wait_until(self._healthy, timeout, f"{self.name} /health")
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
        try:
            return httpx.get(self.health_url, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Stack:
    home: Path
    redis: RedisServer
    env: dict[str, str]
    orchestrator: Service
    simulator: Service
    workers: list[Service] = field(default_factory=list)
    url: str = ""

    def add_worker(self, name: str, wait: bool = True) -> Service:
        port = free_port()
        worker = Service(
            name,
            ["worker", "--name", name, "--port", str(port)],
            self.env,
            self.home,
            health_url=f"http://127.0.0.1:{port}/health",
        )
        self.workers.append(worker.start(wait=wait))
        return worker

    def submit_and_wait(self, recipe: str, overrides: list[str], timeout: float) -> dict[str, Any]:
        """`llmrl submit RECIPE key=value ...` against the orchestrator, then the run's record
        once it has ended (completed, failed or cancelled)."""
        submitted = subprocess.run(
            [sys.executable, "-m", "llmrl.cli", "submit", recipe, *overrides, "--url", self.url],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert submitted.returncode == 0, submitted.stderr
        run_id = submitted.stdout.split()[0]

        def finished() -> dict[str, Any] | None:
            run = httpx.get(f"{self.url}/runs/{run_id}", timeout=5).json()
            return run if run["status"] in ("completed", "failed", "cancelled") else None

        return wait_until(finished, timeout, f"run {run_id}", interval=1.0)


def pending_of(stack: Stack, consumer: str) -> int:
    """Episode jobs the consumer `consumer` holds and has not acknowledged (Redis XPENDING)."""
    with stack.redis.client() as redis_client:
        info = redis_client.xpending("llmrl:jobs", "workers")
    for entry in info.get("consumers", []):
        name = entry["name"].decode() if isinstance(entry["name"], bytes) else entry["name"]
        if name == consumer:
            return int(entry["pending"])
    return 0
