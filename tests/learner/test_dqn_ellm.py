"""ELLM's DQN (`dqn-ellm`): it learns a tiny Crafter-like env, resumes a killed run from its
latest version, and refuses bad settings naming them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import support.tiny_crafter_text  # noqa: F401  (registers TinyCrafterText)
from support.tiny_crafter_text import ENV_ID

from llmrl.common.registry import registry
from llmrl.learner.algorithms import Versions
from llmrl.simulator.client import make_world

FAST = {
    "num_envs": 4,
    "learning_rate": 1e-3,
    "learning_starts": 400,
    "target_network_frequency": 400,
    "buffer_size": 5_000,
    "gamma": 0.9,
    "hidden": 64,
    "exploration_fraction": 0.5,
    "torch_threads": 1,
}


def achievements_per_episode(policy, episodes: int = 8, epsilon: float = 0.0) -> float:
    """Mean achievements unlocked per episode of `policy` (None: uniformly random)."""
    rng = np.random.default_rng(0)
    unlocked: list[int] = []
    with make_world(ENV_ID, num_envs=4, seed=123) as world:
        obs = world.reset()
        while len(unlocked) < episodes:
            if policy is None:
                actions = rng.integers(0, 5, size=4)
            else:
                actions = policy.act(obs, epsilon=epsilon, rng=rng)
            obs = world.step(action=actions)
            for i in np.flatnonzero(obs["step_type"] == 2):
                unlocked.append(int(obs["achievements"][i].sum()))
    return float(np.mean(unlocked))


def test_dqn_learns_the_tiny_env(tmp_path: Path):
    dqn = registry.get_algorithm("dqn-ellm")
    checkpoint = dqn.train(
        ENV_ID, Versions(tmp_path / "dqn"), total_timesteps=6_000, seed=0, **FAST
    )
    assert checkpoint.result["global_step"] == 6_000
    assert checkpoint.result["gradient_steps"] > 1_000
    learned = achievements_per_episode(dqn.load(checkpoint))
    random = achievements_per_episode(None)
    # three achievements are there to unlock; random play gets about one per episode
    assert learned >= 2.0 and learned >= random + 0.75


def test_a_killed_run_resumes_from_its_latest_version(tmp_path: Path):
    dqn = registry.get_algorithm("dqn-ellm")
    line = Versions(tmp_path / "dqn")
    settings = {**FAST, "total_timesteps": 1_200, "checkpoint_every": 400, "seed": 1}

    class Killed(Exception):
        pass

    def kill_at_800(frames: int, infos: dict) -> None:
        if frames >= 900:
            raise Killed

    with pytest.raises(Killed):
        dqn.train(ENV_ID, line, on_step=kill_at_800, **settings)
    assert line.versions() == ["1", "2"]
    assert line.latest().result["global_step"] == 800
    seen: list[int] = []
    checkpoint = dqn.train(
        ENV_ID, line, on_step=lambda frames, infos: seen.append(frames), **settings
    )
    assert seen[0] == 804  # continued after 800 frames, not from 0
    assert checkpoint.result["global_step"] == 1_200
    assert checkpoint.version == "3"
    # the buffer came back: the resumed run learned from the start at once
    assert checkpoint.result["gradient_steps"] > 0
    # a finished line is not trained again
    again = dqn.train(ENV_ID, line, **settings)
    assert again.path == checkpoint.path


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"n_step": 0}, "n_step"),
        ({"gamma": 1.5}, "gamma"),
        ({"batch_size": -1}, "batch_size"),
        ({"learning_rate": 0}, "learning_rate"),
        ({"dueling_heads": True}, "dueling_heads"),
    ],
)
def test_bad_settings_are_named(settings: dict, key: str, tmp_path: Path):
    with pytest.raises(ValueError, match=key):
        registry.get_algorithm("dqn-ellm").train(ENV_ID, tmp_path / "dqn", **settings)
