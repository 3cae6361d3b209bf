"""Env-steps/s of a world in-process versus through the simulator's gRPC server.

For each env and each world size N it steps, with random valid actions:
  * `in_process`: a `World` in this process (one loop over the envs);
  * `remote`: a `RemoteWorld` on a server started in its own process (one server process);
  * `remote_sharded`: the same with the world's envs split over `--workers` server workers;
and reports the ratios remote/in-process. The three run back to back in many short rounds,
each replaying the same seeded episodes with the same random valid actions; a ratio is the
median of the per-round ratios, so that load from other processes (this machine is shared)
hurts the modes it compares alike. Rates are medians over rounds.
The last line printed is one JSON object with every figure.

    python bench/simulator.py                       # ~2-3 minutes on 2 cores
    python bench/simulator.py --seconds 0.5 --rounds 30 --sizes 1,8,32,64
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import time
import urllib.request
from typing import Any

import numpy as np

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.service import start_subprocess
from llmrl.simulator.world import World, env_ids

DEFAULT_ENVS = "SimpleDoorKey,BabyAIText-GoToLocal"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str]:
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, LLMRL_LOG_LEVEL="WARNING")
    process = start_subprocess(http_port, grpc_port, env=env, stdout=subprocess.DEVNULL)
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


def random_actions(world: Any, count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, int(world.action_space.n), size=(count, world.num_envs), dtype=np.int64)


def steps_per_second(world: Any, actions: np.ndarray) -> float:
    """Env-steps/s of `world` over the batches of `actions`, from the same seeded start.

    Every mode replays the same episodes (same seed, same actions), so they do the same env
    work and differ only in how the steps reach the envs.
    """
    world.reset(seed=0)
    start = time.perf_counter()
    for batch in actions:
        world.step(batch)
    return actions.size / (time.perf_counter() - start)


def noop_step_ms(world: Any, repeats: int = 200) -> float:
    """Median time of a step that moves no env but returns every default entry: the cost of
    the way to the envs and back, free of the envs' own (load-sensitive) work."""
    world.reset(seed=0)
    idle = np.zeros(world.num_envs, dtype=bool)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        world.step(active=idle)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def bench_env(env: str, sizes: list[int], address: str, args: argparse.Namespace) -> dict:
    results: dict[str, Any] = {}
    for n in sizes:
        worlds = {
            "in_process": World(env, num_envs=n, seed=0),
            "remote": RemoteWorld(address, env, num_envs=n, seed=0),
            "remote_sharded": RemoteWorld(
                address, env, num_envs=n, seed=0, num_workers=min(args.workers, n)
            ),
        }
        rates: dict[str, list[float]] = {mode: [] for mode in worlds}
        try:
            # as many batches as the in-process world steps in about `seconds`
            rate = steps_per_second(worlds["in_process"], random_actions(worlds["in_process"], 20))
            batches = max(10, int(args.seconds * rate / n))
            actions = random_actions(worlds["in_process"], batches)
            for _ in range(args.rounds):
                for mode, world in worlds.items():
                    rates[mode].append(steps_per_second(world, actions))
            noop_ms = {mode: noop_step_ms(world) for mode, world in worlds.items()}
        finally:
            for world in worlds.values():
                world.close()
        in_process = np.array(rates["in_process"])
        row: dict[str, float] = {
            mode: round(float(np.median(values)), 1) for mode, values in rates.items()
        }
        for mode in ("remote", "remote_sharded"):
            # median of per-round ratios: each round's modes ran back to back, under like load
            paired = np.array(rates[mode]) / in_process
            row[f"ratio_{mode}"] = round(float(np.median(paired)), 3)
        # what one remote world step costs beyond the in-process step (the gRPC round trip)
        row["remote_overhead_ms"] = round(
            float(np.median(1000 * n * (1 / np.array(rates["remote"]) - 1 / in_process))), 3
        )
        # the same from no-op steps (stable under load): remote minus in-process, per world step
        row["noop_overhead_ms"] = round(noop_ms["remote"] - noop_ms["in_process"], 3)
        results[str(n)] = row
        print(f"{env:>24} N={n:<3} " + "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", default=DEFAULT_ENVS, help="comma-separated env ids")
    parser.add_argument("--sizes", default="1,8,32", help="envs per world, comma-separated")
    parser.add_argument(
        "--seconds", type=float, default=0.12, help="about how long one round takes in-process"
    )
    parser.add_argument("--rounds", type=int, default=15, help="rounds per mode")
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
