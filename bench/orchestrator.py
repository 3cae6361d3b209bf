"""Orchestrator throughput: episode jobs per second through the Redis queue with 1 and 2 rollout
workers, and the per-episode overhead of service mode relative to embedded mode.

A trivial environment (tests/support/tiny_corridor.py: TinyCorridor of length 1, one step
per episode, played by the `oracle` planner) makes the episode itself nearly free, so the
figures are the machinery's cost: job XADD, XREADGROUP by a worker process, the rollout loop,
result XADD, XACK, the orchestrator's collector storing the record in SQLite.

* embedded: the in-process executor (in-memory queues, same rollout loop), one process.
* service: a Redis server (AOF as deployed) and `llmrl worker` processes (in-process worlds:
  `--simulator local`, so no gRPC is measured here; bench/simulator.py covers that), with the
  orchestrator's QueueExecutor and ResultCollector in this process.

Usage: python bench/orchestrator.py [--episodes 400] [--workers 1,2]
The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY_ENV_DIR = REPO / "tests"  # holds the `support` package
sys.path.insert(0, str(TINY_ENV_DIR))
os.environ["LLMRL_PLUGINS"] = "support.tiny_corridor"

import redis  # noqa: E402
import support.tiny_corridor  # noqa: E402, F401  (registers TinyCorridor)

from llmrl.agents import EpisodeJob, RolloutResources  # noqa: E402
from llmrl.common.queues import RedisBroker  # noqa: E402
from llmrl.common.store import RunStore  # noqa: E402
from llmrl.orchestrator.executors import (  # noqa: E402
    QueueExecutor,
    ResultCollector,
    embedded_executor,
)
from llmrl.orchestrator.launcher import redis_command  # noqa: E402

ENV_KWARGS = {"length": 1}
POLICY = {"kind": "planner", "name": "oracle", "kwargs": {}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def make_jobs(run_id: str, n: int, phase: str = "bench") -> list[EpisodeJob]:
    return [
        EpisodeJob(run_id, f"{phase}/{i}", "TinyCorridor", i, POLICY, dict(ENV_KWARGS))
        for i in range(n)
    ]


def run_jobs(executor, store: RunStore, run_id: str, jobs: list[EpisodeJob]) -> float:
    started = time.perf_counter()
    executor.run_jobs(jobs, lambda record: None, lambda: False)
    elapsed = time.perf_counter() - started
    assert store.count_episodes(run_id, jobs[0].episode_id.split("/")[0]) == len(jobs)
    return elapsed


def bench_embedded(tmp: Path, episodes: int) -> float:
    store = RunStore(tmp / "embedded.sqlite")
    run_id = store.create_run("bench", {}, tmp)
    resources = RolloutResources()
    executor = embedded_executor(store, resources)
    run_jobs(executor, store, run_id, make_jobs(run_id, 20, "warmup"))
    elapsed = run_jobs(executor, store, run_id, make_jobs(run_id, episodes))
    resources.close()
    store.close()
    return elapsed


class RedisProcess:
    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        (tmp / "redis").mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", *redis_command(self.port, tmp / "redis")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url)
        for _ in range(200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)


def start_workers(count: int, redis_url: str, tmp: Path) -> list[subprocess.Popen]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TINY_ENV_DIR), env.get("PYTHONPATH")]))
    env["LLMRL_LOG_LEVEL"] = "WARNING"
    workers = []
    for i in range(count):
        log = open(tmp / f"worker-{count}-{i}.log", "wb")  # noqa: SIM115 - the child owns it
        workers.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llmrl.cli",
                    "worker",
                    "--redis-url",
                    redis_url,
                    "--simulator",
                    "local",
                    "--llm-gateway",
                    "local",
                    "--port",
                    "0",
                    "--name",
                    f"bench-{count}-{i}",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        log.close()
    return workers


def bench_service(tmp: Path, redis_url: str, workers: int, episodes: int) -> float:
    store = RunStore(tmp / f"service-{workers}.sqlite")
    broker = RedisBroker(redis_url)
    broker.client.flushdb()  # our own Redis: each setting starts from empty streams
    run_id = store.create_run("bench", {}, tmp)
    collector = ResultCollector(store, broker)
    stop = threading.Event()
    thread = threading.Thread(target=collector.run_forever, args=(stop,), daemon=True)
    thread.start()
    executor = QueueExecutor(broker, collector)
    procs = start_workers(workers, redis_url, tmp)
    try:
        run_jobs(executor, store, run_id, make_jobs(run_id, 20 * workers, "warmup"))
        return run_jobs(executor, store, run_id, make_jobs(run_id, episodes))
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(20)
        stop.set()
        thread.join(5)
        broker.close()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=400, help="timed episodes per setting")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, e.g. 1,2,4")
    args = parser.parse_args()
    worker_counts = [int(w) for w in args.workers.split(",")]
    results: dict[str, float | int | str] = {"episodes": args.episodes, "env": "TinyCorridor-1"}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        embedded_s = bench_embedded(tmp, args.episodes)
        results["embedded_episodes_per_s"] = round(args.episodes / embedded_s, 1)
        results["embedded_ms_per_episode"] = round(1000 * embedded_s / args.episodes, 3)
        print(f"embedded: {results['embedded_episodes_per_s']} episodes/s", flush=True)
        redis_server = RedisProcess(tmp)
        try:
            for workers in worker_counts:
                elapsed = bench_service(tmp, redis_server.url, workers, args.episodes)
                results[f"service_{workers}w_episodes_per_s"] = round(args.episodes / elapsed, 1)
                results[f"service_{workers}w_ms_per_episode"] = round(
                    1000 * elapsed / args.episodes, 3
                )
                print(
                    f"service, {workers} worker(s): {args.episodes / elapsed:.1f} jobs/s",
                    flush=True,
                )
        finally:
            redis_server.stop()
    if 1 in worker_counts:
        service_ms = float(results["service_1w_ms_per_episode"])
        embedded_ms = float(results["embedded_ms_per_episode"])
        results["service_overhead_ms_per_episode"] = round(service_ms - embedded_ms, 3)
        results["service_over_embedded_time_ratio"] = round(service_ms / embedded_ms, 2)
    if 1 in worker_counts and 2 in worker_counts:
        results["speedup_2w_over_1w"] = round(
            float(results["service_2w_episodes_per_s"])
            / float(results["service_1w_episodes_per_s"]),
            2,
        )
    results["cpu_cores"] = os.cpu_count() or 0
    print(json.dumps(results))


if __name__ == "__main__":
    main()
