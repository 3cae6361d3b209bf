"""A trivial BabyAI-Text-like environment for the LLM-PPO tests: always "go forward".

`TinyTextGoForward`: the agent sees "You see the goal 1 step forward" under the mission "go
to the goal"; the skill "go forward" reaches it (reward 1, terminated), any other of
BabyAI-Text's six phrases does nothing (reward 0); an episode is cut after 3 steps. Same
observations (`text`, `mission`) and skills (the six phrases) as BabyAI-Text, so the LLM
policy sees it exactly as a real level. Tests import it (`import support.tiny_text_env`).
"""

from __future__ import annotations

import string
from typing import Any

from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.envs.base import InvalidSkillError, SkillEnv, SkillStatus

ENV_ID = "TinyTextGoForward"
PHRASES = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
CORRECT = "go forward"


@registry.register_env(ENV_ID, max_episode_steps=3, tags=("test", "glam"))
class TinyTextGoForward(SkillEnv):
    """The goal is always one step forward (LLM-PPO tests)."""

    def __init__(self) -> None:
        text = spaces.Text(max_length=256, charset=string.printable)
        self.observation_space = spaces.Dict(
            {"text": text, "mission": text, "skill_status": spaces.Discrete(4)}
        )
        self.action_space = spaces.Discrete(len(PHRASES))

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        return {
            "text": "You see the goal 1 step forward",
            "mission": "go to the goal",
            "skill_status": int(skill_status),
        }

    def reset(self, *, seed: int | None = None, options: Any = None):
        super().reset(seed=seed)
        return self.observe(), {}

    def step(self, action: int):
        reached = PHRASES[int(action)] == CORRECT
        return self.observe(), float(reached), reached, False, {}

    def skill_names(self) -> list[str]:
        return list(PHRASES)

    def check_skill(self, skill: str) -> None:
        if skill not in PHRASES:
            raise InvalidSkillError(f"unknown skill {skill!r}; skills: {', '.join(PHRASES)}")

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        return PHRASES.index(skill), SkillStatus.RUNNING

    def skill_goal_reached(self, skill: str) -> bool:
        return False
