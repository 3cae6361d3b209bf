"""A world's envs split over worker processes, so that one world uses every core.

Each worker holds the envs of one contiguous slice (env i of the world is env i - offset of
its shard, seeded with seed + i as in one process) and answers commands over a pipe. The
parent sends a command to every shard before it waits for any answer, so the shards step in
parallel. Workers are started with "spawn": safe beside gRPC's threads, and they import only
what an env needs. Their stdout is sent to /dev/null (BabyAI level generation prints).
"""

from __future__ import annotations

import contextlib
import importlib
import multiprocessing
import os
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from llmrl.common.registry import registry
from llmrl.simulator.world import EnvBatch, WorldError


def _shard_main(
    conn: Connection,
    env: str,
    num_envs: int,
    seed: int | None,
    env_kwargs: dict[str, Any],
    first_index: int,
    env_module: str,
) -> None:
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115  keep the worker's stdout clean
    try:
        importlib.import_module(env_module)  # registers the env, wherever it is defined
        batch = EnvBatch(env, num_envs, seed, env_kwargs, first_index)
    except BaseException as exc:  # report why the shard could not start, then stop
        conn.send(("error", _portable(exc)))
        return
    conn.send(
        ("ok", (batch.observation_space, batch.action_space, batch.has_skills, batch.privileged))
    )
    while True:
        try:
            command, args = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        if command == "close":
            break
        try:
            conn.send(("ok", getattr(batch, command)(*args)))
        except BaseException as exc:
            conn.send(("error", _portable(exc)))
    batch.close()


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when its kind tells the caller what to fix (a setting refused, a
    file missing, memory exhausted: the server answers INVALID_ARGUMENT naming the setting, as
    for a world in one process), else a RuntimeError with its traceback."""
    if isinstance(exc, WorldError | ValueError | TypeError | KeyError | MemoryError):
        return exc
    if isinstance(exc, OSError):  # rebuilt: a subclass's extra state may not pickle
        return OSError(exc.errno, exc.strerror, exc.filename) if exc.errno else OSError(str(exc))
    return RuntimeError("".join(traceback.format_exception(exc)))


class ShardedBatch:
    """Same interface as `EnvBatch`, with the envs split over `num_workers` processes."""

    def __init__(
        self,
        env: str,
        num_envs: int,
        seed: int | None,
        num_workers: int,
        env_kwargs: dict[str, Any],
    ) -> None:
        context = multiprocessing.get_context("spawn")
        env_module = registry.get_env(env).__module__  # UnavailableError before any spawn
        sizes = [len(part) for part in np.array_split(np.arange(num_envs), num_workers)]
        self.bounds = np.cumsum([0, *sizes])
        self.conns: list[Connection] = []
        self.processes: list[multiprocessing.process.BaseProcess] = []
        try:
            for offset, size in zip(self.bounds[:-1], sizes, strict=True):
                parent, child = context.Pipe()
                shard_seed = None if seed is None else seed + int(offset)
                process = context.Process(
                    target=_shard_main,
                    args=(child, env, size, shard_seed, env_kwargs, int(offset), env_module),
                    daemon=True,
                )
                process.start()
                child.close()
                self.conns.append(parent)
                self.processes.append(process)
            infos = [self._receive(conn) for conn in self.conns]
        except BaseException:
            self.close()
            raise
        self.observation_space, self.action_space, self.has_skills, self.privileged = infos[0]

    def _slices(self) -> list[slice]:
        return [slice(a, b) for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]

    def _receive(self, conn: Connection) -> Any:
        try:
            status, payload = conn.recv()
        except EOFError:
            raise RuntimeError("a simulator worker process died") from None
        if status == "error":
            raise payload
        return payload

    def _call_all(self, command: str, per_shard_args: list[tuple[Any, ...]]) -> list[Any]:
        for conn, args in zip(self.conns, per_shard_args, strict=True):
            conn.send((command, args))
        results, error = [], None
        for conn in self.conns:  # read every answer, so no pipe is left out of step
            try:
                results.append(self._receive(conn))
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return results

    def check_skills(self, skills: np.ndarray | None, stepping: np.ndarray) -> None:
        if skills is None or not (skills != "").any():
            return
        self._call_all("check_skills", [(skills[s], stepping[s]) for s in self._slices()])

    def reset(self, seed: int | None, names: list[str]) -> dict[str, np.ndarray]:
        args = [(None if seed is None else seed + int(s.start), names) for s in self._slices()]
        return _concatenate(self._call_all("reset", args), names)

    def step(
        self,
        actions: np.ndarray | None,
        skills: np.ndarray | None,
        active: np.ndarray | None,
        names: list[str],
    ) -> dict[str, np.ndarray]:
        def part(array: np.ndarray | None, s: slice) -> np.ndarray | None:
            return None if array is None else array[s]

        args = [(part(actions, s), part(skills, s), part(active, s), names) for s in self._slices()]
        return _concatenate(self._call_all("step", args), names)

    def close(self) -> None:
        for conn in self.conns:
            with contextlib.suppress(OSError):  # the worker is already gone
                conn.send(("close", ()))
        for process in self.processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self.conns:
            conn.close()
        self.conns, self.processes = [], []


def _concatenate(parts: list[dict[str, np.ndarray]], names: list[str]) -> dict[str, np.ndarray]:
    return {name: np.concatenate([part[name] for part in parts]) for name in names}
