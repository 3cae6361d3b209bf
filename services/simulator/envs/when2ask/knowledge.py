"""What the agent knows: every cell it has seen, as it looked the last time it was seen.

The When2Ask skills and the text observation use only this knowledge, never the true grid,
so that a planner's view of the world is the agent's view (partial observability).
"""

from __future__ import annotations

import numpy as np
from minigrid.core.constants import COLOR_TO_IDX, IDX_TO_COLOR, IDX_TO_OBJECT, OBJECT_TO_IDX

UNSEEN = OBJECT_TO_IDX["unseen"]
EMPTY = OBJECT_TO_IDX["empty"]
WALL = OBJECT_TO_IDX["wall"]
DOOR = OBJECT_TO_IDX["door"]
KEY = OBJECT_TO_IDX["key"]
BALL = OBJECT_TO_IDX["ball"]
BOX = OBJECT_TO_IDX["box"]
GOAL = OBJECT_TO_IDX["goal"]
DOOR_OPEN, DOOR_CLOSED, DOOR_LOCKED = 0, 1, 2

# Things worth naming (walls and empty floor are not).
OBJECT_TYPES = frozenset({DOOR, KEY, BALL, BOX, GOAL})
# Cells the agent can walk onto.
WALKABLE_TYPES = frozenset({EMPTY, OBJECT_TO_IDX["floor"], GOAL})

DIR_VECTORS = np.array([(1, 0), (0, 1), (-1, 0), (0, -1)])

Identity = tuple[int, int]  # (object type index, colour index)


def identity_of(obj_type: int, color: int) -> Identity:
    """Objects are named by type and colour; there is one goal, whatever its colour."""
    return (int(obj_type), 0 if obj_type == GOAL else int(color))


def object_name(identity: Identity) -> str:
    """The name skills use for an object: "the red key", "the goal"."""
    obj_type, color = identity
    if obj_type == GOAL:
        return "the goal"
    return f"the {IDX_TO_COLOR[color]} {IDX_TO_OBJECT[obj_type]}"


def describe_object(obj_type: int, color: int, state: int) -> str:
    """An object with an indefinite article, as in "a locked red door"."""
    if obj_type == GOAL:
        return "the goal"
    words = f"{IDX_TO_COLOR[color]} {IDX_TO_OBJECT[obj_type]}"
    if obj_type == DOOR:
        words = f"{('open', 'closed', 'locked')[state]} {words}"
    return ("an " if words[0] in "aeiou" else "a ") + words


def view_offsets(view_size: int) -> np.ndarray:
    """World offsets of every cell of the agent's view, per direction: [dir, i, j] -> (dx, dy).

    View cell (i, j) is column i (left to right) and row j (far to near) of minigrid's
    egocentric image; the agent stands at (view_size // 2, view_size - 1).
    """
    offsets = np.zeros((4, view_size, view_size, 2), dtype=np.int64)
    for d, forward in enumerate(DIR_VECTORS):
        right = np.array((-forward[1], forward[0]))
        for i in range(view_size):
            for j in range(view_size):
                offsets[d, i, j] = forward * (view_size - 1 - j) + right * (i - view_size // 2)
    return offsets


class AgentKnowledge:
    """The agent's map: minigrid encoding per cell, type 0 (unseen) where never seen."""

    def __init__(self, width: int, height: int, view_size: int) -> None:
        self.width = width
        self.height = height
        self.view_size = view_size
        self.cells = np.zeros((width, height, 3), dtype=np.uint8)
        self._offsets = view_offsets(view_size).tolist()
        # Objects in the order they were first seen (for stable text).
        self._first_seen: dict[Identity, int] = {}
        self._objects: list[tuple[Identity, tuple[int, int], int]] | None = None

    def clear(self) -> None:
        self.cells[:] = 0
        self._first_seen.clear()
        self._objects = None

    def observe(
        self, image: np.ndarray, agent_pos: tuple[int, int], agent_dir: int, under_agent: tuple
    ) -> None:
        """Record an egocentric minigrid image taken at `agent_pos` facing `agent_dir`.

        `under_agent` is the encoding of the agent's own cell, which the image replaces with
        what the agent carries.
        """
        ax, ay = int(agent_pos[0]), int(agent_pos[1])
        agent_view = (self.view_size // 2, self.view_size - 1)
        pixels = image.tolist()
        for i, column in enumerate(self._offsets[agent_dir]):
            for j, (dx, dy) in enumerate(column):
                encoding = pixels[i][j]
                x, y = ax + dx, ay + dy
                if encoding[0] == UNSEEN or (i, j) == agent_view:
                    continue
                if 0 <= x < self.width and 0 <= y < self.height:
                    self.cells[x, y] = encoding
                    if encoding[0] in OBJECT_TYPES:
                        identity = identity_of(encoding[0], encoding[1])
                        self._first_seen.setdefault(identity, len(self._first_seen))
        self.cells[ax, ay] = under_agent
        self._objects = None

    # -- queries (cached until the next observation) -------------------------------------
    def known(self, x: int, y: int) -> bool:
        return bool(self.cells[x, y, 0] != UNSEEN)

    def seen_objects(self) -> list[tuple[Identity, tuple[int, int], int]]:
        """(identity, position, state) of every object now on the agent's map, oldest first."""
        if self._objects is None:
            found = []
            types = self.cells[..., 0]
            for x, y in np.argwhere(types >= DOOR):  # door, key, ball, box, goal, lava, agent
                obj_type, color, state = (int(v) for v in self.cells[x, y])
                if obj_type not in OBJECT_TYPES:
                    continue
                found.append((identity_of(obj_type, color), (int(x), int(y)), state))
            found.sort(key=lambda item: self._first_seen.get(item[0], len(self._first_seen)))
            self._objects = found
        return self._objects

    def find(self, identity: Identity) -> tuple[int, int] | None:
        """Where the agent last saw the object, or None."""
        for seen, pos, _ in self.seen_objects():
            if seen == identity:
                return pos
        return None

    def identities(self) -> frozenset[Identity]:
        return frozenset(identity for identity, _, _ in self.seen_objects())

    def describe(self, carrying: tuple[int, int] | None) -> str:
        """The agent's symbolic knowledge in words."""
        seen = [
            describe_object(ident[0], ident[1], state) for ident, _, state in self.seen_objects()
        ]
        text = f"You have seen {', '.join(seen)}." if seen else "You have seen nothing yet."
        if carrying is None:
            return text + " You carry nothing."
        return text + f" You carry {describe_object(carrying[0], carrying[1], 0)}."


def color_index(name: str) -> int:
    return COLOR_TO_IDX[name]
