"""CLEVR-Robot's goals, their success and reward functions, and their instructions per level.

A goal is 6 numbers (the layout of KALM's released data): one flag per ball (red, blue, green,
purple, cyan) and a last entry that says what must hold.

* Relation goals, `[..1 = the ball to move.., ..2 = the reference ball.., direction]`: the angle
  from the reference ball to the moved ball lies within ±45° of the direction and the two are
  closer than `SUCCESS_DISTANCE` (0.39). Directions 0 behind (+y), 1 left (-x), 2 in front (-y),
  3 right (+x) are KALM's; 4 behind-left, 5 front-left, 6 front-right, 7 behind-right (the
  diagonals, same ±45° window around 135°, 225°, 315°, 45°) are this project's unseen relations.
* Group goals, `[..3 = a ball of the group.., kind]` (this project's unseen-hard goals, three
  balls each): 8 a row (their y within `LINE_TOLERANCE` of each other), 9 a column (x within
  `LINE_TOLERANCE`), 10 sorted left to right in ball order (red before blue before green...,
  each at least `SORT_GAP` further right), 11 gathered (every two closer than
  `SUCCESS_DISTANCE`).

Levels (each with its own goals, phrasings and success function, `LEVEL_SUCCESS`):

  training     KALM's 80 goals (20 ordered pairs x 4 directions, `GOALS`, in the released
               data's order), phrased with the training templates
  rephrased    the same 80 goals, phrased with templates and relation words never used in training
  unseen-easy  80 diagonal relation goals (20 pairs x 4 diagonals): a relation held out of
               training, phrased with the training templates
  unseen-hard  40 group goals (10 triples x 4 kinds): several balls at once

Reward (`reward`): +100 when the step reaches the goal; otherwise -10 when a ball the goal does
not name moved more than 0.2; otherwise 10 x (decrease of `goal_distance`) minus the largest
displacement of a ball the goal does not name. `goal_distance` is, for a relation, the moved
ball's distance to the point 0.25 from the reference ball in the goal direction; for a group,
how far it is from the arrangement (row: y spread; column: x spread; sorted: the summed order
violations; gathered: the largest distance between two of its balls).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from .physics import NUM_BALLS

COLORS = ("red", "blue", "green", "purple", "cyan")
LEVELS = ("training", "rephrased", "unseen-easy", "unseen-hard")
GOAL_DIM = NUM_BALLS + 1
MOVED, REFERENCE, MEMBER = 1, 2, 3
ROW, COLUMN, SORTED, GATHERED = 8, 9, 10, 11
GROUP_KINDS = (ROW, COLUMN, SORTED, GATHERED)

SUCCESS_DISTANCE = 0.39
LINE_TOLERANCE = 0.15
SORT_GAP = 0.1
TARGET_OFFSET = 0.25
DISTURBANCE_LIMIT = 0.2

# Unit vectors of the relation directions 0..7 (see the module doc).
_ANGLES = np.deg2rad([90, 180, 270, 0, 135, 225, 315, 45])
RELATION_UNITS = np.column_stack([np.cos(_ANGLES), np.sin(_ANGLES)])


def _ordered_pairs() -> list[tuple[int, int]]:
    """The 20 (moved, reference) pairs in the order of KALM's released data: for each ball from
    the last but one down to the first, its pairs with the later balls (latest first), then the
    same pairs reversed."""
    pairs = []
    for first in range(NUM_BALLS - 2, -1, -1):
        later = range(NUM_BALLS - 1, first, -1)
        pairs += [(first, other) for other in later] + [(other, first) for other in later]
    return pairs


def relation_goal(moved: int, reference: int, direction: int) -> np.ndarray:
    goal = np.zeros(GOAL_DIM, np.float32)
    goal[moved], goal[reference], goal[-1] = MOVED, REFERENCE, direction
    return goal


def group_goal(members: tuple[int, ...], kind: int) -> np.ndarray:
    goal = np.zeros(GOAL_DIM, np.float32)
    goal[list(members)], goal[-1] = MEMBER, kind
    return goal


PAIRS = _ordered_pairs()
TRIPLES = list(itertools.combinations(range(NUM_BALLS), 3))
# KALM's 80 goals, index i = the released data's trajectory i.
GOALS = np.stack([relation_goal(m, r, d) for m, r in PAIRS for d in range(4)])
DIAGONAL_GOALS = np.stack([relation_goal(m, r, d) for m, r in PAIRS for d in range(4, 8)])
GROUP_GOALS = np.stack([group_goal(t, k) for t in TRIPLES for k in GROUP_KINDS])


def goals(level: str) -> np.ndarray:
    """The (G, 6) goals of `level`."""
    check_level(level)
    if level == "unseen-easy":
        return DIAGONAL_GOALS
    if level == "unseen-hard":
        return GROUP_GOALS
    return GOALS


def check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"level: unknown level {level!r}; levels: {', '.join(LEVELS)}")


# -- reading goals ------------------------------------------------------------------------
def _balls(state: np.ndarray) -> np.ndarray:
    return np.asarray(state, dtype=np.float64).reshape(NUM_BALLS, 2)


def goal_kind(goal: np.ndarray) -> int:
    return round(float(goal[-1]))


def relation_of(goal: np.ndarray) -> tuple[int, int, int]:
    """(moved, reference, direction) of a relation goal."""
    flags = np.rint(goal[:NUM_BALLS]).astype(int)
    moved, reference = np.flatnonzero(flags == MOVED), np.flatnonzero(flags == REFERENCE)
    direction = goal_kind(goal)
    if len(moved) != 1 or len(reference) != 1 or not 0 <= direction < 8:
        raise ValueError(f"goal: not a relation goal (one 1, one 2, direction 0..7): {goal}")
    return int(moved[0]), int(reference[0]), direction


def members_of(goal: np.ndarray) -> list[int]:
    """The balls of a group goal."""
    members = np.flatnonzero(np.rint(goal[:NUM_BALLS]) == MEMBER)
    if len(members) < 2 or goal_kind(goal) not in GROUP_KINDS:
        raise ValueError(f"goal: not a group goal (flags 3, kind 8..11): {goal}")
    return [int(m) for m in members]


def named_balls(goal: np.ndarray) -> list[int]:
    """The balls a goal names (the others should stay where they are)."""
    return [int(b) for b in np.flatnonzero(np.rint(goal[:NUM_BALLS]) > 0)]


# -- success per level ---------------------------------------------------------------------
def relation_success(state: np.ndarray, goal: np.ndarray) -> bool:
    """Training, rephrased and unseen-easy goals: the moved ball within ±45° of the direction
    as seen from the reference ball, and closer than 0.39 to it."""
    moved, reference, direction = relation_of(goal)
    balls = _balls(state)
    offset = balls[moved] - balls[reference]
    distance = float(np.hypot(*offset))
    if not 0 < distance < SUCCESS_DISTANCE:
        return False
    cosine = float(offset @ RELATION_UNITS[direction]) / distance
    return cosine >= np.cos(np.pi / 4) - 1e-9


def group_success(state: np.ndarray, goal: np.ndarray) -> bool:
    """Unseen-hard goals: the group's balls in a row, a column, sorted, or gathered."""
    measure = _group_measure(state, goal)
    kind = goal_kind(goal)
    if kind in (ROW, COLUMN):
        return measure <= LINE_TOLERANCE
    if kind == SORTED:
        return measure == 0.0
    return measure < SUCCESS_DISTANCE


def _group_measure(state: np.ndarray, goal: np.ndarray) -> float:
    """Row: the y spread; column: the x spread; sorted: the summed shortfalls of each ball's x
    from its left neighbour's x + `SORT_GAP`; gathered: the largest distance between two."""
    members = members_of(goal)
    balls = _balls(state)[members]
    kind = goal_kind(goal)
    if kind == ROW:
        return float(np.ptp(balls[:, 1]))
    if kind == COLUMN:
        return float(np.ptp(balls[:, 0]))
    if kind == SORTED:
        return float(np.maximum(balls[:-1, 0] + SORT_GAP - balls[1:, 0], 0).sum())
    return float(np.linalg.norm(balls[:, None] - balls[None], axis=-1).max())


LEVEL_SUCCESS: dict[str, Callable[[np.ndarray, np.ndarray], bool]] = {
    "training": relation_success,
    "rephrased": relation_success,
    "unseen-easy": relation_success,
    "unseen-hard": group_success,
}


def success(state: np.ndarray, goal: np.ndarray) -> bool:
    """Whether `state` (10 numbers) satisfies `goal` (6 numbers), for a goal of any level."""
    goal = np.asarray(goal)
    if goal.shape != (GOAL_DIM,):
        raise ValueError(f"goal: expected {GOAL_DIM} numbers, got shape {goal.shape}")
    if goal_kind(goal) in GROUP_KINDS:
        return group_success(state, goal)
    return relation_success(state, goal)


def goal_distance(state: np.ndarray, goal: np.ndarray) -> float:
    """How far `state` is from `goal` (the shaping term of `reward`; see the module doc)."""
    if goal_kind(goal) in GROUP_KINDS:
        return _group_measure(state, goal)
    moved, reference, direction = relation_of(goal)
    balls = _balls(state)
    target = balls[reference] + TARGET_OFFSET * RELATION_UNITS[direction]
    return float(np.hypot(*(balls[moved] - target)))


def reward(before: np.ndarray, after: np.ndarray, goal: np.ndarray) -> float:
    """The reward of a step from `before` to `after` (10 numbers each), see the module doc."""
    if success(after, goal):
        return 100.0
    others = [b for b in range(NUM_BALLS) if b not in named_balls(goal)]
    moved = np.linalg.norm(_balls(after)[others] - _balls(before)[others], axis=1)
    disturbance = float(moved.max()) if len(others) else 0.0
    if disturbance > DISTURBANCE_LIMIT:
        return -10.0
    progress = goal_distance(before, goal) - goal_distance(after, goal)
    return float(10 * progress - disturbance)
