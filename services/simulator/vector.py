"""Vectorised-env adapters over any world (in-process `World` or `RemoteWorld`).

* `WorldVectorEnv`: a gymnasium 1.x `VectorEnv`. Worlds reset finished envs on their next
  step, which is exactly gymnasium's NEXT_STEP autoreset mode: the step after a terminated or
  truncated one returns the reset observation with reward 0 and ignores that env's action.
* `WorldVecEnv`: a Stable-Baselines3 `VecEnv`. SB3 wants same-step autoreset: the step that
  ends an episode already returns the next episode's first observation, with the final one in
  `infos[i]["terminal_observation"]`. The adapter gets it by stepping only the finished envs
  once more (the world's `active` mask), so the other envs never take an extra step.

Both offer the world's own action space: `Discrete`, or `Box` for continuous control (actions
then have shape (num_envs, *box.shape)). Both return the observation entries named by `keys`
(default: every numeric, non-privileged entry of the world, without reward/discount/step_type).
SB3 gets a plain array when `keys` names one entry and a dict otherwise (use
`MultiInputPolicy` then).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from llmrl.simulator.world import STEP_ENTRIES, WorldError, episode_ends


def default_keys(world: Any) -> list[str]:
    """Every numeric, non-privileged entry of the world, without reward/discount/step_type."""
    return [
        name
        for name in world.default_observations
        if name not in STEP_ENTRIES and not isinstance(world.observation_space[name], spaces.Text)
    ]


def select_keys(world: Any, keys: Sequence[str] | None, numeric_only: bool) -> list[str]:
    """The observation entries an adapter returns: `keys`, checked, or `default_keys`."""
    keys = default_keys(world) if keys is None else list(keys)
    if not keys:
        raise WorldError("keys", "no observation entries selected")
    for key in keys:
        if key not in world.observation_space.spaces:
            raise WorldError(
                "keys", f"unknown entry {key!r}; entries: {', '.join(world.observation_space)}"
            )
        if numeric_only and isinstance(world.observation_space[key], spaces.Text):
            raise WorldError("keys", f"{key!r} is text; Stable-Baselines3 takes numeric entries")
    return keys


class WorldVectorEnv(gym.vector.VectorEnv):
    """A gymnasium VectorEnv over a world (NEXT_STEP autoreset; see module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}  # noqa: RUF012 (gymnasium API)

    def __init__(self, world: Any, keys: Sequence[str] | None = None) -> None:
        self.world = world
        self.keys = select_keys(world, keys, numeric_only=False)
        self.num_envs = world.num_envs
        self.single_observation_space = spaces.Dict(
            {key: world.observation_space[key] for key in self.keys}
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.single_action_space = world.action_space
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._requested = [*self.keys, *STEP_ENTRIES]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        if seed is not None and not isinstance(seed, int | np.integer):
            raise WorldError("seed", "expected one integer (env i gets seed + i)")
        result = self.world.reset(seed=seed, observations=self._requested)
        return {key: result[key] for key in self.keys}, {}

    def step(
        self, actions: Any
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        result = self.world.step(action=np.asarray(actions), observations=self._requested)
        terminated, truncated = episode_ends(result)
        observation = {key: result[key] for key in self.keys}
        return observation, result["reward"].astype(np.float64), terminated, truncated, {}

    def close_extras(self, **kwargs: Any) -> None:
        self.world.close()


def __getattr__(name: str) -> Any:
    # WorldVecEnv needs Stable-Baselines3 (and torch): import it only when asked for.
    if name == "WorldVecEnv":
        from llmrl.simulator.sb3_vec_env import WorldVecEnv

        return WorldVecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
