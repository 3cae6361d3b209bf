"""bench/simulator.py's measuring functions at a tiny size: every mode (in-process world, remote
world, sharded remote world, gymnasium SyncVectorEnv and AsyncVectorEnv) steps, at a positive
rate, the same env steps of the same episodes. No wall-clock assertions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "simulator.py"
MODES = ("in_process", "remote", "remote_sharded", "sync_vector", "async_vector")


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("llmrl_bench_simulator", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # cloudpickle pickles its env factories by value
    spec.loader.exec_module(module)
    return module


def test_every_mode_steps_the_same_env_steps(bench: ModuleType, sim_server) -> None:
    num_envs, batches, rounds = 4, 6, 2
    modes = bench.make_modes("SimpleDoorKey", num_envs, sim_server.address, workers=2)
    try:
        assert list(modes) == list(MODES)
        assert modes["async_vector"].chunks == 2  # two worker processes of 2 envs each
        actions = bench.random_actions(modes["in_process"], batches)
        runs = bench.measure(modes, actions, rounds)
    finally:
        for mode in modes.values():
            mode.close()
    for mode in MODES:
        assert len(runs[mode]["rates"]) == rounds
        assert all(rate > 0 for rate in runs[mode]["rates"]), mode
        assert runs[mode]["steps"] == [num_envs * batches] * rounds, mode
        # same seeds, same actions, same auto-reset: the same episodes, so the same rewards
        assert np.allclose(runs[mode]["rewards"], runs["in_process"]["rewards"]), mode
    assert bench.paired_ratio(runs, "remote_sharded", "async_vector") > 0


def test_async_workers_split_the_envs_evenly(bench: ModuleType) -> None:
    assert bench.chunks_for(32, 2) == 2
    assert bench.chunks_for(1, 2) == 1
    assert bench.chunks_for(9, 2) == 1  # 9 envs do not split over 2 workers
    assert bench.chunks_for(9, 3) == 3
