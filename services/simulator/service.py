"""`llmrl serve simulator`: the dm_env_rpc server on the gRPC port; on the HTTP port /health,
/metrics and every registered env over OpenEnv's protocol at `/openenv/<env>` (WebSocket
sessions at `/openenv/<env>/ws`, `openenv_server.py`, docs/operations/openenv.md); JSON logs
on stderr, graceful shutdown on SIGTERM/SIGINT. With a token (LLMRL_TOKEN) every HTTP path but
/health needs it, OpenEnv's included.

Settings (`--set key=value` or a YAML file), with defaults sized for a small machine; each
bounds the whole server, whatever the number of connections, and a request beyond one is
refused naming the setting, the current use and the limit:

* `max_connections` (concurrent client streams, default 64),
* `max_envs_per_world` (default 4096) and `max_envs_total` (envs of all worlds together,
  default 16384),
* `max_workers_per_world` (worker processes of one world, `num_workers`, default 4) and
  `max_workers_total` (worker processes of all worlds together, default 8; each is a Python
  process of about 70 MB),
* `max_worlds_per_connection` (worlds one client stream may hold, default 8),
* `grace_s` (seconds open streams get to finish at shutdown, default 1; a finite number up to
  600, so that a shutdown ends),
* `openenv` (serve the OpenEnv endpoints on the HTTP port, default true). An OpenEnv session
  counts as one connection holding one env against `max_connections` and `max_envs_total`;
* `openenv_idle_s` (default 600): an OpenEnv session that sends no message for this long is
  closed with an error naming the setting, so an abandoned client gives its place back (a
  finite number of seconds, up to a day).
"""

from __future__ import annotations

import math
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import Counter, Gauge

from llmrl.common.auth import configured_token
from llmrl.common.label_values import BoundedLabelValues
from llmrl.common.logs import configure_logging, log_event
from llmrl.common.metrics import serve_health_and_metrics
from llmrl.simulator.server import (
    MAX_CONNECTIONS,
    MAX_ENVS_PER_WORLD,
    MAX_ENVS_TOTAL,
    MAX_WORKERS_PER_WORLD,
    MAX_WORKERS_TOTAL,
    MAX_WORLDS_PER_CONNECTION,
    SimulatorServicer,
    create_server,
)

SETTINGS_DEFAULTS: dict[str, Any] = {
    "max_connections": MAX_CONNECTIONS,
    "grace_s": 1.0,
    "max_envs_per_world": MAX_ENVS_PER_WORLD,
    "max_worlds_per_connection": MAX_WORLDS_PER_CONNECTION,
    "max_envs_total": MAX_ENVS_TOTAL,
    "max_workers_per_world": MAX_WORKERS_PER_WORLD,
    "max_workers_total": MAX_WORKERS_TOTAL,
    "openenv": True,
    "openenv_idle_s": 600.0,
}
MAX_IDLE_S = 86_400.0  # an idle session is closed after at most a day
MAX_GRACE_S = 600.0  # a shutdown waits at most this long for open streams
_COUNT_SETTINGS = ("max_connections", "max_envs_per_world", "max_worlds_per_connection",
                   "max_envs_total", "max_workers_per_world", "max_workers_total")  # fmt: skip

_WORLDS = Gauge("llmrl_simulator_worlds", "Worlds currently hosted by the simulator")
_ENVS = Gauge("llmrl_simulator_envs", "Envs of the worlds currently hosted by the simulator")
_ENV_STEPS = Counter(
    "llmrl_simulator_env_steps", "Env steps taken (a world step of N envs counts N)"
)
_ERRORS = Counter(
    "llmrl_simulator_errors", "Requests refused with a dm_env_rpc error", ["request", "field"]
)


# a field can be a setting name the caller made up: bounded so /metrics cannot grow without end
_ERROR_FIELDS = BoundedLabelValues(limit=64)


class PrometheusMetrics:
    def world_count(self, count: int) -> None:
        _WORLDS.set(count)

    def env_count(self, count: int) -> None:
        _ENVS.set(count)

    def env_steps(self, count: int) -> None:
        _ENV_STEPS.inc(count)

    def error(self, request: str, field: str) -> None:
        _ERRORS.labels(request=request, field=_ERROR_FIELDS(field.split("[")[0])).inc()


def _check_settings(settings: dict[str, Any]) -> dict[str, Any]:
    unknown = set(settings) - set(SETTINGS_DEFAULTS)
    if unknown:
        raise ValueError(
            f"unknown simulator setting(s) {', '.join(sorted(unknown))}; settings: "
            f"{', '.join(SETTINGS_DEFAULTS)}"
        )
    merged = {**SETTINGS_DEFAULTS, **settings}
    for name in _COUNT_SETTINGS:
        value = merged[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {merged[name]!r}")
    if not isinstance(merged["openenv"], bool):
        raise ValueError(f"openenv: expected true or false, got {merged['openenv']!r}")
    # a shutdown must end, an idle session must be closed: inf (or nan, or a string) would
    # wait forever, or fail late
    for name, low, high in (("grace_s", 0, MAX_GRACE_S), ("openenv_idle_s", 1, MAX_IDLE_S)):
        value = merged[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not low <= value <= high
        ):
            raise ValueError(
                f"{name}: expected a finite number of seconds from {low:g} to {high:g}, "
                f"got {value!r}"
            )
    return merged


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    """Serve until SIGTERM or SIGINT, then stop taking requests and destroy every world."""
    logger = configure_logging("simulator")
    try:
        options = _check_settings(settings)
    except ValueError as exc:
        raise SystemExit(f"simulator: {exc}") from None
    servicer = SimulatorServicer(
        PrometheusMetrics(),
        max_envs_per_world=options["max_envs_per_world"],
        max_worlds_per_connection=options["max_worlds_per_connection"],
        max_envs_total=options["max_envs_total"],
        max_workers_per_world=options["max_workers_per_world"],
        max_workers_total=options["max_workers_total"],
        max_connections=options["max_connections"],
    )
    token = configured_token()
    try:
        grpc_server, bound_grpc = create_server(host, grpc_port or 0, servicer, token=token)
    except OSError as exc:
        raise SystemExit(f"simulator: {exc}") from None

    def check() -> dict[str, Any]:  # what /health reports
        return {
            "worlds": servicer.world_count,
            "envs": servicer.env_count,
            "workers": servicer.worker_count,
        }

    try:
        openenv = options["openenv_idle_s"] if options["openenv"] else None
        http = _start_http(servicer, token, host, port, check, openenv, logger)
    except (OSError, ValueError) as exc:  # a busy port, or a bad LLMRL_AUTH_OPEN
        grpc_server.stop(grace=None)
        raise SystemExit(f"simulator: cannot serve HTTP on {host}:{port}: {exc}") from None
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log_event(logger, "stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    log_event(
        logger,
        "simulator listening",
        host=host,
        grpc_port=bound_grpc,
        http_port=http.port,
        openenv=http.openenv,
        auth=token is not None,
    )
    try:
        stop.wait()
    finally:
        grpc_server.stop(grace=options["grace_s"]).wait()
        http.stop()
        servicer.destroy_all()
        log_event(logger, "simulator stopped")


class _Http:
    """What serves the HTTP port: its bound port, whether it serves OpenEnv, how to stop it."""

    def __init__(self, port: int, openenv: bool, stop: Callable[[], None]) -> None:
        self.port, self.openenv, self.stop = port, openenv, stop


def _start_http(
    servicer: SimulatorServicer,
    token: str | None,
    host: str,
    port: int,
    check: Callable[[], dict[str, Any]],
    openenv: float | None,
    logger: Any,
) -> _Http:
    """The HTTP port: FastAPI with /health, /metrics and the OpenEnv routes, whose idle
    sessions close after `openenv` seconds; with None (or without FastAPI/uvicorn installed)
    the small stdlib server of /health and /metrics."""
    if openenv is not None:
        try:
            from llmrl.simulator.openenv_server import (
                HttpServer,
                simulator_app,
                websockets_available,
            )

            app, endpoints = simulator_app(servicer, token, check, idle_s=openenv)
        except ImportError as exc:  # the `serve` extra is not installed: no OpenEnv
            log_event(logger, "openenv unavailable", reason=f"{exc.name} is not installed")
        else:
            if not websockets_available():
                log_event(logger, "openenv sessions unavailable",
                          reason="install websockets for /openenv/<env>/ws")  # fmt: skip
            server = HttpServer(app, host, port)
            server.start()

            def stop() -> None:
                server.stop()
                endpoints.close_all()

            return _Http(server.port, True, stop)
    http_server = serve_health_and_metrics(port, "simulator", check, host, token)
    return _Http(http_server.server_address[1], False, http_server.shutdown)


# Replaces itself with argv[1:], after asking Linux to SIGTERM it when its parent dies.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM); "  # PR_SET_PDEATHSIG
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def start_subprocess(
    port: int,
    grpc_port: int,
    host: str = "127.0.0.1",
    settings: dict[str, Any] | None = None,
    **popen_kwargs: Any,
) -> subprocess.Popen:
    """`llmrl serve simulator` as a child process (tests, benchmarks), with `settings` as
    `--set` overrides.

    On Linux the child is stopped when this process dies, even by SIGKILL, so that a killed
    test run leaves no server behind; Linux means the thread that started it, so start it from
    a thread that outlives it (not a timer's).
    """
    command = [str(Path(sys.executable).with_name("llmrl")), "serve", "simulator"]
    command += ["--host", host, "--port", str(port), "--grpc-port", str(grpc_port)]
    for name, value in (settings or {}).items():
        command += ["--set", f"{name}={value}"]
    if sys.platform == "linux":
        command = [sys.executable, "-c", _DIE_WITH_PARENT, *command]
    return subprocess.Popen(command, **popen_kwargs)
