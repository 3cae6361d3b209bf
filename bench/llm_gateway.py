"""LLM gateway figures: cache-hit latency through gRPC and REST, local generation throughput
with 1, 4 and 8 concurrent clients (dynamic batching) and its ratio to sequential, and the
latency of scoring 6 candidates after a ~140-token prompt (cold, and with a prefix shared
with the previous prompt, as a planner's fixed instructions before a new observation).

The gateway runs as a real service process (`llmrl serve llm_gateway`, default model
SmolLM2-135M-Instruct, Redis cache on a private redis-server when one is on PATH, else SQLite);
this process is the client. Targets (issue 3): cache hit p50 <= 1 ms via gRPC; >= 3x sequential
throughput at 8 clients; score <= 150 ms.

    python bench/llm_gateway.py [--hits 500] [--max-tokens 32] [--rounds 2] [--clients 1,4,8]
                                [--torch-threads 1]

The last line printed is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

import httpx
import numpy as np
import yaml

from llmrl.llm_gateway.client import connect

PROMPT_140 = (
    "You are an agent in a grid world. The room is 8 by 8 cells and surrounded by walls. "
    "You see a red key two cells to your left, a locked red door in the north wall, a blue "
    "ball in the corner and a green box next to the door. Your mission is to open the red "
    "door and reach the goal square behind it. You can carry one object at a time; to open "
    "a locked door you must carry the key of its colour. Earlier you tried to open the door "
    "without the key and failed. Choose the single best next skill from the list."
)
CANDIDATES = [
    " go to the red key",
    " pick up the red key",
    " open the red door",
    " go to the blue ball",
    " toggle the green box",
    " drop the ball",
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentiles(samples: list[float]) -> dict[str, float]:
    ms = np.array(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3)}  # fmt: skip


def start_redis(workdir: Path) -> tuple[subprocess.Popen | None, str | None]:
    binary = shutil.which("redis-server")
    if binary is None:
        return None, None
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return process, f"redis://127.0.0.1:{port}/0"


def start_gateway(
    workdir: Path, redis_url: str | None, torch_threads: int | None
) -> tuple[subprocess.Popen, int, int]:
    cache = {"backend": "redis", "redis_url": redis_url} if redis_url else {
        "backend": "sqlite", "sqlite_path": str(workdir / "cache.sqlite")}  # fmt: skip
    config = workdir / "gateway.yaml"
    ledger = {"backend": "redis", "redis_url": redis_url} if redis_url else {"backend": "memory"}
    settings = {"cache": cache, "ledger": ledger, "torch_threads": torch_threads}
    config.write_text(yaml.safe_dump(settings))
    port, grpc_port = free_port(), free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llmrl.cli", "serve", "llm_gateway", "--port", str(port),
         "--grpc-port", str(grpc_port), "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=open(workdir / "gateway.log", "w"),  # noqa: SIM115
        env={**os.environ, "LLMRL_HOME": str(workdir)},
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the gateway exited: {(workdir / 'gateway.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return process, port, grpc_port
        except httpx.HTTPError:
            time.sleep(0.2)
    sys.exit("the gateway did not come up in 120 s")


def cache_hits(client, port: int, hits: int) -> dict[str, dict[str, float]]:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    client.chat(messages, max_tokens=16, run_id="bench-hits")  # the miss that fills the cache
    grpc_times = []
    for _ in range(hits):
        started = time.perf_counter()
        result = client.chat(messages, max_tokens=16, run_id="bench-hits")
        grpc_times.append(time.perf_counter() - started)
        assert result.cached
    body = {"model": "smollm2", "messages": messages, "max_tokens": 16}
    rest_times = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
        for _ in range(hits):
            started = time.perf_counter()
            response = http.post("/v1/chat/completions", json=body)
            rest_times.append(time.perf_counter() - started)
            assert response.headers["x-llmrl-cache"] == "hit"
    return {"grpc": percentiles(grpc_times), "rest": percentiles(rest_times)}


def throughput(client, clients: int, requests_per_client: int, max_tokens: int, tag: str) -> dict:
    """Completion tokens per second with `clients` threads each sending requests in turn."""

    def run(worker: int) -> int:
        tokens = 0
        for i in range(requests_per_client):
            result = client.chat(
                [{"role": "user", "content": f"Tell me a short story about robot {worker}-{i}."}],
                max_tokens=max_tokens, cache=False, run_id="bench-gen", tag=tag,
            )  # fmt: skip
            tokens += result.completion_tokens
        return tokens

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(run, range(clients)))
    elapsed = time.perf_counter() - started
    return {"clients": clients, "requests": clients * requests_per_client, "tokens": tokens,
            "seconds": round(elapsed, 2), "tokens_per_s": round(tokens / elapsed, 1)}  # fmt: skip


SITUATIONS = [
    "You now carry the red key.",
    "The red door is open now.",
    "You see the goal behind the door.",
    "You dropped the blue ball.",
    "The green box is empty.",
    "You stand next to the red door.",
]


def score_latency(client, repeats: int, shared_prefix: bool) -> dict[str, float]:
    """Median latency of scoring 6 candidates after a ~140-token prompt.

    Cold (`shared_prefix=False`): every prompt differs from its first token, so nothing of an
    earlier prompt can be reused. Planner-style (`shared_prefix=True`): the same context with a
    new last sentence each time, as a planner's fixed instructions and a new observation.
    """

    def prompt(i: int) -> str:
        if shared_prefix:
            return f"{PROMPT_140} {SITUATIONS[i % len(SITUATIONS)]} (step {i})"
        return f"Episode {i}. {PROMPT_140}"

    client.score(prompt(10_000), CANDIDATES, cache=False)  # warm-up
    times = []
    for i in range(repeats):
        started = time.perf_counter()
        client.score(prompt(i), CANDIDATES, cache=False, run_id="bench-score")
        times.append(time.perf_counter() - started)
    return {"prompt_tokens": client.count_tokens(prompt(0)), "candidates": len(CANDIDATES),
            "median_ms": round(median(times) * 1000, 1),
            "min_ms": round(min(times) * 1000, 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hits", type=int, default=500, help="cache hits timed per interface")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per generation")
    parser.add_argument("--rounds", type=int, default=2, help="requests per client")
    parser.add_argument("--clients", default="1,4,8", help="concurrent clients to measure")
    parser.add_argument(
        "--score-repeats", type=int, default=10, help="score requests per median latency"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads in the gateway (0: torch's default). 1 suits a shared 2-core box",
    )
    args = parser.parse_args()
    client_counts = [int(c) for c in args.clients.split(",")]

    figures: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="llmrl-bench-gateway-") as tmp:
        workdir = Path(tmp)
        redis, redis_url = start_redis(workdir)
        threads = args.torch_threads or None
        gateway, port, grpc_port = start_gateway(workdir, redis_url, threads)
        figures["torch_threads"] = threads or "default"
        try:
            client = connect(f"127.0.0.1:{grpc_port}")
            figures["cache"] = "redis" if redis_url else "sqlite"
            figures["cache_hit"] = cache_hits(client, port, args.hits)
            print("cache hit latency:", figures["cache_hit"], flush=True)
            figures["score_6_candidates"] = score_latency(client, args.score_repeats, False)
            print("score (cold prompts):", figures["score_6_candidates"], flush=True)
            figures["score_6_candidates_shared_prefix"] = score_latency(
                client, args.score_repeats, True
            )
            print("score (shared prefix):", figures["score_6_candidates_shared_prefix"], flush=True)
            # warm-up generation (first-call costs), then 1 client = sequential baseline
            throughput(client, 1, 1, 4, "warmup")
            runs = []
            for count in client_counts:
                runs.append(throughput(client, count, args.rounds, args.max_tokens, f"c{count}"))
                print("generation:", runs[-1], flush=True)
            sequential = next((r for r in runs if r["clients"] == 1), runs[0])["tokens_per_s"]
            figures["generation"] = {
                f"clients_{r['clients']}": {**r, "ratio_to_sequential":
                                            round(r["tokens_per_s"] / sequential, 2)}
                for r in runs
            }  # fmt: skip
            client.close()
        finally:
            gateway.send_signal(signal.SIGTERM)
            gateway.wait(timeout=60)
            if redis is not None:
                redis.terminate()
                redis.wait(timeout=10)
    hit = figures["cache_hit"]["grpc"]["p50_ms"]  # type: ignore[index]
    best = max(g["ratio_to_sequential"] for g in figures["generation"].values())  # type: ignore[union-attr]
    score_ms = figures["score_6_candidates"]["median_ms"]  # type: ignore[index]
    figures["targets"] = {
        "cache_hit_p50_grpc_le_1ms": hit <= 1.0,
        "throughput_8_clients_ge_3x": figures["generation"].get("clients_8", {}).get(  # type: ignore[union-attr]
            "ratio_to_sequential", best) >= 3.0,
        "score_le_150ms": score_ms <= 150.0,
    }  # fmt: skip
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
