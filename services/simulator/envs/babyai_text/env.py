"""BabyAI-Text environments: a BabyAI level seen through words, acted on with six phrases.

Observations:
  image           the agent's 7x7 egocentric view, minigrid encoding (type, colour, state)
  direction       0 right, 1 down, 2 left, 3 up
  mission         the instruction ("go to the red ball")
  text            the view in words (`describe.py`) and what the agent carries
  skill_status    see `SkillStatus`
  mission_tokens  the mission as word ids (`symbolic.py`)
  action_phrases  the six text actions this env accepts, one per line, in the order of
                  `action` (they depend on the variant)
  oracle_plan     privileged, only with `expert=True` (it halves the steps per second): the
                  next action of minigrid's BabyAI expert (`BabyAIBot`) as its text phrase;
                  "" when the expert has given up on the episode
Worlds return `mission_tokens`, `action_phrases` and `oracle_plan` only when asked for by
name (as privileged entries): most clients read none of them.

`image`, `direction` and `mission_tokens` are the symbolic observation of BabyAI's own
baselines, what Symbolic-PPO learns from: numeric, the same in every variant, so that
Stable-Baselines3 can train on a world of these envs (`WorldVecEnv` with keys=("image",
"direction", "mission_tokens") under `llmrl.learner.wrappers.FloatObservations`: the image
is codes, not a picture, so an MLP should see it, not SB3's CNN).

Actions: `action` Discrete(6) = minigrid's 0..5, or the same as skills, one step each:
"turn left", "turn right", "go forward", "pick up", "drop", "toggle".

Variants (`variant=`, `variants.py`): GLAM's generalisation tests, the same level in other
words: other nouns, colour synonyms, invented words, a reworded goal, synonym actions, French.

Levels: any minigrid BabyAI level by its name without prefix and version (`GoToLocal` is
`BabyAI-GoToLocal-v0`), or a mix of `mixes.py`. Reward and termination are the level's own
(1 - 0.9 * steps / max_steps on success).
"""

from __future__ import annotations

import contextlib
import io
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.utils.baby_ai_bot import BabyAIBot

from llmrl.common.registry import registry

from ..base import InvalidSkillError, SkillEnv, SkillStatus
from ..text_spaces import text_space
from .describe import describe_view
from .mixes import MIXES, MixLevel
from .symbolic import mission_space, mission_tokens
from .variants import ACTION_PHRASES, variant_named

VIEW_SIZE = 7


def make_level(level: str) -> RoomGridLevel:
    """A fresh minigrid level: a mix of `mixes.py` or a BabyAI level by name."""
    if level in MIXES:
        return MixLevel(**MIXES[level])
    env_id = f"BabyAI-{level}-v0"
    if env_id not in gym.registry:
        known = sorted(
            name.removeprefix("BabyAI-").removesuffix("-v0")
            for name in gym.registry
            if name.startswith("BabyAI-")
        )
        raise ValueError(f"unknown level {level!r}; mixes: {sorted(MIXES)}; BabyAI levels: {known}")
    return gym.make(env_id).unwrapped


class BabyAITextEnv(SkillEnv):
    """One BabyAI level (or mix), described in words, with the six text actions."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 - gymnasium's convention
    # Cheap, but not read by every client: returned by worlds on request only.
    privileged_observations: ClassVar[tuple[str, ...]] = ("action_phrases", "mission_tokens")

    def __init__(
        self, level: str = "GoToLocal", expert: bool = False, variant: str = "none"
    ) -> None:
        self.variant = variant_named(variant)
        self.actions = self.variant.actions
        self.level_name = level
        self.level = make_level(level)
        self.expert = expert
        self.action_space = spaces.Discrete(len(self.actions))
        entries = {
            "image": spaces.Box(0, 255, (VIEW_SIZE, VIEW_SIZE, 3), dtype=np.uint8),
            "direction": spaces.Discrete(4),
            "mission": text_space(512),
            "text": text_space(2048),
            "skill_status": spaces.Discrete(len(SkillStatus)),
            "action_phrases": text_space(256),
            "mission_tokens": mission_space(),
        }
        if expert:
            entries["oracle_plan"] = text_space(64)
        self.observation_space = spaces.Dict(entries)
        self._image = np.zeros((VIEW_SIZE, VIEW_SIZE, 3), dtype=np.uint8)
        self._bot: BabyAIBot | None = None
        self._expert_action: int | None = None

    # -- gymnasium API ------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        level_seed = int(self.np_random.integers(2**31 - 1))
        # Level generation reports rejected samples with a bare print: keep stdout clean.
        with contextlib.redirect_stdout(io.StringIO()):
            obs, _ = self.level.reset(seed=level_seed)
        self._image = obs["image"]
        self._bot = BabyAIBot(self.level) if self.expert else None
        self._ask_expert(None)
        return self.observe(), {"mission": self.variant.goal(self.level.mission)}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if not self.action_space.contains(action):
            raise ValueError(
                f"action must be an integer in [0, {len(self.actions)}), got {action!r}"
            )
        obs, reward, terminated, truncated, info = self.level.step(int(action))
        self._image = obs["image"]
        if not (terminated or truncated):
            self._ask_expert(int(action))
        return self.observe(SkillStatus.NONE), float(reward), terminated, truncated, info

    def _ask_expert(self, action_taken: int | None) -> None:
        """The expert's next action; it must hear about every step to keep its map."""
        self._expert_action = None
        if self._bot is None:
            return
        try:
            suggestion = self._bot.replan(action_taken)
        except Exception:  # the expert cannot always recover from the agent's detours
            self._bot = None
            return
        if suggestion is not None and 0 <= int(suggestion) < len(ACTION_PHRASES):
            self._expert_action = int(suggestion)

    # -- observations -------------------------------------------------------------------
    def observe(self, skill_status: SkillStatus = SkillStatus.NONE) -> dict[str, Any]:
        carried = self.level.carrying
        obs = {
            "image": self._image,
            "direction": int(self.level.agent_dir),
            "mission": self.variant.goal(self.level.mission),
            "text": self.variant.text(
                describe_view(
                    self._image, (carried.type, carried.color) if carried is not None else None
                )
            ),
            "skill_status": int(skill_status),
            "action_phrases": "\n".join(self.actions),
            "mission_tokens": mission_tokens(self.level.mission),
        }
        if self.expert:
            action = self._expert_action
            obs["oracle_plan"] = self.actions[action] if action is not None else ""
        return obs

    # -- skills: the six text actions ---------------------------------------------------
    def skill_names(self) -> list[str]:
        return list(self.actions)

    def check_skill(self, skill: str) -> None:
        self._action_of(skill)

    def skill_action(self, skill: str) -> tuple[int | None, SkillStatus]:
        return self._action_of(skill), SkillStatus.RUNNING

    def skill_goal_reached(self, skill: str) -> bool:
        return True  # every text action is one step

    def _action_of(self, skill: str) -> int:
        words = " ".join(str(skill).lower().replace(".", " ").split())
        if words not in self.actions:
            raise InvalidSkillError(
                f"unknown action {skill!r}; valid actions: {', '.join(self.actions)}"
            )
        return self.actions.index(words)


LEVEL_DESCRIPTIONS = {
    "GoToLocal": "go to an object in one room",
    "GoToLocalS5N2": "go to an object in a 5x5 room (3x3 inside) holding two objects",
    "PickupLoc": "pick up an object, maybe named by its place",
    "PutNextLocal": "put an object next to another, in one room",
    "OpenDoor": "open a door of the middle room",
    "MixTrain": "training mix: go to, pick up, put next to, open, sequences of two",
    "MixTestNewObjects": "test mix: training tasks on held-out object/colour combinations",
    "MixTestNewCompositions": "test mix: sequences of two never trained on",
}

for _level, _what in LEVEL_DESCRIPTIONS.items():
    registry.register_env(
        f"BabyAIText-{_level}",
        description=f"BabyAI-Text: {_what}",
        kwargs={"level": _level},
        tags=("minigrid", "babyai", "text", "glam"),
    )(BabyAITextEnv)
