"""`llmrl up`: every service as a local process, for machines without Docker.

Starts its own Redis (AOF persistence under LLMRL_HOME/redis; port 6379 when free, else a
free one) unless given `--redis-url`, then simulator, llm_gateway, learner, annotator,
orchestrator and N rollout workers, each with the same command as its docker-compose service
(`service_commands`; a test checks the two agree). Settings travel as environment variables
(LLMRL_REDIS_URL, LLMRL_HOME, LLMRL_<SERVICE>_PORT...). A service whose module does not exist
in this version is reported and skipped, never imitated. Logs go to LLMRL_HOME/logs/<name>.log.
Ctrl-C or SIGTERM stops everything: workers first, Redis last.

The Redis it starts requires a password (LLMRL_REDIS_PASSWORD when set, else one generated per
`llmrl up`), written to a config file only its owner can read (never on a command line), and
passed to every process inside LLMRL_REDIS_URL (`redis://:<password>@host:port/0`) and as
LLMRL_REDIS_PASSWORD, whose value the services' log formatter redacts; what `llmrl up` prints
shows the URL masked.

The deployment is closed: every service requires one shared token (LLMRL_TOKEN; the user's
when set, else one generated per `llmrl up` and printed), which every process gets in its
environment. Children die with the launcher, even when it is SIGKILLed (launcher_safety), and
a port already taken stops `llmrl up` before it starts anything, naming the port and its holder.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from rich.console import Console
from rich.table import Table

from llmrl.common import config as cfg
from llmrl.common.auth import TOKEN_VAR, configured_token, generate_token
from llmrl.common.console import output_console
from llmrl.common.tls import http_scheme, http_verify
from llmrl.orchestrator.launcher_safety import die_with_parent, port_holder, port_listened

# Start order; shutdown goes the other way.
SERVICES = ("simulator", "llm_gateway", "learner", "annotator", "orchestrator")
READY_TIMEOUT_S = 120.0


@dataclass
class ProcessSpec:
    name: str
    args: list[str]  # after the program: what `llmrl <args>` runs (compose: command)
    env: dict[str, str] = field(default_factory=dict)
    health_url: str | None = None
    program: str = "llmrl"
    ports: dict[str, int] = field(default_factory=dict)  # what it listens on, e.g. {"HTTP": 8000}
    password: str | None = field(default=None, repr=False)  # Redis: its requirepass

    def argv(self) -> list[str]:
        if self.program == "llmrl":
            return [sys.executable, "-m", "llmrl.cli", *self.args]
        return [self.program, *self.args]


def service_commands(workers: int) -> dict[str, list[str]]:
    """The `llmrl` arguments of each service (the same in docker-compose.yml)."""
    commands = {service: ["serve", service] for service in SERVICES}
    for i in range(1, workers + 1):
        commands[f"worker-{i}"] = ["worker"]
    return commands


def redis_command(port: int, data_dir: Path) -> list[str]:
    return [
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--dir",
        str(data_dir),
    ]


REDIS_PASSWORD_VAR = "LLMRL_REDIS_PASSWORD"


def redis_url_with_password(port: int, password: str, host: str = "127.0.0.1") -> str:
    return f"redis://:{quote(password, safe='')}@{host}:{port}/0"


def masked_url(url: str) -> str:
    """`url` with its password (if any) replaced by ***, for printing."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def check_redis_password(password: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9._~+/=-]{16,}", password):
        raise SystemExit(
            f"llmrl up: {REDIS_PASSWORD_VAR} must be at least 16 characters of letters, digits "
            "and ._~+/=- (try: openssl rand -hex 32)"
        )
    return password


def write_redis_config(data_dir: Path, password: str) -> Path:
    """A config file with `requirepass`, readable by its owner only (a password given on the
    command line would show in `ps`)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "llmrl-redis.conf"
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(f'requirepass "{password}"\n')
    return path


def service_available(service: str) -> bool:
    return importlib.util.find_spec(f"llmrl.{service}.service") is not None


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def plan_processes(
    workers: int,
    redis_url: str,
    home: Path,
    console: Console,
    token: str | None = None,
    redis_password: str | None = None,
) -> tuple[list[ProcessSpec], list[str]]:
    """The processes to start (each given `token` as LLMRL_TOKEN and the Redis password, whose
    value their logs redact) and notes on what is skipped."""
    notes: list[str] = []
    env = {"LLMRL_REDIS_URL": redis_url, "LLMRL_HOME": str(home)}
    if token:
        env[TOKEN_VAR] = token
    if redis_password:
        env[REDIS_PASSWORD_VAR] = redis_password
    if not service_available("simulator"):
        env["LLMRL_SIMULATOR_ADDRESS"] = "local"
        notes.append("workers and recipes play in-process worlds (no simulator service)")
    specs: list[ProcessSpec] = []
    commands = service_commands(workers)
    for service in SERVICES:
        if not service_available(service):
            notes.append(f"{service}: not implemented in this version of llmrl (skipped)")
            continue
        url = f"{http_scheme()}://{cfg.service_host(service)}:{cfg.service_port(service)}/health"
        ports = {"HTTP": cfg.service_port(service)}
        if cfg.DEFAULT_PORTS[service].grpc is not None:
            ports["gRPC"] = cfg.service_grpc_port(service)
        specs.append(ProcessSpec(service, commands[service], dict(env), url, ports=ports))
    base_port = cfg.service_port("worker")
    for i in range(1, workers + 1):
        worker_env = {**env, "LLMRL_WORKER_PORT": str(base_port + i - 1)}
        url = f"{http_scheme()}://127.0.0.1:{base_port + i - 1}/health"
        ports = {"HTTP": base_port + i - 1}
        specs.append(
            ProcessSpec(f"worker-{i}", commands[f"worker-{i}"], worker_env, url, ports=ports)
        )
    return specs, notes


def taken_ports(specs: list[ProcessSpec]) -> list[str]:
    """One line per port a process would listen on that is already taken, naming its holder."""
    problems = []
    for spec in specs:
        service = spec.name.split("-", 1)[0]  # worker-2: a worker
        host = cfg.service_host(service) if service in cfg.DEFAULT_PORTS else "127.0.0.1"
        for kind, port in spec.ports.items():
            if not port_listened(port, host):
                continue
            holder = port_holder(port) or "a process llmrl cannot identify"
            problems.append(f"port {port} ({spec.name} {kind}) is taken by {holder}")
    return problems


class Launcher:
    def __init__(self, home: Path, console: Console) -> None:
        self.home, self.console = home, console
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[ProcessSpec, subprocess.Popen]] = []
        self.stop_requested = False  # set by the SIGINT/SIGTERM handler

    def start(self, spec: ProcessSpec) -> subprocess.Popen:
        log_file = open(self.logs / f"{spec.name}.log", "ab")  # noqa: SIM115 - the child owns it
        env = {**os.environ, **spec.env}
        proc = subprocess.Popen(
            spec.argv(),
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the launcher only; it stops them in order
            preexec_fn=functools.partial(die_with_parent, os.getpid()),  # no orphans
        )
        log_file.close()
        self.procs.append((spec, proc))
        return proc

    def wait_ready(self, spec: ProcessSpec, proc: subprocess.Popen, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stop_requested:
                return "stopping"
            if proc.poll() is not None:
                return f"exited with code {proc.returncode} (see {self.logs / spec.name}.log)"
            if spec.health_url is None:
                return "started"
            try:
                answer = httpx.get(spec.health_url, timeout=1.0, verify=http_verify())
                if answer.status_code == 200:
                    return "ready"
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return f"not ready after {timeout:.0f} s (see {self.logs / spec.name}.log)"

    def stop_all(self, grace_s: float = 15.0) -> None:
        for spec, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    self.console.print(f"{spec.name} did not stop in {grace_s:.0f} s: killed")
                    proc.kill()
                    proc.wait()


def redis_spec(home: Path, port: int | None = None, password: str | None = None) -> ProcessSpec:
    """Redis on `port` (default 6379 when free, else any free port), AOF under home/redis,
    requiring `password` (given in its config file, see `start_redis`)."""
    if shutil.which("redis-server") is None:
        raise RuntimeError("redis-server is not on PATH; install Redis or pass --redis-url")
    if port is None:
        port = 6379 if port_free(6379) else free_port()
    data_dir = home / "redis"
    spec = ProcessSpec("redis", redis_command(port, data_dir), program="redis-server")
    spec.ports = {"Redis": port}
    spec.password = password
    return spec


def start_redis(launcher: Launcher, spec: ProcessSpec) -> tuple[str, subprocess.Popen]:
    """Start the Redis of `spec` and wait for it; its URL (with the password) and process."""
    data_dir = launcher.home / "redis"
    data_dir.mkdir(parents=True, exist_ok=True)
    password = spec.password
    port = spec.ports["Redis"]
    if password:  # the config file comes first on redis-server's command line
        spec.args = [str(write_redis_config(data_dir, password)), *redis_command(port, data_dir)]
    proc = launcher.start(spec)
    url = redis_url_with_password(port, password) if password else f"redis://127.0.0.1:{port}/0"
    import redis

    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    client.close()
    return url, proc


def up(
    workers: int = 2,
    redis_url: str | None = None,
    home: str | Path | None = None,
    redis_port: int | None = None,
) -> None:
    """Start everything, print where it listens, and wait for Ctrl-C/SIGTERM.

    Without `redis_url` a Redis is started on `redis_port` (default 6379 when free, else any
    free port). Refuses to start (SystemExit naming them) when any of the ports is taken.
    """
    console = output_console()  # the table whole in a log too
    home_dir = Path(home).resolve() if home else cfg.home_dir()
    home_dir.mkdir(parents=True, exist_ok=True)
    generated = configured_token() is None
    token = configured_token() or generate_token()  # a user-set LLMRL_TOKEN wins
    redis_password = None
    own_redis = None
    if redis_url is None:
        redis_password = check_redis_password(
            os.environ.get(REDIS_PASSWORD_VAR) or generate_token()
        )
        own_redis = redis_spec(home_dir, redis_port, redis_password)
        redis_url = redis_url_with_password(own_redis.ports["Redis"], redis_password)
    specs, notes = plan_processes(workers, redis_url, home_dir, console, token, redis_password)
    problems = taken_ports(([own_redis] if own_redis else []) + specs)
    if problems:
        raise SystemExit("llmrl up: cannot start:\n  " + "\n  ".join(problems))
    launcher = Launcher(home_dir, console)

    def request_stop(signum: int, _frame: Any) -> None:
        launcher.stop_requested = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    table = Table(title=f"llmrl up (LLMRL_HOME={home_dir})")
    for column in ("process", "pid", "state", "address"):
        table.add_column(column)
    try:
        if own_redis is not None:
            redis_url, proc = start_redis(launcher, own_redis)
            state = "ready" if proc.poll() is None else f"exited ({proc.returncode})"
            table.add_row("redis", str(proc.pid), state, masked_url(redis_url) + " (AOF)")
        # All at once (each connects to the others lazily), then wait for each to be healthy.
        started = [(spec, launcher.start(spec)) for spec in specs]
        for spec, proc in started:
            state = launcher.wait_ready(spec, proc, READY_TIMEOUT_S)
            address = spec.health_url.rsplit("/health", 1)[0] if spec.health_url else ""
            table.add_row(spec.name, str(proc.pid), state, address)
        console.print(table)
        for note in notes:
            console.print(f"[yellow]note:[/] {note}")
        orchestrator = cfg.http_url("orchestrator")
        console.print(
            f"orchestrator: {orchestrator}/docs  —  try: llmrl submit evaluate "
            "env=SimpleDoorKey planner=oracle episodes=20 --wait"
        )
        if generated:  # the user has no other way to learn it
            console.print(
                f"token (generated for this `llmrl up`; every service requires it): {token}\n"
                f"  clients read it from the environment: export {TOKEN_VAR}={token}"
            )
        else:  # the user set it: never echo a secret they already hold into logs or scrollback
            console.print(f"token: {TOKEN_VAR} from your environment (every service requires it)")
        console.print(f"logs in {launcher.logs}; Ctrl-C stops everything")
        sys.stdout.flush()  # the table is the readiness signal for scripts reading a pipe
        while not launcher.stop_requested:
            for spec, proc in launcher.procs:
                if proc.poll() is not None and not getattr(proc, "_reported", False):
                    proc._reported = True  # type: ignore[attr-defined]
                    console.print(f"[red]{spec.name} exited with code {proc.returncode}")
            time.sleep(0.5)
    finally:
        console.print("stopping every service ...")
        launcher.stop_all()
        console.print("stopped")
        sys.stdout.flush()
