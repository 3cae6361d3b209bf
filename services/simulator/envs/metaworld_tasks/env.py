"""The `MetaWorld` environment: one Meta-World v3 task (goal observable) with an instruction.

Settings: `task` (one of `tasks.TASKS`, e.g. "door-open"; see `tasks.py` for the levels) and
`terminate_on_success` (default true: an episode ends when Meta-World reports success, as in
KALM's data; false runs to the time limit). Every episode draws a new object and goal placement
from the env's own seeded generator (the world's `seed`), and one of the task's 20 instructions.

Action: `Box(-1, 1, (4,), float32)`: the gripper's (dx, dy, dz) and its closing effort.

Observations:
  state        Box (39,) float32  Meta-World v3's observation: hand position, gripper opening,
               two objects' positions and quaternions, the same for the previous frame, and the
               goal position
  instruction  text               one of the task's 20 instructions
  success      Discrete(2)        Meta-World's success flag for this step

Reward: Meta-World's shaped reward (0..10). Time limit: 200 steps (the scripted experts finish
the tasks in 30-150).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.errors import WorldError

from ..text_spaces import text_space
from .tasks import TASKS, instructions

MAX_EPISODE_STEPS = 200
STATE_DIM = 39
DEFAULTS: dict[str, Any] = {"task": "reach", "terminate_on_success": True}


def make_task_env(task: str) -> Any:
    """Meta-World's goal-observable v3 env of `task`, drawing placements from its own seeded
    generator (`seed(s)`) at every reset."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[f"{task}-v3-goal-observable"]()
    env._freeze_rand_vec = False  # a new placement every reset...
    env.seeded_rand_vec = True  # ...from env.np_random, not numpy's global generator
    env.max_path_length = 10**9  # our TimeLimit ends episodes, not Meta-World's counter
    return env


def expert_policy(task: str) -> Any:
    """Meta-World's scripted expert of `task` (`get_action(observation) -> 4 floats`)."""
    from metaworld.policies import ENV_POLICY_MAP

    return ENV_POLICY_MAP[f"{task}-v3"]()


@registry.register_env(
    "MetaWorld",
    max_episode_steps=MAX_EPISODE_STEPS,
    kwargs=DEFAULTS,
    tags=("kalm", "continuous"),
    requires=("metaworld",),
    extra="metaworld",
)
class MetaWorldEnv(gym.Env):
    """A Meta-World v3 task with one of its 20 instructions per episode (KALM's Meta-World)."""

    def __init__(self, task: str = "reach", terminate_on_success: bool = True) -> None:
        if task not in TASKS:
            raise WorldError("task", f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
        if not isinstance(terminate_on_success, bool | np.bool_):
            raise WorldError(
                "terminate_on_success", f"expected true or false, got {terminate_on_success!r}"
            )
        self.task = task
        self.terminate_on_success = bool(terminate_on_success)
        self.instructions = instructions(task)
        self.env = make_task_env(task)
        self.observation_space = spaces.Dict(
            {
                "state": spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32),
                "instruction": text_space(200),
                "success": spaces.Discrete(2),
            }
        )
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.instruction = self.instructions[0]
        self.state = np.zeros(STATE_DIM, np.float32)

    def _observe(self, success: bool) -> dict[str, Any]:
        return {
            "state": self.state.copy(),
            "instruction": self.instruction,
            "success": int(success),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            self.env.seed(int(seed))
        observation, _ = self.env.reset()
        self.state = observation.astype(np.float32)
        self.instruction = self.instructions[int(self.np_random.integers(len(self.instructions)))]
        return self._observe(False), {"task": self.task}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        action = np.clip(np.asarray(action, dtype=np.float32), -1.0, 1.0)
        observation, reward, _, _, info = self.env.step(action)
        self.state = observation.astype(np.float32)
        success = bool(info.get("success", 0.0))
        return (
            self._observe(success),
            float(reward),
            success and self.terminate_on_success,
            False,
            {"success": success},
        )

    def close(self) -> None:
        self.env.close()
