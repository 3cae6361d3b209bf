"""Path planning on the agent's own map: breadth-first search over poses (cell, direction).

A pose search is one BFS from the agent's pose over the cells it knows to be walkable, with
minigrid's three motion actions as edges (turning costs a step, as in the environment). It
answers "first action towards the nearest pose where ..." for every skill of one step, so one
search serves all skills (and the `feasible_skills` observation) at a given state.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from .knowledge import (
    DIR_VECTORS,
    DOOR,
    DOOR_OPEN,
    UNSEEN,
    WALKABLE_TYPES,
    WALL,
    AgentKnowledge,
    view_offsets,
)

LEFT, RIGHT, FORWARD = 0, 1, 2
_DIRS = [tuple(int(v) for v in vec) for vec in DIR_VECTORS]
Pose = tuple[int, int, int]  # x, y, direction


class PoseSearch:
    """All poses reachable from `start` on the agent's map, nearest first.

    The search is expanded lazily, only as far as the queries asked so far needed. With
    `through_unseen`, cells never seen count as walkable too (optimism: the agent replans as
    it sees them; the cell ahead is always in view, so it never walks into the unknown).
    """

    def __init__(
        self, knowledge: AgentKnowledge, start: Pose, through_unseen: bool = False
    ) -> None:
        self.knowledge = knowledge
        cells = knowledge.cells
        types = cells[..., 0]
        walkable = (types == DOOR) & (cells[..., 2] == DOOR_OPEN)
        for walkable_type in WALKABLE_TYPES:
            walkable |= types == walkable_type
        if through_unseen:
            walkable |= types == UNSEEN
        walkable[start[0], start[1]] = True  # wherever the agent stands, it can stand
        self._walkable = walkable.tolist()
        self.order: list[Pose] = [start]
        self.first_action: dict[Pose, int | None] = {start: None}
        self._head = 0

    def _expand_one(self) -> bool:
        """Expand the next pose of the frontier; False when everything is expanded."""
        if self._head >= len(self.order):
            return False
        pose = self.order[self._head]
        self._head += 1
        x, y, d = pose
        via = self.first_action[pose]
        dx, dy = _DIRS[d]
        nx, ny = x + dx, y + dy
        moves = [((x, y, (d - 1) % 4), LEFT), ((x, y, (d + 1) % 4), RIGHT)]
        inside = 0 <= nx < self.knowledge.width and 0 <= ny < self.knowledge.height
        if inside and self._walkable[nx][ny]:
            moves.append(((nx, ny, d), FORWARD))
        for nxt, action in moves:
            if nxt not in self.first_action:
                self.first_action[nxt] = action if via is None else via
                self.order.append(nxt)
        return True

    def nearest(self, goal: Callable[[Pose], bool]) -> tuple[Pose, int | None] | None:
        """The nearest pose satisfying `goal` and the first action towards it (None: here)."""
        index = 0
        while True:
            while index >= len(self.order):
                if not self._expand_one():
                    return None
            pose = self.order[index]
            if goal(pose):
                return pose, self.first_action[pose]
            index += 1

    def action_to_face(self, target: tuple[int, int]) -> tuple[Pose, int | None] | None:
        """Towards the nearest pose whose front cell is `target`."""

        def facing(pose: Pose) -> bool:
            dx, dy = _DIRS[pose[2]]
            return pose[0] + dx == target[0] and pose[1] + dy == target[1]

        return self.nearest(facing)

    def action_to_stand_on(self, target: tuple[int, int]) -> tuple[Pose, int | None] | None:
        return self.nearest(lambda pose: (pose[0], pose[1]) == target)


class FrontierTest:
    """Whether looking from a pose would reveal a cell the agent has never seen.

    Replays minigrid's occlusion rule (`Grid.process_vis`) on the agent's map, taking unseen
    cells as transparent (they might be) and cells outside the grid as walls, so that poses
    facing the outside of the room's walls are never taken for frontiers.
    """

    def __init__(self, knowledge: AgentKnowledge) -> None:
        self.knowledge = knowledge
        self.size = knowledge.view_size
        self.offsets = _view_offset_lists(self.size)
        cells = knowledge.cells
        opaque = (cells[..., 0] == WALL) | ((cells[..., 0] == DOOR) & (cells[..., 2] != DOOR_OPEN))
        unseen = cells[..., 0] == UNSEEN
        self.opaque = opaque.tolist()
        self.unseen = unseen.tolist()
        # Sight spreads from the agent through transparent cells to their neighbours (diagonals
        # included), so the first unseen cell it reaches borders a seen transparent one: no
        # such border cell in view, nothing new to see.
        border = unseen & _dilate(~opaque & ~unseen, 1)
        self.border_cells = [(int(x), int(y)) for x, y in np.argwhere(border)]
        self.anything_to_see = bool(self.border_cells)

    def _border_in_view(self, x: int, y: int, d: int) -> bool:
        fx, fy = _DIRS[d]
        half = self.size // 2
        for bx, by in self.border_cells:
            ahead = (bx - x) * fx + (by - y) * fy
            aside = (by - y) * fx - (bx - x) * fy  # along the right-hand vector (-fy, fx)
            if 0 <= ahead < self.size and -half <= aside <= half:
                return True
        return False

    def __call__(self, pose: Pose) -> bool:
        x, y, d = pose
        if not self._border_in_view(x, y, d):
            return False
        size = self.size
        width, height = self.knowledge.width, self.knowledge.height
        offsets = self.offsets[d]
        unseen = [[False] * size for _ in range(size)]
        opaque = [[True] * size for _ in range(size)]
        for i in range(size):
            for j in range(size):
                cx, cy = x + offsets[i][j][0], y + offsets[i][j][1]
                if 0 <= cx < width and 0 <= cy < height:
                    opaque[i][j] = self.opaque[cx][cy]
                    unseen[i][j] = self.unseen[cx][cy]
        mask = [[False] * size for _ in range(size)]
        mask[size // 2][size - 1] = True
        opaque[size // 2][size - 1] = False
        for j in reversed(range(size)):
            for i in range(size - 1):
                if mask[i][j] and not opaque[i][j]:
                    mask[i + 1][j] = True
                    if j > 0:
                        mask[i + 1][j - 1] = mask[i][j - 1] = True
            for i in reversed(range(1, size)):
                if mask[i][j] and not opaque[i][j]:
                    mask[i - 1][j] = True
                    if j > 0:
                        mask[i - 1][j - 1] = mask[i][j - 1] = True
        return any(mask[i][j] and unseen[i][j] for i in range(size) for j in range(size))


@functools.cache
def _view_offset_lists(size: int) -> list:
    return view_offsets(size).tolist()


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    """Cells within `radius` (Chebyshev distance) of a True cell (separable, rows then columns)."""
    width, height = mask.shape
    rows = np.zeros((width + 2 * radius, height), dtype=bool)
    for dx in range(2 * radius + 1):
        rows[dx : dx + width] |= mask
    rows = rows[radius : radius + width]
    out = np.zeros((width, height + 2 * radius), dtype=bool)
    for dy in range(2 * radius + 1):
        out[:, dy : dy + height] |= rows
    return out[:, radius : radius + height]
