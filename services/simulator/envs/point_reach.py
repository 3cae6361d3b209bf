"""PointReach: steer a point in the plane to a target with continuous actions.

The registry's small continuous-control env: worlds of it carry `Box` actions (as Meta-World's
do, for KALM) without a physics package, so the contract can be tested and demonstrated fast.

Arena: the square [-1, 1]^2. Each episode draws the point's start and the target uniformly,
at least `2 * goal_radius` apart.

Action: `Box(-1, 1, (2,), float32)`, a velocity: the point moves by `step_size * action` and
stays inside the arena.

Observations:
  position  Box(-1, 1, (2,), float32)  where the point is
  target    Box(-1, 1, (2,), float32)  where it must go
  success   Discrete(2)                1 once the point is within `goal_radius` of the target
  text      the same in words ("the point is at (0.12, -0.40); the target is at (0.50, 0.30),
            0.79 away")

Reward: the distance gained towards the target in the step (negative when moving away), plus 1
on reaching it. Reaching the target terminates the episode; the registered time limit
(`max_episode_steps`, 50) truncates it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry

from .text_spaces import text_space

DEFAULTS = {"goal_radius": 0.1, "step_size": 0.1}


@registry.register_env("PointReach", max_episode_steps=50, kwargs=DEFAULTS, tags=("continuous",))
class PointReachEnv(gym.Env):
    """A point steered to a target in the plane: Box(-1, 1, (2,)) velocity actions."""

    def __init__(self, goal_radius: float = 0.1, step_size: float = 0.1) -> None:
        for name, value, high in (("goal_radius", goal_radius, 0.5), ("step_size", step_size, 1)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0 < value <= high
            ):
                raise ValueError(f"{name}: expected a number in (0, {high}], got {value!r}")
        self.goal_radius = float(goal_radius)
        self.step_size = float(step_size)
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "target": spaces.Box(-1.0, 1.0, (2,), np.float32),
                "success": spaces.Discrete(2),
                "text": text_space(200),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.position = np.zeros(2, np.float32)
        self.target = np.zeros(2, np.float32)

    def _distance(self) -> float:
        return float(np.linalg.norm(self.target - self.position))

    def _observe(self) -> dict[str, Any]:
        (x, y), (tx, ty) = self.position, self.target
        return {
            "position": self.position.copy(),
            "target": self.target.copy(),
            "success": int(self._distance() <= self.goal_radius),
            "text": (
                f"the point is at ({x:.2f}, {y:.2f}); the target is at ({tx:.2f}, {ty:.2f}), "
                f"{self._distance():.2f} away"
            ),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        while True:  # a start already at the target would be no episode at all
            self.position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
            self.target = self.np_random.uniform(-1, 1, 2).astype(np.float32)
            if self._distance() >= 2 * self.goal_radius:
                return self._observe(), {}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        velocity = np.asarray(action, dtype=np.float32)
        if velocity.shape != (2,) or not np.isfinite(velocity).all():
            raise ValueError(f"action: expected 2 finite numbers, got {action!r}")
        before = self._distance()
        moved = self.position + self.step_size * np.clip(velocity, -1, 1)
        self.position = np.clip(moved, -1, 1).astype(np.float32)
        reached = self._distance() <= self.goal_radius
        reward = before - self._distance() + (1.0 if reached else 0.0)
        return self._observe(), float(reward), reached, False, {}
