"""What the agent knows about the house: the explored part, as planners and the context see it.

`KnownHouse` is the machine-readable twin of the context text; the environment exposes it
as the observation `known_house` (JSON) so that scripted planners need not parse prose.
Knowledge never goes stale: only the agent moves objects, so what it saw is still true.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KnownHouse:
    rooms: list[str]  # every room of the house (the floor plan is known from the start)
    explored_rooms: list[str] = field(default_factory=list)
    receptacles: dict[str, str] = field(default_factory=dict)  # found receptacle -> its room
    inspected: list[str] = field(default_factory=list)  # receptacles whose objects are known
    objects: dict[str, str] = field(default_factory=dict)  # found object -> receptacle it is on
    held: str | None = None  # the object in the agent's hand
    room: str | None = None  # the room the agent is in (None: at the start position)
    at: str | None = None  # the receptacle the agent stands at

    def to_json(self) -> str:
        # vars(), not dataclasses.asdict: asdict deep-copies, and this runs on every step
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> KnownHouse:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnownHouse:
        return cls(**data)

    def objects_on(self, receptacle: str) -> list[str]:
        return [obj for obj, rec in self.objects.items() if rec == receptacle]

    def receptacles_in(self, room: str) -> list[str]:
        return [rec for rec, where in self.receptacles.items() if where == room]
