"""A seeded CrafterText world repeats exactly: the same seed and actions give the same
observations, rewards and episode ends step by step, across episode ends (auto-resets).

Crafter despawns `creatures[random.randint(n)]` from a chunk's set of objects, whose order
follows the objects' memory addresses; two worlds of one seed then drift apart within a few
hundred random steps unless the wrapper balances chunks in a seeded order."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("crafter")

from llmrl.simulator.client import make_world
from llmrl.simulator.world import StepType

NUM_ENVS, STEPS, LENGTH = 3, 300, 100  # 2 episode ends per env, creatures spawn and despawn


def play(seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    with make_world("CrafterText", num_envs=NUM_ENVS, seed=seed, length=LENGTH) as world:
        trace = [world.reset()]
        for _ in range(STEPS):
            trace.append(world.step(rng.integers(0, world.action_space.n, size=NUM_ENVS)))
    return trace


def test_same_seed_same_world_across_episode_ends() -> None:
    first, second = play(0), play(0)
    for step, (a, b) in enumerate(zip(first, second, strict=True)):
        assert a.keys() == b.keys()
        for name in a:
            assert np.array_equal(a[name], b[name]), f"step {step}: {name} differs"
    ends = sum(int(np.sum(result["step_type"] == StepType.LAST)) for result in first)
    assert ends >= 2 * NUM_ENVS  # each env's trace crossed episode ends (auto-resets)
