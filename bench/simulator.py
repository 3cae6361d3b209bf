"""Env-steps/s of a world in-process versus through the simulator's gRPC server.

For each env and each world size N it steps, with random valid actions:
  * `in_process`: a `World` in this process (one loop over the envs);
  * `remote`: a `RemoteWorld` on a server started in its own process (one server process);
  * `remote_sharded`: the same with the world's envs split over `--workers` server workers;
and reports the ratios remote/in-process. The three are measured in interleaved rounds and
the best round of each is kept, so that load from other processes hurts them alike.
The last line printed is one JSON object with every figure.

    python bench/simulator.py                       # ~2-3 minutes on 2 cores
    python bench/simulator.py --seconds 3 --rounds 5 --sizes 1,8,32,64
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.world import World, env_ids

DEFAULT_ENVS = "SimpleDoorKey,BabyAIText-GoToLocal"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    http_port, grpc_port = free_port(), free_port()
    llmrl = Path(sys.executable).with_name("llmrl")
    command = [str(llmrl), "serve", "simulator", "--port", str(http_port)]
    command += ["--grpc-port", str(grpc_port)]
    env = dict(os.environ, LLMRL_LOG_LEVEL="WARNING")
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=2)
            return process, f"127.0.0.1:{grpc_port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the simulator server did not start")


def steps_per_second(world: Any, seconds: float, rng: np.random.Generator) -> float:
    """Env-steps/s of `world` over about `seconds`, with random valid low-level actions."""
    n, num_actions = world.num_envs, int(world.action_space.n)
    actions = rng.integers(0, num_actions, size=(256, n), dtype=np.int64)
    world.step(actions[0])  # warm up (first step resets every env)
    batches, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        world.step(actions[batches % 256])
        batches += 1
    return batches * n / elapsed


def bench_env(env: str, sizes: list[int], address: str, args: argparse.Namespace) -> dict:
    results: dict[str, Any] = {}
    rng = np.random.default_rng(0)
    for n in sizes:
        worlds = {
            "in_process": World(env, num_envs=n, seed=0),
            "remote": RemoteWorld(address, env, num_envs=n, seed=0),
            "remote_sharded": RemoteWorld(
                address, env, num_envs=n, seed=0, num_workers=min(args.workers, n)
            ),
        }
        best = dict.fromkeys(worlds, 0.0)
        try:
            for _ in range(args.rounds):
                for mode, world in worlds.items():
                    best[mode] = max(best[mode], steps_per_second(world, args.seconds, rng))
        finally:
            for world in worlds.values():
                world.close()
        row = {mode: round(value, 1) for mode, value in best.items()}
        row["ratio_remote"] = round(best["remote"] / best["in_process"], 3)
        row["ratio_remote_sharded"] = round(best["remote_sharded"] / best["in_process"], 3)
        results[str(n)] = row
        print(f"{env:>24} N={n:<3} " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS, help="comma-separated env ids")
    parser.add_argument("--sizes", default="1,8,32", help="envs per world, comma-separated")
    parser.add_argument("--seconds", type=float, default=1.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode (best is kept)")
    parser.add_argument("--workers", type=int, default=2, help="server workers when sharded")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    known = set(env_ids())
    wanted = [e for e in args.envs.split(",") if e]
    missing = [e for e in wanted if e not in known]
    process, address = start_server()
    figures: dict[str, Any] = {}
    try:
        for env in wanted:
            if env not in missing:
                figures[env] = bench_env(env, sizes, address, args)
    finally:
        process.terminate()
        process.wait(timeout=30)
    largest = str(max(sizes))
    summary = {
        "bench": "simulator",
        "unit": "env-steps/s",
        "cpus": os.cpu_count(),
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "workers": args.workers,
        "results": figures,
        f"ratio_remote_at_{largest}": {e: r[largest]["ratio_remote"] for e, r in figures.items()},
        f"ratio_remote_sharded_at_{largest}": {
            e: r[largest]["ratio_remote_sharded"] for e, r in figures.items()
        },
        "missing_envs": missing,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
