"""The agent's 7x7 egocentric view in words, GLAM style.

Every visible object is given with its colour and where it is in steps from the agent
("a red ball 2 steps left and 1 step forward"); walls only straight ahead, straight left and
straight right, the nearest one each ("a wall 3 steps forward"), since a wall per cell would
drown the objects. Objects come nearest first (then left to right), walls last.
"""

from __future__ import annotations

import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, OBJECT_TO_IDX

from ..when2ask.knowledge import describe_object

_SKIPPED = {OBJECT_TO_IDX[name] for name in ("unseen", "empty", "wall", "agent")}
_NAMED = np.array([index not in _SKIPPED for index in range(256)])  # type index -> named?
WALL = OBJECT_TO_IDX["wall"]


def _steps(count: int, direction: str) -> str:
    return f"{count} step{'s' if count != 1 else ''} {direction}"


def position_phrase(left: int, forward: int) -> str:
    """'2 steps left and 1 step forward' for an offset from the agent (left < 0: right)."""
    parts = []
    if left > 0:
        parts.append(_steps(left, "left"))
    elif left < 0:
        parts.append(_steps(-left, "right"))
    if forward > 0:
        parts.append(_steps(forward, "forward"))
    return " and ".join(parts)


def describe_view(image: np.ndarray, carrying: tuple[str, str] | None) -> str:
    """The view (minigrid's egocentric encoding, agent at the bottom middle) in words.

    `carrying` is the (type, colour) of what the agent holds, or None.
    """
    size = image.shape[0]
    ax, ay = size // 2, size - 1
    objects = []
    named = _NAMED[image[..., 0]]
    named[ax, ay] = False  # what the agent carries is drawn on its own cell
    for i, j in np.argwhere(named).tolist():
        obj_type, color, state = image[i, j].tolist()
        left, forward = ax - i, ay - j
        phrase = f"{describe_object(obj_type, color, state)} {position_phrase(left, forward)}"
        objects.append((abs(left) + forward, i, phrase))
    seen = [phrase for _, _, phrase in sorted(objects)]
    types = image[..., 0].tolist()
    for cells, direction in (
        ([(ax, j) for j in range(ay - 1, -1, -1)], "forward"),
        ([(i, ay) for i in range(ax - 1, -1, -1)], "left"),
        ([(i, ay) for i in range(ax + 1, size)], "right"),
    ):
        for distance, (i, j) in enumerate(cells, start=1):
            if types[i][j] == WALL:
                seen.append(f"a wall {_steps(distance, direction)}")
                break
    text = f"You see {', '.join(seen)}." if seen else "You see nothing."
    if carrying is None:
        return text + " You carry nothing."
    obj_type, color = carrying
    return text + f" You carry {describe_object(OBJECT_TO_IDX[obj_type], COLOR_TO_IDX[color], 0)}."
