"""Rollouts of batched worlds with seeded random actions, and their exact comparison (the
simulator's tests check that in-process, sharded and remote worlds agree)."""

from __future__ import annotations

import numpy as np


def rollout(world, steps: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    results = [world.reset()]
    for _ in range(steps):
        results.append(world.step(rng.integers(0, 3, world.num_envs)))
    return results


def assert_same(a: list[dict], b: list[dict]) -> None:
    assert len(a) == len(b)
    for step, (x, y) in enumerate(zip(a, b, strict=True)):
        assert x.keys() == y.keys(), step
        for key in x:
            assert x[key].dtype == y[key].dtype, (step, key)
            np.testing.assert_array_equal(x[key], y[key], err_msg=f"step {step} {key}")
