"""What a registered environment must look like, so the simulator can serve it.

A registered environment is a `gymnasium.Env` whose

* `observation_space` is a `spaces.Dict` of `Box`, `Discrete`, `MultiBinary` or `Text` spaces.
  Text environments have a `"text"` entry (a `spaces.Text`) holding the observation in words.
  The simulator adds `reward`, `discount` and `step_type` itself (dm_env_rpc convention).
* `action_space` is `spaces.Discrete(n)` or, for continuous control, a floating-point
  `spaces.Box` (e.g. `PointReach`'s `Box(-1, 1, (2,))`): the low-level action, called `action`
  on the wire (see `llmrl.simulator.actions`).

Environments that offer skill-level text actions (`skill` on the wire: "go to the red key")
subclass `SkillEnv` and implement `skill_names`/`check_skill`/`skill_action`: a skill is
executed one low-level step at a time by a scripted controller, so a world can mix envs
stepping skills and envs stepping raw actions, and a mediator can interrupt a skill between
any two steps. Their observations carry `skill_status` (see `SkillStatus`).
"""

from __future__ import annotations

import enum
from typing import Any

import gymnasium as gym


class InvalidSkillError(ValueError):
    """A skill text the environment does not understand; the message lists what it does."""


class SkillStatus(enum.IntEnum):
    """Observation `skill_status`: what the last step's skill controller reported."""

    NONE = 0  # the last step was a low-level action, not a skill
    RUNNING = 1  # the skill took a step and is not finished
    DONE = 2  # the skill reached its goal with this step
    INFEASIBLE = 3  # the skill cannot be carried out from here (the step was a no-op)


class SkillEnv(gym.Env):
    """Base class of environments with skill-level text actions.

    Privileged entries (`oracle_plan`, `feasible_skills`...) can be costly. An env that
    implements `privileged_observation(name)` lets a world compute them only when a client
    asks for them: the world sets `compute_privileged = False`, the env then leaves those
    entries empty in its observations, and the world calls `privileged_observation` for the
    entries a step requested.
    """

    compute_privileged: bool = True

    def skill_names(self) -> list[str]:
        """The skill phrases that are well-formed in this environment (for planners' prompts)."""
        raise NotImplementedError

    def check_skill(self, skill: str) -> None:
        """Raise `InvalidSkillError` if `skill` is not a skill of this environment.

        Called for every env of a batch *before* any env is stepped, so that a bad skill
        in one env never leaves the batch half-stepped.
        """
        raise NotImplementedError

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        """The low-level action the skill's controller takes now, and the skill's status.

        Returns (None, DONE) when the goal already holds and (None, INFEASIBLE) when the
        skill cannot be carried out; the caller then does not step the environment.
        """
        raise NotImplementedError

    def skill_goal_reached(self, skill: str) -> bool:
        """Whether the skill's goal holds now (checked after each of its steps)."""
        raise NotImplementedError

    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        """The current observation, with `skill_status` set as given."""
        raise NotImplementedError


def step_skill(
    env: gym.Env, skill: str
) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
    """One low-level step of `env` chosen by the skill's controller (gymnasium's 5-tuple).

    `env` may be wrapped (TimeLimit...): the controller runs on `env.unwrapped` but the
    step goes through the wrappers. A skill that is already done or infeasible does not
    step the environment. `obs["skill_status"]` and `info["skill_status"]` give the status.
    """
    base = env.unwrapped
    if not isinstance(base, SkillEnv):
        raise InvalidSkillError(f"{type(base).__name__} has no skill-level actions")
    base.check_skill(skill)
    action, status = base.skill_action(skill)
    if action is None:
        return base.observe(status), 0.0, False, False, {"skill_status": status}
    obs, reward, terminated, truncated, info = env.step(action)
    if status == SkillStatus.RUNNING and base.skill_goal_reached(skill):
        status = SkillStatus.DONE
    obs = dict(obs)
    obs["skill_status"] = int(status)
    info["skill_status"] = status
    return obs, float(reward), terminated, truncated, info
