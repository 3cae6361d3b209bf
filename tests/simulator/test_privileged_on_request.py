"""Privileged entries are computed only when requested, and then equal the eager values."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

import llmrl.simulator.envs  # noqa: F401 - registers the envs
from llmrl.common.registry import gym_id
from llmrl.simulator.world import World

PRIVILEGED = ["oracle_plan", "feasible_skills"]


def test_world_computes_privileged_entries_on_request_only():
    eager = gym.make(gym_id("SimpleDoorKey"))
    eager_obs, _ = eager.reset(seed=7)
    with World("SimpleDoorKey", num_envs=1, seed=7) as world:
        assert world.observation_space.spaces.keys() >= set(PRIVILEGED)
        first = world.reset(observations=[*PRIVILEGED, "text"])
        for name in PRIVILEGED:
            assert first[name][0] == eager_obs[name] != ""
        for _ in range(5):
            action = 2  # forward, in both
            eager_obs, *_ = eager.step(action)
            out = world.step(action=np.array([action]), observations=[*PRIVILEGED, "text"])
        for name in [*PRIVILEGED, "text"]:
            assert out[name][0] == eager_obs[name]
        # Not requested: not computed, and not returned.
        plain = world.step(action=np.array([2]))
        assert not set(PRIVILEGED) & plain.keys()
        env = world._batch.envs[0].unwrapped  # the in-process env behind the world
        assert env.compute_privileged is False
        assert env.observe()["oracle_plan"] == ""
