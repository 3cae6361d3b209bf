"""VecEnv wrappers the learner needs between simulator worlds and Stable-Baselines3."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper


def _as_float(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {key: np.asarray(value, dtype=np.float32) for key, value in obs.items()}
    return np.asarray(obs, dtype=np.float32)


def _float_space(space: spaces.Space) -> spaces.Space:
    if isinstance(space, spaces.Dict):
        return spaces.Dict({key: _float_space(sub) for key, sub in space.spaces.items()})
    if isinstance(space, spaces.Box):
        low, high = np.asarray(space.low, np.float32), np.asarray(space.high, np.float32)
        return spaces.Box(low, high, space.shape, np.float32)
    return space


class FloatObservations(VecEnvWrapper):
    """Box observations as float32.

    SB3 treats any uint8 Box with three dimensions as an image for a CNN; MiniGrid's small
    encoded views (3x3x3 type/colour/state codes) are not pictures, so an MLP should see them.
    """

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv, observation_space=_float_space(venv.observation_space))

    def reset(self) -> Any:
        return _as_float(self.venv.reset())

    def step_wait(self) -> Any:
        obs, rewards, dones, infos = self.venv.step_wait()
        for info in infos:
            if "terminal_observation" in info:
                info["terminal_observation"] = _as_float(info["terminal_observation"])
        return _as_float(obs), rewards, dones, infos
