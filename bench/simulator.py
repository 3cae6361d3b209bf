"""Env-steps/s of worlds (in-process, over gRPC) and of gymnasium vector envs on the same envs.

For each env and each world size N it steps, with random valid actions:
  * `in_process`: a `World` in this process (one loop over the envs);
  * `remote`: a `RemoteWorld` on a server started in its own process (one server process);
  * `remote_sharded`: the same with the world's envs split over `--workers` server workers;
  * `sync_vector`: gymnasium's `SyncVectorEnv` of the N envs (`llmrl/<id>-v0`) in this process;
  * `async_vector`: gymnasium's `AsyncVectorEnv` with `--workers` worker processes, each holding
    a `SyncVectorEnv` of N/workers envs (plain `AsyncVectorEnv` would start one process per env);
  * `openenv`: N OpenEnv sessions (one env each) on the same server's HTTP port
    (`/openenv/<env>/ws`, the path LLM-RL trainers use), stepped together: every session gets
    its action and every answer is awaited; a session whose episode ended is reset by its next
    step, as a world's env is (needs the `websockets` package; left out without it);
and reports the ratios remote/in-process, sharded/in-process, sharded/async_vector and
openenv/in-process. The
modes run back to back in many short rounds, each replaying the same seeded episodes (env i
seeded with i, NEXT_STEP auto-reset in every mode) with the same random valid actions; a
ratio is the median of the per-round ratios, so that load from other processes (this machine
is shared) hurts the modes it compares alike. Rates are medians over rounds. The machine's
load (os.getloadavg) is printed beside the ratios.
The last line printed is one JSON object with every figure.

    python bench/simulator.py                       # ~2-3 minutes on 2 cores
    python bench/simulator.py --seconds 0.5 --rounds 30 --sizes 1,8,32,64
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, SyncVectorEnv

import llmrl.simulator.envs  # noqa: F401  registers the envs with gymnasium (llmrl/<id>-v0)
from llmrl.common.auth import auth_headers
from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.service import start_subprocess
from llmrl.simulator.world import World, env_ids, make_env

DEFAULT_ENVS = "SimpleDoorKey,BabyAIText-GoToLocal"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server() -> tuple[subprocess.Popen, str, str]:
    """The server, its gRPC address and its HTTP base URL (room for 256 OpenEnv sessions)."""
    http_port, grpc_port = free_port(), free_port()
    env = dict(os.environ, LLMRL_LOG_LEVEL="WARNING")
    process = start_subprocess(
        http_port, grpc_port, settings={"max_connections": 256}, env=env,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{http_port}/health", timeout=2)
            return process, f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{http_port}"
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the simulator server did not start")


def random_actions(world: Any, count: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, int(world.action_space.n), size=(count, world.num_envs), dtype=np.int64)


class Quiet(gym.Wrapper):
    """An env whose resets print nothing (BabyAI level generation prints), as a world's."""

    def reset(self, **kwargs: Any) -> Any:
        with contextlib.redirect_stdout(None):
            return self.env.reset(**kwargs)


def member_env(env: str) -> gym.Env:
    """One env of a vector env, built as a world builds its envs (`llmrl/<env>-v0` with its
    TimeLimit, privileged entries computed only on request)."""
    made = make_env(env)
    if hasattr(made.unwrapped, "privileged_observation"):
        made.unwrapped.compute_privileged = False
    return Quiet(made)


class Chunk(gym.Env):
    """`count` envs as one gymnasium env (a SyncVectorEnv inside): what one AsyncVectorEnv
    worker process steps. It never ends itself; its envs auto-reset inside (NEXT_STEP)."""

    def __init__(self, env: str, count: int) -> None:
        self.vector = SyncVectorEnv([functools.partial(member_env, env)] * count)
        self.observation_space = self.vector.observation_space
        self.action_space = self.vector.action_space

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> Any:
        obs, _ = self.vector.reset(seed=seed)
        return obs, {}  # the envs' infos stay here: AsyncVectorEnv batches scalar infos only

    def step(self, action: Any) -> Any:
        obs, rewards, _, _, _ = self.vector.step(action)
        return obs, rewards, False, False, {}

    def close(self) -> None:
        self.vector.close()


def _pickle_by_value() -> None:
    # the worker processes are spawned (no fork of this process's gRPC threads); they unpickle
    # the env factories, which they cannot import when this file was loaded by path (tests)
    if __name__ != "__main__":
        cloudpickle.register_pickle_by_value(sys.modules[__name__])


class VectorStepper:
    """A gymnasium vector env behind a world's `reset(seed)`/`step(action)`, for the bench."""

    def __init__(self, env: str, num_envs: int, workers: int = 0) -> None:
        self.num_envs = num_envs
        self.chunks = chunks_for(num_envs, workers) if workers else 0
        if self.chunks:
            _pickle_by_value()
            size = num_envs // self.chunks
            self.vector: Any = AsyncVectorEnv(
                [functools.partial(Chunk, env, size)] * self.chunks, context="spawn"
            )
        else:
            self.vector = SyncVectorEnv([functools.partial(member_env, env)] * num_envs)

    def reset(self, seed: int = 0) -> None:
        if self.chunks:  # env i of the whole vector is seeded with seed + i, as in a world
            size = self.num_envs // self.chunks
            self.vector.reset(seed=[seed + c * size for c in range(self.chunks)])
        else:
            self.vector.reset(seed=seed)

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        if self.chunks:
            actions = actions.reshape(self.chunks, -1)
        _, rewards, _, _, _ = self.vector.step(actions)
        return {"reward": np.asarray(rewards, dtype=np.float32).reshape(-1)}

    def close(self) -> None:
        self.vector.close()


class OpenEnvStepper:
    """`n` OpenEnv WebSocket sessions of `env` stepped as one batch, with a world's interface
    (`reset(seed)`, `step(actions)`, `close()`): session i is reset with seed + i, as a world's
    env i is, and a session whose episode ended is reset (without a seed: its env goes on with
    its own random stream, as a world's auto-reset does) by its next step, which then returns
    reward 0. So it replays the same episodes as the other modes."""

    def __init__(self, http: str, env: str, n: int) -> None:
        from websockets.asyncio.client import connect

        self.num_envs = n
        self.loop = asyncio.new_event_loop()
        url = http.replace("http", "ws", 1) + f"/openenv/{env}/ws"
        headers = auth_headers()  # the token, when the server requires one
        self.sockets = self._all(connect(url, additional_headers=headers) for _ in range(n))
        self.done = [False] * n

    def _all(self, coroutines: Any) -> list[Any]:
        """Run the coroutines at once on this stepper's loop; their results in order."""

        async def gather() -> list[Any]:
            return await asyncio.gather(*coroutines)

        return self.loop.run_until_complete(gather())

    async def _ask(self, ws: Any, message: dict[str, Any]) -> dict[str, Any]:
        await ws.send(json.dumps(message))
        answer = json.loads(await ws.recv())
        if answer["type"] == "error":
            raise RuntimeError(answer["data"]["message"])
        return answer["data"]

    def reset(self, seed: int = 0) -> None:
        self._all(
            self._ask(ws, {"type": "reset", "data": {"seed": seed + i}})
            for i, ws in enumerate(self.sockets)
        )
        self.done = [False] * self.num_envs

    async def _step_one(self, i: int, action: Any) -> float:
        ws = self.sockets[i]
        if self.done[i]:  # auto-reset, as a world's env after LAST
            await self._ask(ws, {"type": "reset", "data": {}})
            self.done[i] = False
            return 0.0
        data = await self._ask(ws, {"type": "step", "data": {"action": action}})
        self.done[i] = data["done"]
        return data["reward"]

    def step(self, actions: np.ndarray) -> dict[str, np.ndarray]:
        rewards = self._all(self._step_one(i, a.tolist()) for i, a in enumerate(actions))
        return {"reward": np.array(rewards, dtype=np.float32)}

    def close(self) -> None:
        self._all(ws.close() for ws in self.sockets)
        self.loop.close()


def openenv_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("websockets") is not None


def chunks_for(num_envs: int, workers: int) -> int:
    """Worker processes of the async vector env: the most up to `workers` that split the envs
    evenly (every worker's SyncVectorEnv has the same spaces)."""
    return max(c for c in range(1, min(workers, num_envs) + 1) if num_envs % c == 0)


def run_steps(world: Any, actions: np.ndarray) -> tuple[int, float, float]:
    """Steps `world` through the batches of `actions` from the same seeded start: (env steps
    stepped, counted from the rewards returned; seconds; sum of rewards).

    Every mode replays the same episodes (same seed, same actions), so they do the same env
    work and differ only in how the steps reach the envs.
    """
    world.reset(seed=0)
    steps, total = 0, 0.0
    start = time.perf_counter()
    for batch in actions:
        rewards = world.step(batch)["reward"]
        steps += len(rewards)
        total += float(np.sum(rewards))
    return steps, time.perf_counter() - start, total


def steps_per_second(world: Any, actions: np.ndarray) -> float:
    """Env-steps/s of `world` over the batches of `actions` (see `run_steps`)."""
    steps, seconds, _ = run_steps(world, actions)
    return steps / seconds


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


def make_modes(env: str, n: int, address: str, workers: int) -> dict[str, Any]:
    """Every mode's stepper of `n` envs of `env` (all seeded 0)."""
    modes: dict[str, Any] = {}
    try:
        modes["in_process"] = World(env, num_envs=n, seed=0)
        modes["remote"] = RemoteWorld(address, env, num_envs=n, seed=0)
        modes["remote_sharded"] = RemoteWorld(
            address, env, num_envs=n, seed=0, num_workers=min(workers, n)
        )
        modes["sync_vector"] = VectorStepper(env, n)
        modes["async_vector"] = VectorStepper(env, n, workers=workers)
    except BaseException:
        for mode in modes.values():
            mode.close()
        raise
    return modes


def measure(modes: dict[str, Any], actions: np.ndarray, rounds: int) -> dict[str, dict]:
    """Interleaved rounds: in each, every mode steps `actions` once. Per mode: the rates of the
    rounds, the env steps of each round, and the reward sum of each round."""
    out: dict[str, dict] = {m: {"rates": [], "steps": [], "rewards": []} for m in modes}
    for _ in range(rounds):
        for mode, world in modes.items():
            steps, seconds, total = run_steps(world, actions)
            out[mode]["rates"].append(steps / seconds)
            out[mode]["steps"].append(steps)
            out[mode]["rewards"].append(total)
    return out


def paired_ratio(runs: dict[str, dict], mode: str, base: str) -> float:
    """Median over rounds of mode's rate / base's rate (the two ran back to back)."""
    return round(float(np.median(np.array(runs[mode]["rates"]) / runs[base]["rates"])), 3)


def bench_env(
    env: str, sizes: list[int], address: str, args: argparse.Namespace, http: str | None = None
) -> dict:
    results: dict[str, Any] = {}
    for n in sizes:
        modes = make_modes(env, n, address, args.workers)
        try:
            if http is not None:  # the OpenEnv path of the same server
                modes["openenv"] = OpenEnvStepper(http, env, n)
            # as many batches as the in-process world steps in about `seconds`
            world = modes["in_process"]
            rate = steps_per_second(world, random_actions(world, 20))
            batches = max(10, int(args.seconds * rate / n))
            actions = random_actions(world, batches)
            runs = measure(modes, actions, args.rounds)
            noop_ms = {m: noop_step_ms(modes[m]) for m in ("in_process", "remote")}
        finally:
            for mode in modes.values():
                mode.close()
        in_process = np.array(runs["in_process"]["rates"])
        row: dict[str, Any] = {m: round(float(np.median(r["rates"])), 1) for m, r in runs.items()}
        row["ratio_remote"] = paired_ratio(runs, "remote", "in_process")
        row["ratio_remote_sharded"] = paired_ratio(runs, "remote_sharded", "in_process")
        row["ratio_sync_vector"] = paired_ratio(runs, "sync_vector", "in_process")
        row["ratio_async_vector"] = paired_ratio(runs, "async_vector", "in_process")
        row["ratio_sharded_vs_async"] = paired_ratio(runs, "remote_sharded", "async_vector")
        if "openenv" in runs:
            row["ratio_openenv"] = paired_ratio(runs, "openenv", "in_process")
        # what one remote world step costs beyond the in-process step (the gRPC round trip)
        remote = np.array(runs["remote"]["rates"])
        row["remote_overhead_ms"] = round(
            float(np.median(1000 * n * (1 / remote - 1 / in_process))), 3
        )
        # the same from no-op steps (stable under load): remote minus in-process, per world step
        row["noop_overhead_ms"] = round(noop_ms["remote"] - noop_ms["in_process"], 3)
        row["async_workers"] = chunks_for(n, args.workers)
        row["env_steps_per_round"] = runs["in_process"]["steps"][0]
        # every mode stepped the same env steps and (same episodes) got the same rewards
        row["same_steps"] = len({s for r in runs.values() for s in r["steps"]}) == 1
        row["same_rewards"] = bool(
            np.allclose([r["rewards"] for r in runs.values()], runs["in_process"]["rewards"])
        )
        row["loadavg_1m"] = round(os.getloadavg()[0], 2)
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
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="server workers when sharded, and worker processes of the AsyncVectorEnv",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    known = set(env_ids())
    wanted = [e for e in args.envs.split(",") if e]
    missing = [e for e in wanted if e not in known]
    load_before = os.getloadavg()
    process, address, http = start_server()
    openenv = http if openenv_available() else None
    figures: dict[str, Any] = {}
    try:
        for env in wanted:
            if env not in missing:
                figures[env] = bench_env(env, sizes, address, args, openenv)
    finally:
        process.terminate()
        process.wait(timeout=30)
    load_after = os.getloadavg()
    largest = str(max(sizes))
    at_largest = {e: r[largest] for e, r in figures.items()}
    goals = {
        "remote/in_process>=0.9": {e: r["ratio_remote"] >= 0.9 for e, r in at_largest.items()},
        "remote_sharded/in_process>=1.2": {
            e: r["ratio_remote_sharded"] >= 1.2 for e, r in at_largest.items()
        },
        "remote_sharded/async_vector>1": {
            e: r["ratio_sharded_vs_async"] > 1 for e, r in at_largest.items()
        },
    }
    print(
        f"\nratios at N={largest} (cpus={os.cpu_count()}, loadavg before "
        f"{load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, after "
        f"{load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}):"
    )
    for env, r in at_largest.items():
        print(
            f"{env:>24}  remote/in_process={r['ratio_remote']}  "
            f"sharded/in_process={r['ratio_remote_sharded']}  "
            f"sharded/async_vector={r['ratio_sharded_vs_async']}  "
            f"sync_vector/in_process={r['ratio_sync_vector']}  "
            f"async_vector/in_process={r['ratio_async_vector']}  "
            f"openenv/in_process={r.get('ratio_openenv')}  load_1m={r['loadavg_1m']}"
        )
    summary = {
        "bench": "simulator",
        "unit": "env-steps/s",
        "cpus": os.cpu_count(),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in load_after],
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "workers": args.workers,
        "results": figures,
        f"ratio_remote_at_{largest}": {e: r["ratio_remote"] for e, r in at_largest.items()},
        f"ratio_remote_sharded_at_{largest}": {
            e: r["ratio_remote_sharded"] for e, r in at_largest.items()
        },
        f"ratio_sharded_vs_async_at_{largest}": {
            e: r["ratio_sharded_vs_async"] for e, r in at_largest.items()
        },
        f"ratio_openenv_at_{largest}": {e: r.get("ratio_openenv") for e, r in at_largest.items()},
        "openenv_steps_per_s": {
            e: {n: row.get("openenv") for n, row in r.items()} for e, r in figures.items()
        },
        f"goals_at_{largest}": goals,
        "missing_envs": missing,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
