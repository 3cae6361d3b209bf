"""The `ClevrRobot` environment: push five balls on a table to follow an instruction.

Settings: `level` (training | rephrased | unseen-easy | unseen-hard, see `goals.py`), `goal`
(optional: the index of one goal of that level, every episode then pursues it; default: a
random goal each episode), `goals_per_start` (default 1: a new start state every episode; K > 1
keeps a start state for K episodes in a row, each with its own random goal, so that a dataset
shows the same start under several instructions; a kept start that already satisfies the next
goal is replaced by a fresh one). The world's `seed` seeds the start states, goals and
phrasings.

Action: `Discrete(40)`, ball = a // 8, direction = a % 8 (`physics.py`).

Observations:
  state        Box (10,) float32  the (x, y) of the red, blue, green, purple and cyan balls
  goal         Box (6,) float32   the goal's numbers (`goals.py`)
  instruction  text               one phrasing of the goal for this level
  success      Discrete(2)        1 once the goal holds

Reward as `goals.reward`; reaching the goal terminates the episode; the registered time limit
(50 steps) truncates it. A start state never satisfies its goal already.

`reset(options=...)` may fix the episode: `state` (10 numbers, a valid state), `goal`
(6 numbers of this level) and `instruction` (any text), e.g. to replay a dataset's starts.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from llmrl.common.registry import registry
from llmrl.simulator.errors import WorldError

from ..text_spaces import text_space
from .goals import GOAL_DIM, LEVEL_SUCCESS, LEVELS, goals, reward
from .instructions import phrasings
from .physics import NUM_ACTIONS, STATE_DIM, TABLE_X, TABLE_Y, push, random_state, valid_state

MAX_EPISODE_STEPS = 50
DEFAULTS: dict[str, Any] = {"level": "training", "goal": None, "goals_per_start": 1}


@registry.register_env(
    "ClevrRobot", max_episode_steps=MAX_EPISODE_STEPS, kwargs=DEFAULTS, tags=("kalm",)
)
class ClevrRobotEnv(gym.Env):
    """Five balls on a table, 40 push actions, an instruction per episode (KALM's CLEVR-Robot)."""

    def __init__(
        self, level: str = "training", goal: int | None = None, goals_per_start: int = 1
    ) -> None:
        if level not in LEVELS:
            raise WorldError("level", f"unknown level {level!r}; levels: {', '.join(LEVELS)}")
        self.level = level
        self.goals = goals(level)
        if goal is not None and (
            isinstance(goal, bool)
            or not isinstance(goal, int | np.integer)
            or not 0 <= goal < len(self.goals)
        ):
            raise WorldError(
                "goal",
                f"expected a goal index 0..{len(self.goals) - 1} of level {level!r}, got {goal!r}",
            )
        self.goal_index = None if goal is None else int(goal)
        if (
            isinstance(goals_per_start, bool)
            or not isinstance(goals_per_start, int | np.integer)
            or not 1 <= goals_per_start <= 1000
        ):
            raise WorldError(
                "goals_per_start",
                f"expected an integer in [1, 1000] (episodes that share a start state), "
                f"got {goals_per_start!r}",
            )
        self.goals_per_start = int(goals_per_start)
        self._start: np.ndarray | None = None  # the start state episodes share
        self._start_uses = 0
        self.success_fn = LEVEL_SUCCESS[level]
        low = np.tile([TABLE_X[0], TABLE_Y[0]], STATE_DIM // 2).astype(np.float32)
        high = np.tile([TABLE_X[1], TABLE_Y[1]], STATE_DIM // 2).astype(np.float32)
        self.observation_space = spaces.Dict(
            {
                "state": spaces.Box(low, high, (STATE_DIM,), np.float32),
                "goal": spaces.Box(0.0, 11.0, (GOAL_DIM,), np.float32),
                "instruction": text_space(200),
                "success": spaces.Discrete(2),
            }
        )
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self.state = np.zeros(STATE_DIM, np.float32)
        self.goal = self.goals[0]
        self.instruction = ""

    def _observe(self) -> dict[str, Any]:
        return {
            "state": self.state.copy(),
            "goal": self.goal.copy(),
            "instruction": self.instruction,
            "success": int(self.success_fn(self.state, self.goal)),
        }

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:  # a reseeded env replays its episodes from the first start
            self._start = None
        options = dict(options or {})
        unknown = set(options) - {"state", "goal", "instruction"}
        if unknown:
            raise WorldError("options", f"unknown reset options {sorted(unknown)}; "
                             "options: state, goal, instruction")  # fmt: skip
        if "goal" in options:
            self.goal = self._check_goal(options["goal"])
        else:
            index = self.goal_index
            if index is None:
                index = int(self.np_random.integers(len(self.goals)))
            self.goal = self.goals[index]
        if "instruction" in options:
            self.instruction = str(options["instruction"])
        else:
            texts = phrasings(self.goal, self.level)
            self.instruction = texts[int(self.np_random.integers(len(texts)))]
        if "state" in options:
            state = np.asarray(options["state"], dtype=np.float32)
            if not valid_state(state):
                raise WorldError(
                    "options.state",
                    "expected 10 finite numbers, balls on the table and not overlapping, "
                    f"got {options['state']!r}",
                )
            self.state = state
        else:
            self.state = self._next_start()
        return self._observe(), {"level": self.level}

    def _next_start(self) -> np.ndarray:
        """The shared start while it has uses left and does not meet the goal already, else a
        fresh random one (never meeting the goal)."""
        start = self._start
        if (
            start is None
            or self._start_uses >= self.goals_per_start
            or self.success_fn(start, self.goal)
        ):
            start = random_state(self.np_random)
            while self.success_fn(start, self.goal):
                start = random_state(self.np_random)
            self._start, self._start_uses = start, 0
        self._start_uses += 1
        return start.copy()

    def _check_goal(self, goal: Any) -> np.ndarray:
        goal = np.asarray(goal, dtype=np.float32)
        matches = np.all(self.goals == goal, axis=1) if goal.shape == (GOAL_DIM,) else []
        if not np.any(matches):
            raise WorldError("options.goal", f"not a goal of level {self.level!r}: {goal!r}")
        return self.goals[int(np.argmax(matches))]

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        before = self.state
        self.state = push(before, int(action))
        done = self.success_fn(self.state, self.goal)
        return self._observe(), reward(before, self.state, self.goal), done, False, {}
