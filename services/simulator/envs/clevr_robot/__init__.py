"""CLEVR-Robot (Jiang et al. 2019, as KALM uses it): five balls pushed on a table to follow an
instruction. No package ships it; this one is 2-D (`physics.py`), with KALM's goal layout and
80 goals plus this project's levels of new instructions (`goals.py`, `instructions.py`).

The pure functions the learner side calls (imagined-rollout checks, evaluation):
`success(state, goal)`, `valid_state(state)`, `GOALS`, `goals(level)`, `instructions(level)`,
`LEVEL_SUCCESS`, `push(state, action)`, `reward(before, after, goal)`.
"""

from .env import MAX_EPISODE_STEPS, ClevrRobotEnv
from .goals import (
    COLORS,
    GOAL_DIM,
    GOALS,
    LEVEL_SUCCESS,
    LEVELS,
    goal_distance,
    goals,
    group_success,
    named_balls,
    relation_success,
    reward,
    success,
)
from .instructions import instructions, phrasings
from .physics import (
    NUM_ACTIONS,
    NUM_DIRECTIONS,
    STATE_DIM,
    push,
    random_state,
    split_action,
    valid_state,
)

__all__ = [
    "COLORS",
    "GOALS",
    "GOAL_DIM",
    "LEVELS",
    "LEVEL_SUCCESS",
    "MAX_EPISODE_STEPS",
    "NUM_ACTIONS",
    "NUM_DIRECTIONS",
    "STATE_DIM",
    "ClevrRobotEnv",
    "goal_distance",
    "goals",
    "group_success",
    "instructions",
    "named_balls",
    "phrasings",
    "push",
    "random_state",
    "relation_success",
    "reward",
    "split_action",
    "success",
    "valid_state",
]
