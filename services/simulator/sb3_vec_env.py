"""Stable-Baselines3 VecEnv over a world; import it as `llmrl.simulator.vector.WorldVecEnv`.

SB3 wants same-step autoreset: the step that ends an episode already returns the next
episode's first observation, with the final one in `infos[i]["terminal_observation"]`.
Worlds reset on the next step instead, so the adapter steps only the finished envs once more
(the world's `active` mask): the other envs never take an extra step. Box actions are clipped to
the bounds (as SB3's own policies clip or squash them) before the world checks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from llmrl.simulator.vector import select_keys
from llmrl.simulator.world import STEP_ENTRIES, episode_ends


class BatchVecEnv(VecEnv):
    """What an SB3 VecEnv over a batch of envs it cannot reach one by one shares (a world, or
    a vector wrapper over one): the reset's seed, and no single env's attributes or methods.
    `envs_name` names those envs in errors."""

    envs_name = "a world's envs"

    def _reset_seed(self) -> int | None:
        """This reset's seed (SB3's `seed(s)` gives env i the seed s + i, as worlds do); used
        once, as SB3's own VecEnvs do."""
        seed = self._seeds[0]
        self._reset_seeds()
        self.reset_infos = [{} for _ in range(self.num_envs)]
        return None if seed is None else int(seed)

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        if attr_name == "render_mode":
            return [None] * len(self._indices(indices))
        raise AttributeError(f"{attr_name!r}: {self.envs_name} expose no attributes")

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        raise AttributeError(f"{attr_name!r}: {self.envs_name} expose no attributes")

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> list:
        raise AttributeError(f"{method_name!r}: {self.envs_name} expose no methods")

    def env_is_wrapped(self, wrapper_class: type, indices: Any = None) -> list[bool]:
        return [False] * len(self._indices(indices))

    def _indices(self, indices: Any) -> list[int]:
        if indices is None:
            return list(range(self.num_envs))
        return [indices] if isinstance(indices, int) else list(indices)


class WorldVecEnv(BatchVecEnv):
    """A Stable-Baselines3 VecEnv over a world (same-step autoreset; see module docstring)."""

    def __init__(self, world: Any, keys: Sequence[str] | None = None) -> None:
        self.world = world
        self.keys = select_keys(world, keys, numeric_only=True)
        self._single = len(self.keys) == 1
        spaces_by_key = {key: world.observation_space[key] for key in self.keys}
        observation_space = (
            spaces_by_key[self.keys[0]] if self._single else spaces.Dict(spaces_by_key)
        )
        self._requested = [*self.keys, *STEP_ENTRIES]
        self._actions: np.ndarray | None = None
        super().__init__(world.num_envs, observation_space, world.action_space)

    def _observation(self, result: dict[str, np.ndarray]) -> Any:
        if self._single:
            return result[self.keys[0]]
        return {key: result[key] for key in self.keys}

    def reset(self) -> Any:
        result = self.world.reset(seed=self._reset_seed(), observations=self._requested)
        return self._observation(result)

    def step_async(self, actions: np.ndarray) -> None:
        # one row per env: (N,) for a Discrete world, (N, *box.shape) for a Box world
        actions = np.asarray(actions).reshape(self.num_envs, *self.action_space.shape)
        if isinstance(self.action_space, spaces.Box):
            # SAC and TD3 map tanh's [-1, 1] onto the bounds in float32, which can land one ulp
            # outside them; NaN stays NaN (and is refused)
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        self._actions = actions

    def step_wait(self) -> tuple[Any, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        result = self.world.step(action=self._actions, observations=self._requested)
        terminated, truncated = episode_ends(result)
        dones = terminated | truncated
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        observation = {key: result[key] for key in self.keys}
        if dones.any():
            observation = {key: np.array(value) for key, value in observation.items()}
            # Start the finished envs' next episodes now; the others are not stepped.
            restarted = self.world.step(observations=self.keys, active=dones)
            for i in np.flatnonzero(dones):
                final = {key: observation[key][i].copy() for key in self.keys}
                infos[i]["terminal_observation"] = final[self.keys[0]] if self._single else final
                infos[i]["TimeLimit.truncated"] = bool(truncated[i])
                for key in self.keys:
                    observation[key][i] = restarted[key][i]
        rewards = result["reward"].astype(np.float32)
        return self._observation(observation), rewards, dones, infos

    def close(self) -> None:
        self.world.close()
