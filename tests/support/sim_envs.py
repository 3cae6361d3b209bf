"""Small registered environments for the simulator's tests.

A server started in another process imports this module through
LLMRL_PLUGINS=support.sim_envs (with tests/ on PYTHONPATH), so the same ids exist on both
sides of the wire.
"""

from __future__ import annotations

import errno
import os
import string
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.envs.base import InvalidSkillError, SkillEnv, SkillStatus

CHARSET = string.ascii_letters + string.digits + " .,:\n"
LEFT, RIGHT, STAY = 0, 1, 2


@registry.register_env("SimTestCorridor", max_episode_steps=12, kwargs={"length": 6})
class Corridor(gym.Env):
    """A corridor: walk right to the goal (reward 1); random start, text observation."""

    def __init__(self, length: int = 6) -> None:
        if length < 3:
            raise ValueError("length: must be at least 3")
        self.length = length
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(0, length - 1, (1,), np.float32),
                "grid": spaces.Box(0, 1, (length,), np.uint8),
                "distance": spaces.Discrete(length),
                "text": spaces.Text(200, min_length=0, charset=CHARSET),
                "oracle_plan": spaces.Text(200, min_length=0, charset=CHARSET),
            }
        )
        self.action_space = spaces.Discrete(3)
        self.position = 0

    def observe(self) -> dict[str, Any]:
        grid = np.zeros(self.length, np.uint8)
        grid[self.position] = 1
        distance = self.length - 1 - self.position
        return {
            "position": np.array([self.position], np.float32),
            "grid": grid,
            "distance": distance,
            "text": f"you are {distance} steps from the goal",
            "oracle_plan": "go right\n" * distance,
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        print("Sampling rejected: like BabyAI, this env prints while it resets")
        self.position = int(self.np_random.integers(0, self.length - 1))
        return self.observe(), {}

    def step(self, action: int):
        if action == LEFT:
            self.position = max(0, self.position - 1)
        elif action == RIGHT:
            self.position = min(self.length - 1, self.position + 1)
        at_goal = self.position == self.length - 1
        return self.observe(), float(at_goal), at_goal, False, {}


@registry.register_env("SimTestSkills", max_episode_steps=12, kwargs={"length": 6})
class SkillCorridor(Corridor, SkillEnv):
    """The corridor with two skills: "go to the goal" and "go to the start"."""

    SKILLS = ("go to the goal", "go to the start")
    # only returned when asked for by name (besides the standard oracle_plan)
    privileged_observations = ("oracle_plan", "goal_position")

    def __init__(self, length: int = 6) -> None:
        super().__init__(length)
        self.observation_space = spaces.Dict(
            {
                **self.observation_space.spaces,
                "skill_status": spaces.Discrete(4),
                "goal_position": spaces.Discrete(length),
            }
        )

    def skill_names(self) -> list[str]:
        return list(self.SKILLS)

    def check_skill(self, skill: str) -> None:
        if skill not in self.SKILLS:
            raise InvalidSkillError(f"unknown skill {skill!r}; skills: {', '.join(self.SKILLS)}")

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        if self.skill_goal_reached(skill):
            return None, SkillStatus.DONE
        return (RIGHT if skill == self.SKILLS[0] else LEFT), SkillStatus.RUNNING

    def skill_goal_reached(self, skill: str) -> bool:
        return self.position == (self.length - 1 if skill == self.SKILLS[0] else 0)

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        return {
            **super().observe(),
            "skill_status": int(skill_status),
            "goal_position": self.length - 1,
        }


@registry.register_env("SimTestSlider", max_episode_steps=5)
class Slider(gym.Env):
    """Continuous actions with per-element float64 bounds; observes the last action taken."""

    def __init__(self) -> None:
        self.action_space = spaces.Box(
            np.array([-1.0, 0.0]), np.array([1.0, 2.0]), (2,), np.float64
        )
        self.observation_space = spaces.Dict(
            {"last_action": spaces.Box(-1.0, 2.0, (2,), np.float64)}
        )
        self.last_action = np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.last_action = np.zeros(2)
        return {"last_action": self.last_action.copy()}, {}

    def step(self, action: np.ndarray):
        self.last_action = np.array(action, dtype=np.float64)
        return (
            {"last_action": self.last_action.copy()},
            float(self.last_action.sum()),
            False,
            False,
            {},
        )


@registry.register_env("SimTestCostly", max_episode_steps=5, kwargs={"needs_file": "", "gib": 0})
class Costly(Slider):
    """A slider whose construction fails as a costly or misconfigured env's does: `gib` > 0
    exhausts memory (MemoryError), a missing `needs_file` is a FileNotFoundError."""

    def __init__(self, needs_file: str = "", gib: float = 0) -> None:
        if gib > 0:
            raise MemoryError(f"cannot allocate {gib} GiB")
        if needs_file and not os.path.exists(needs_file):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", needs_file)
        super().__init__()
