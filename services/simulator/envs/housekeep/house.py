"""The static description of one Housekeep house: what is where at the start, and what is right.

A `House` is built either from a real Housekeep episode (`data.py`) or procedurally
(`procedural.py`). It never changes during an episode; the moving parts (where objects are
now, what the agent knows) live in `HouseState` (`state.py`).

Names are what planners see and write: rooms `kitchen_0`, receptacles `counter_2`, objects
`mustard_bottle_1`. They are lowercase `[a-z0-9_]` and unique across rooms, receptacles and
objects, so "go to <name>" is never ambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

NAME_PATTERN = re.compile(r"^[a-z0-9_]+$")

# The benchmark's rule: a receptacle is correct for an object when at least 6 of 10 annotators
# ranked it positively. Soft scores are the positive fraction itself.
CORRECT_FRACTION = 0.6


@dataclass(frozen=True)
class Receptacle:
    name: str  # unique in the house, e.g. "counter_2"
    category: str  # e.g. "counter"
    room: str  # the room's name, e.g. "kitchen_0"
    position: tuple[float, float]  # navigable (x, z) in metres, where the agent stands


@dataclass(frozen=True)
class HouseObject:
    name: str  # unique in the house, e.g. "mustard_bottle_1"
    category: str  # e.g. "mustard_bottle"


@dataclass
class House:
    """Rooms, receptacles, objects, the start placement and the correctness tables.

    `allowed[r, o]` is True when receptacle r is a correct place for object o; `soft[r, o]` is
    the fraction of annotators who rated that placement positively (0 where unannotated).
    """

    rooms: list[str]
    receptacles: list[Receptacle]
    objects: list[HouseObject]
    start: list[int]  # start[o] = index of the receptacle object o starts on
    allowed: np.ndarray  # bool [receptacles, objects]
    soft: np.ndarray  # float [receptacles, objects], in [0, 1]
    start_position: tuple[float, float]  # where the agent starts (outside every room)
    source: str = ""  # e.g. "val/Ihlen_1_int#17" or "procedural#seed"
    room_positions: dict[str, tuple[float, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.allowed = np.asarray(self.allowed, dtype=bool)
        self.soft = np.asarray(self.soft, dtype=np.float64)
        shape = (len(self.receptacles), len(self.objects))
        for label, table in (("allowed", self.allowed), ("soft", self.soft)):
            if table.shape != shape:
                raise ValueError(f"House.{label} has shape {table.shape}, expected {shape}")
        if len(self.start) != len(self.objects):
            raise ValueError("House.start needs one receptacle index per object")
        names = [*self.rooms, *(r.name for r in self.receptacles), *(o.name for o in self.objects)]
        bad = [n for n in names if not NAME_PATTERN.match(n)]
        if bad:
            raise ValueError(f"names must be lowercase [a-z0-9_]: {bad[:5]}")
        if len(set(names)) != len(names):
            raise ValueError("room, receptacle and object names must be unique in a house")
        unknown = {r.room for r in self.receptacles} - set(self.rooms)
        if unknown:
            raise ValueError(f"receptacles in unknown rooms: {sorted(unknown)}")
        if not self.room_positions:
            self.room_positions = {room: self._room_centre(room) for room in self.rooms}
        self.receptacle_index = {r.name: i for i, r in enumerate(self.receptacles)}
        self.object_index = {o.name: i for i, o in enumerate(self.objects)}
        self.room_receptacles: dict[str, list[int]] = {room: [] for room in self.rooms}
        for i, receptacle in enumerate(self.receptacles):
            self.room_receptacles[receptacle.room].append(i)

    def _room_centre(self, room: str) -> tuple[float, float]:
        points = [r.position for r in self.receptacles if r.room == room]
        if not points:
            return self.start_position
        xs, zs = zip(*points, strict=True)
        return (float(np.mean(xs)), float(np.mean(zs)))

    def correct_at_start(self) -> int:
        return int(sum(self.allowed[r, o] for o, r in enumerate(self.start)))

    def misplaced_at_start(self) -> int:
        return len(self.objects) - self.correct_at_start()

    def misplaced_objects(self) -> list[int]:
        """Indices of the objects that start on a receptacle not allowed for them."""
        return [o for o, r in enumerate(self.start) if not self.allowed[r, o]]

    def allowed_receptacles(self, object_index: int) -> list[str]:
        return [self.receptacles[r].name for r in np.flatnonzero(self.allowed[:, object_index])]


def distance(a: tuple[float, float], b: tuple[float, float]) -> float:
    return float(np.hypot(a[0] - b[0], a[1] - b[1]))


def sanitize_name(text: str) -> str:
    """A name in the house's alphabet: lowercase, runs of other characters become `_`."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "thing"


def unique_names(bases: list[str], taken: set[str], start: int = 1) -> list[str]:
    """`<base>_<n>` names, numbered per base in order, skipping anything already taken."""
    counters: dict[str, int] = {}
    names = []
    for base in bases:
        n = counters.get(base, start)
        while f"{base}_{n}" in taken:
            n += 1
        counters[base] = n + 1
        names.append(f"{base}_{n}")
        taken.add(names[-1])
    return names
