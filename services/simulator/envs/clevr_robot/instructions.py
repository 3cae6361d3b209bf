"""CLEVR-Robot's instructions: templates written for this project, per level.

* training: `TRAINING_TEMPLATES` x the relation words of `TRAINING_RELATIONS` for KALM's 80 goals;
* rephrased: the same goals in `REPHRASED_TEMPLATES`, which use neither a training template nor
  a training relation word (`REPHRASED_RELATIONS`), so only the meaning carries over;
* unseen-easy: the diagonal goals in the training templates with `DIAGONAL_RELATIONS`;
* unseen-hard: the group goals in `GROUP_TEMPLATES`.

`instructions(level)` lists every (goal, text) pair of a level; `phrasings(goal, level)` the
texts of one goal.
"""

from __future__ import annotations

import numpy as np

from .goals import (
    COLORS,
    COLUMN,
    GATHERED,
    GROUP_KINDS,
    ROW,
    SORTED,
    check_level,
    goal_kind,
    goals,
    members_of,
    relation_of,
)

TRAINING_TEMPLATES = (
    "Push the {moved} ball {relation} the {reference} ball",
    "Move the {moved} ball {relation} the {reference} ball",
    "Can you push the {moved} ball {relation} the {reference} ball?",
    "The {moved} ball should end up {relation} the {reference} ball",
    "Get the {moved} ball {relation} the {reference} ball",
    "Place the {moved} ball {relation} the {reference} ball",
)
TRAINING_RELATIONS = {0: "behind", 1: "to the left of", 2: "in front of", 3: "to the right of"}

REPHRASED_TEMPLATES = (
    "I want the {moved} sphere {relation} the {reference} sphere",
    "Nudge the {moved} one so that it sits {relation} the {reference} one",
    "Could you shift the {moved} ball until it lies {relation} the {reference} ball?",
    "Keep shoving the {moved} ball till it rests {relation} the {reference} ball",
    "Make sure the {moved} ball is {relation} the {reference} ball",
    "Bring the {moved} ball over {relation} the {reference} ball",
)
REPHRASED_RELATIONS = {
    0: "at the back of",
    1: "on the left side of",
    2: "at the front of",
    3: "on the right side of",
}

DIAGONAL_RELATIONS = {
    4: "behind and to the left of",
    5: "in front of and to the left of",
    6: "in front of and to the right of",
    7: "behind and to the right of",
}

GROUP_TEMPLATES = {
    ROW: (
        "Line up the {a}, {b} and {c} balls in a horizontal row",
        "Put the {a}, {b} and {c} balls side by side in one row",
    ),
    COLUMN: (
        "Line up the {a}, {b} and {c} balls in a column from front to back",
        "Stack the {a}, {b} and {c} balls one behind another in a column",
    ),
    SORTED: (
        "Arrange the {a}, {b} and {c} balls from left to right in that order",
        "Sort the balls so that {a} is leftmost, then {b}, then {c} on the right",
    ),
    GATHERED: (
        "Bring the {a}, {b} and {c} balls close together",
        "Gather the {a}, {b} and {c} balls into one tight group",
    ),
}


def phrasings(goal: np.ndarray, level: str) -> list[str]:
    """The instructions of `goal` at `level` (a goal of that level; see the module doc)."""
    check_level(level)
    if goal_kind(goal) in GROUP_KINDS:
        if level != "unseen-hard":
            raise ValueError(f"goal: a group goal belongs to level 'unseen-hard', not {level!r}")
        a, b, c = (COLORS[m] for m in members_of(goal))
        return [t.format(a=a, b=b, c=c) for t in GROUP_TEMPLATES[goal_kind(goal)]]
    moved, reference, direction = relation_of(goal)
    templates, relations = {
        "training": (TRAINING_TEMPLATES, TRAINING_RELATIONS),
        "rephrased": (REPHRASED_TEMPLATES, REPHRASED_RELATIONS),
        "unseen-easy": (TRAINING_TEMPLATES, DIAGONAL_RELATIONS),
        "unseen-hard": ((), {}),
    }[level]
    if direction not in relations:
        raise ValueError(f"goal: direction {direction} is not a goal of level {level!r}")
    return [
        t.format(moved=COLORS[moved], reference=COLORS[reference], relation=relations[direction])
        for t in templates
    ]


def instructions(level: str) -> list[tuple[np.ndarray, str]]:
    """Every (goal, instruction) pair of `level`: each goal with each of its phrasings."""
    return [(goal, text) for goal in goals(level) for text in phrasings(goal, level)]
