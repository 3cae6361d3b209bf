"""A tiny skill environment for the orchestrator's and episode drivers' tests and the bench:
a corridor to walk.

`TinyCorridor`: the agent starts at 0 and must reach `length`; the one skill "step right"
moves it one cell (and is DONE at once); reaching the end gives reward 1 and terminates.
It offers `oracle_plan` like the When2Ask envs, so the real `oracle` planner plays it.
`step_delay_s` makes each step sleep, so that tests can kill a worker mid-episode;
`fail_at_position` makes a step raise, so that tests see how a broken episode is reported.
Child processes import it through LLMRL_PLUGINS=support.tiny_corridor (tests/ on their
PYTHONPATH: `support.processes.child_env`).
"""

from __future__ import annotations

import string
import time
from typing import Any

import gymnasium as gym
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.envs.base import InvalidSkillError, SkillEnv, SkillStatus

SKILL = "step right"


@registry.register_env("TinyCorridor", max_episode_steps=50, tags=("test",))
class TinyCorridor(SkillEnv):
    """Walk right to the end of a corridor (orchestrator tests)."""

    privileged_observations = ("oracle_plan",)

    def __init__(
        self, length: int = 3, step_delay_s: float = 0.0, fail_at_position: int | None = None
    ) -> None:
        self.length = length
        self.step_delay_s = step_delay_s
        self.fail_at_position = fail_at_position  # a broken env, for failure-path tests
        text = spaces.Text(max_length=4096, charset=string.printable)
        self.observation_space = spaces.Dict(
            {
                "text": text,
                "oracle_plan": text,
                "position": spaces.Discrete(length + 1),
                "skill_status": spaces.Discrete(4),
            }
        )
        self.action_space = spaces.Discrete(2)  # 0: stay, 1: right
        self.position = 0

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        return {
            "text": f"You are at cell {self.position} of {self.length}.",
            "oracle_plan": "\n".join([SKILL] * (self.length - self.position)),
            "position": self.position,
            "skill_status": int(skill_status),
        }

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        self.position = 0
        return self.observe(), {}

    def step(self, action: int):
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.position = min(self.length, self.position + int(action))
        if self.position == self.fail_at_position:
            raise RuntimeError(f"corridor collapsed at cell {self.position}")
        done = self.position == self.length
        return self.observe(), float(done), done, False, {}

    def skill_names(self) -> list[str]:
        return [SKILL]

    def check_skill(self, skill: str) -> None:
        if skill != SKILL:
            raise InvalidSkillError(f"unknown skill {skill!r}; skills: {SKILL!r}")

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        if self.position >= self.length:
            return None, SkillStatus.INFEASIBLE
        return 1, SkillStatus.RUNNING

    def skill_goal_reached(self, skill: str) -> bool:
        return True


gym.logger.min_level = 40  # quiet: the tests read stdout
