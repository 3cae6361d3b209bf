"""`llmrl worker`: one rollout worker pulling episode jobs from the Redis jobs stream.

Any number of workers can run against one Redis (on any machine that reaches it and the
simulator). A worker plays each job with the shared rollout loop (`llmrl.agents.run_episode`), on a
simulator world over gRPC (`--simulator local` plays in-process worlds instead), and connects
to the LLM gateway only when a job's policy needs it. SIGTERM/SIGINT: the episode in hand is
finished and delivered, then the worker exits. SIGKILL: its job is reclaimed by another worker
after the queue's idle timeout (LLMRL_CLAIM_IDLE_S, default 30 s).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from llmrl.agents import RolloutResources
from llmrl.common import config as cfg
from llmrl.common.auth import configured_token
from llmrl.common.logs import configure_logging, log_event
from llmrl.common.metrics import serve_health_and_metrics
from llmrl.common.plugins import load_plugins
from llmrl.common.queues import DEFAULT_CLAIM_IDLE_S, RedisBroker
from llmrl.orchestrator.episode_worker import EpisodeWorker

CLAIM_IDLE_VAR = "LLMRL_CLAIM_IDLE_S"


def _address(value: str | None) -> str | None:
    return None if value in (None, "", "local") else value


def main(
    redis_url: str,
    simulator: str | None,
    llm_gateway: str | None,
    name: str | None = None,
    port: int | None = None,
) -> None:
    log = configure_logging("worker")
    load_plugins()
    name = name or f"{socket.gethostname()}-{os.getpid()}"
    claim_idle = float(os.environ.get(CLAIM_IDLE_VAR) or DEFAULT_CLAIM_IDLE_S)
    broker = RedisBroker(redis_url, claim_idle_s=claim_idle)
    resources = RolloutResources(simulator=_address(simulator), llm_gateway=_address(llm_gateway))
    worker = EpisodeWorker(broker, resources, name)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log_event(log, "stopping after the current episode", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    http = None
    if port:
        http = serve_health_and_metrics(
            port,
            "worker",
            check=lambda: {"name": name, "episodes": worker.episodes_played},
            host=cfg.service_host("worker"),
            token=configured_token(),
        )
    log_event(
        log, "worker started", name=name, simulator=simulator or "local", claim_idle_s=claim_idle
    )
    try:
        while not stop.is_set():
            try:
                worker.process(block_s=1.0)
            except Exception as exc:  # Redis restarting or unreachable: wait and retry
                log_event(log, "queue unavailable", logging.WARNING, error=str(exc))
                stop.wait(0.5)
    finally:
        resources.close()
        broker.close()
        if http is not None:
            http.shutdown()
        log_event(log, "worker stopped", name=name, episodes=worker.episodes_played)


def run_until(worker: EpisodeWorker, stop: threading.Event, idle_sleep: float = 0.0) -> None:
    """Process jobs until `stop` (used by the bench to run workers on threads)."""
    while not stop.is_set():
        if not worker.process(block_s=0.2) and idle_sleep:
            time.sleep(idle_sleep)
