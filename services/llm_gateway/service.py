"""`llmrl serve llm_gateway`: the gRPC service and the REST API in one process.

Both share one `Gateway` (models, cache, ledger, metrics). SIGTERM or Ctrl-C stops accepting
requests, lets the ones in flight finish (grace period), then closes models and the cache.
The process then exits without waiting for threads that outlive that (a request inside a
model's load, idle worker threads).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Any

import uvicorn

from llmrl.common.auth import configured_token
from llmrl.common.config import env_int
from llmrl.common.logs import configure_logging, log_event
from llmrl.common.tls import server_tls, uvicorn_options
from llmrl.llm_gateway.gateway import Gateway
from llmrl.llm_gateway.grpc_server import start_grpc_server
from llmrl.llm_gateway.rest import create_app

GRACE_S = 10  # seconds requests in flight get at shutdown, unless GRACE_ENV says otherwise
GRACE_ENV = "LLMRL_GATEWAY_GRACE_S"
# The HTTP client under the `openai` backend (httpx; httpx2 in newer openai releases) logs every
# upstream request at INFO: one JSON line per model call (~80 us of formatting and redaction,
# ~4% of a cache miss's CPU in bench/gateway_peers.py), for calls that the gateway's metrics and
# ledger count already. Served at WARNING unless the gateway logs at DEBUG.
UPSTREAM_CLIENT_LOGGERS = ("httpx", "httpx2")


def quiet_upstream_client_logs(log: logging.Logger) -> None:
    """Keep the upstream HTTP client's per-request INFO lines out of the gateway's log (its
    warnings and errors stay), unless the gateway's log level is DEBUG."""
    if log.getEffectiveLevel() > logging.DEBUG:
        for name in UPSTREAM_CLIENT_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def grace_period_s() -> int:
    """The shutdown grace period in whole seconds: $LLMRL_GATEWAY_GRACE_S, else GRACE_S (set
    it to match an orchestrator's kill timeout, e.g. Kubernetes' terminationGracePeriodSeconds)."""
    return env_int(GRACE_ENV, GRACE_S, minimum=1, what="a whole number of seconds, at least 1")


class RestServer:
    """Uvicorn serving an ASGI app (e.g. `create_app(gateway)`) on an already bound socket,
    in a background thread (port 0 picks a free port; read it from `.port`). For tests and
    benchmarks; `serve` is the production entry point."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((host, port))
        self.host, self.port = host, self.socket.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, **uvicorn_options())
        self.scheme = "https" if server_tls() else "http"
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def start(self) -> RestServer:
        self.thread.start()
        while not self.server.started and self.thread.is_alive():
            threading.Event().wait(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=GRACE_S)
        self.socket.close()


def serve(host: str, port: int, grpc_port: int | None, settings: dict[str, Any]) -> None:
    """Run the gateway (REST on `port`, gRPC on `grpc_port`) until SIGTERM or Ctrl-C."""
    log = configure_logging("llm_gateway")
    quiet_upstream_client_logs(log)
    grace = grace_period_s()  # a bad value stops here, before any model loads
    gateway = Gateway(settings, mode="service")
    token = configured_token()
    grpc_server = start_grpc_server(gateway, host, grpc_port, token=token) if grpc_port else None
    log_event(
        log, "llm gateway serving", host=host, port=port, grpc_port=grpc_port,
        models=list(gateway.settings.models), cache=type(gateway.cache).__name__,
        auth=token is not None,
    )  # fmt: skip
    config = uvicorn.Config(
        create_app(gateway, token), host=host, port=port, log_level="warning", access_log=False,
        timeout_graceful_shutdown=grace, **uvicorn_options(),
    )  # fmt: skip
    # uvicorn catches SIGTERM/SIGINT, shuts down gracefully, then re-raises the signal to the
    # handler that was installed before it: make that one a no-op so we can clean up and exit 0.
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: received.append(signum))
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        uvicorn.Server(config).run()
    finally:
        if grpc_server is not None:
            grpc_server.stop(grace).wait()
        gateway.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        log_event(log, "llm gateway stopped", signals=received)
    exit_if_threads_linger(log)


def exit_if_threads_linger(log: logging.Logger, wait_s: float = 1.0) -> None:
    """End the process now if threads outlive the shutdown. Everything the gateway owns is
    closed by then; what is left is a request thread still inside work that cannot be told to
    stop (a model's load) or an idle worker thread (AnyIO's expire after 10 s), and Python
    would wait for each at exit."""
    deadline = time.monotonic() + wait_s
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    for thread in others:
        if not thread.daemon:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
    lingering = [t.name for t in others if t.is_alive() and not t.daemon]
    if lingering:
        log_event(log, "exiting without lingering threads", logging.DEBUG, threads=lingering)
        for handler in logging.getLogger().handlers + log.handlers:
            handler.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
