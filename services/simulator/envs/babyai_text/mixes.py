"""Task mixes for BabyAI-Text: a training mix and two held-out test mixes (as GLAM's).

All mixes share one layout, so that only the instruction and the objects differ: the agent
starts in the middle room of minigrid's 3x3 room grid (8x8 rooms, as in the *Local and OpenDoor
levels), whose four walls each have a closed, unlocked door of a distinct colour; the room
holds `num_objs` objects (balls, boxes, keys), each colour/type combination at most once so
that every description names exactly one object. Time limit: 64 steps per navigation the
instruction needs (BabyAI's rule for one room).

Task families: `goto` ("go to the red ball"), `pickup` ("pick up the red ball"), `putnext`
("put the red ball next to the blue key"), `open` ("open the green door"), and sequences of
two ("pick up the red ball, then go to the blue key", minigrid's BeforeInstr).

What is held out:
* `MixTrain`: goto, pickup, putnext, open, and the sequences (goto, pickup), (pickup, goto)
  and (goto, goto). The six combinations in `HELD_OUT_OBJECTS` never appear (neither in
  instructions nor in the room).
* `MixTestNewObjects`: the same families, but every object an instruction names is one of
  `HELD_OUT_OBJECTS` (the other objects of the room may be any combination).
* `MixTestNewCompositions`: only sequences never trained on, `TEST_SEQUENCES`: open then
  go to, open then pick up, go to then open, put next to then go to; with training objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from minigrid.core.constants import COLOR_NAMES
from minigrid.envs.babyai.core.roomgrid_level import RoomGridLevel
from minigrid.envs.babyai.core.verifier import (
    BeforeInstr,
    GoToInstr,
    ObjDesc,
    OpenInstr,
    PickupInstr,
    PutNextInstr,
)

ObjectKind = tuple[str, str]  # (type, colour)
Task = tuple[str, ...]  # one family, or two for a sequence

OBJECT_TYPES = ("ball", "box", "key")
ALL_OBJECTS: tuple[ObjectKind, ...] = tuple((t, c) for c in COLOR_NAMES for t in OBJECT_TYPES)
# One per colour, each type twice: unseen in training.
HELD_OUT_OBJECTS: tuple[ObjectKind, ...] = (
    ("ball", "red"),
    ("box", "green"),
    ("key", "blue"),
    ("ball", "purple"),
    ("box", "yellow"),
    ("key", "grey"),
)
TRAIN_OBJECTS = tuple(obj for obj in ALL_OBJECTS if obj not in HELD_OUT_OBJECTS)

SINGLE_TASKS: tuple[Task, ...] = (("goto",), ("pickup",), ("putnext",), ("open",))
TRAIN_SEQUENCES: tuple[Task, ...] = (("goto", "pickup"), ("pickup", "goto"), ("goto", "goto"))
TEST_SEQUENCES: tuple[Task, ...] = (
    ("open", "goto"),
    ("open", "pickup"),
    ("goto", "open"),
    ("putnext", "goto"),
)

MIXES: dict[str, dict[str, Any]] = {
    "MixTrain": {
        "tasks": SINGLE_TASKS + TRAIN_SEQUENCES,
        "target_objects": TRAIN_OBJECTS,
        "other_objects": TRAIN_OBJECTS,
    },
    "MixTestNewObjects": {
        "tasks": SINGLE_TASKS + TRAIN_SEQUENCES,
        "target_objects": HELD_OUT_OBJECTS,
        "other_objects": ALL_OBJECTS,
    },
    "MixTestNewCompositions": {
        "tasks": TEST_SEQUENCES,
        "target_objects": TRAIN_OBJECTS,
        "other_objects": TRAIN_OBJECTS,
    },
}


class MixLevel(RoomGridLevel):
    """A BabyAI level drawing its instruction from `tasks` and its objects from pools."""

    def __init__(
        self,
        tasks: Sequence[Task],
        target_objects: Sequence[ObjectKind],
        other_objects: Sequence[ObjectKind],
        num_objs: int = 6,
        room_size: int = 8,
        **kwargs: Any,
    ) -> None:
        self.tasks = [tuple(task) for task in tasks]
        self.target_objects = list(target_objects)
        self.other_objects = list(other_objects)
        self.num_objs = num_objs
        self.task: Task = self.tasks[0]
        super().__init__(num_rows=3, num_cols=3, room_size=room_size, **kwargs)

    def reset(self, **kwargs: Any) -> Any:
        result = super().reset(**kwargs)
        # BabyAI's rule counts every room of the maze; the tasks stay in one room.
        self.max_steps = self.num_navs_needed(self.instrs) * self.room_size**2
        return result

    def gen_mission(self) -> None:
        doors = [
            self.add_door(1, 1, door_idx=i, color=color, locked=False)[0]
            for i, color in enumerate(self._rand_subset(COLOR_NAMES, 4))
        ]
        self.task = self._rand_elem(self.tasks)
        needed = sum(2 if family == "putnext" else family != "open" for family in self.task)
        targets = self._rand_subset(self.target_objects, needed)
        others = [obj for obj in self.other_objects if obj not in targets]
        placed = targets + self._rand_subset(others, max(0, self.num_objs - needed))
        for obj_type, color in placed:
            self.add_object(1, 1, obj_type, color)
        self.place_agent(1, 1)
        self.check_objs_reachable()

        clauses = []
        for family in self.task:
            if family == "open":
                door = self._rand_elem(doors)
                clauses.append(OpenInstr(ObjDesc("door", door.color)))
            elif family == "putnext":
                (move_type, move_color), (fixed_type, fixed_color) = targets[:2]
                targets = targets[2:]
                clauses.append(
                    PutNextInstr(ObjDesc(move_type, move_color), ObjDesc(fixed_type, fixed_color))
                )
            else:
                (obj_type, color), targets = targets[0], targets[1:]
                instr = GoToInstr if family == "goto" else PickupInstr
                clauses.append(instr(ObjDesc(obj_type, color)))
        self.instrs = clauses[0] if len(clauses) == 1 else BeforeInstr(*clauses)
