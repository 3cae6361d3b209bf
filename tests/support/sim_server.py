"""A real simulator server in its own process, for the simulator's tests.

The server imports the test envs (`support.sim_envs`) through LLMRL_PLUGINS, with tests/ on
its PYTHONPATH, so the same ids exist on both sides of the wire. It runs closed, as under
`llmrl up`: it requires TOKEN, which the simulator tests' clients send (LLMRL_TOKEN, set by
tests/simulator/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from llmrl.simulator.service import start_subprocess
from support.net import free_port

TESTS = Path(__file__).resolve().parents[1]  # the folder that holds `support`
LLMRL = Path(sys.executable).with_name("llmrl")
TOKEN = "simulator-tests-t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Server:
    address: str  # gRPC host:port
    http: str  # base URL of /health and /metrics
    process: subprocess.Popen
    stdout: IO[str]
    stderr: IO[str]

    def health(self) -> dict:
        with urllib.request.urlopen(f"{self.http}/health", timeout=5) as response:
            return json.loads(response.read())

    def metrics(self) -> str:
        request = urllib.request.Request(f"{self.http}/metrics", headers=AUTH)
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.read().decode()


def start_server(settings: dict[str, Any] | None = None, grpc_port: int | None = None) -> Server:
    """A healthy server; `settings`: the simulator's (`--set`), e.g. its limits; `grpc_port`:
    where it listens for dm_env_rpc (a free port by default).

    The server is told to stop when the thread that started it ends (PR_SET_PDEATHSIG is per
    thread): start it on the test's own thread, never on a timer's."""
    http_port, grpc_port = free_port(), grpc_port or free_port()
    env = dict(
        os.environ,
        LLMRL_PLUGINS="support.sim_envs",
        LLMRL_TOKEN=TOKEN,
        PYTHONPATH=os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    )
    # Files, not pipes: nobody reads a pipe while the server runs, and a full one blocks it.
    stdout = tempfile.TemporaryFile("w+")  # noqa: SIM115  closed by stop_server
    stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115
    process = start_subprocess(
        http_port, grpc_port, settings=settings, env=env, stdout=stdout, stderr=stderr
    )
    server = Server(
        f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}", process, stdout, stderr
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stderr.seek(0)
            raise RuntimeError(f"simulator exited at start: {stderr.read()[-2000:]}")
        try:
            if server.health()["status"] == "ok":
                return server
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("simulator did not become healthy within 60 s")


def stop_server(server: Server) -> tuple[int, str, str]:
    """SIGTERM the server; returns its exit code, stdout and stderr."""
    server.process.terminate()
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    outputs = []
    for stream in (server.stdout, server.stderr):
        stream.seek(0)
        outputs.append(stream.read())
        stream.close()
    return server.process.returncode, outputs[0], outputs[1]
