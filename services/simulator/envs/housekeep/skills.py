"""The Housekeep skill language: exact phrasings, parsing, and the discrete action indexing.

Skill phrases (names as in the context text; spaces inside a name are read as `_`):

    go to room <room>               walk to the middle of a room and look around it
    go to <receptacle>              walk to a receptacle you have found
    go to <object>                  walk to the receptacle a found object lies on
    look at <receptacle>            look at a receptacle of the room you are in
    pick up <object>                pick up an object on the receptacle you are at (one hand)
    place <object> on <receptacle>  put the held object on the receptacle you are at
    mission complete                declare the house tidy (ends the episode)

Every skill is one environment step. A well-formed skill that cannot be carried out (an
unknown name, the object is elsewhere, the hand is full...) is a failed step: status
INFEASIBLE, with the reason in `info["message"]` and in the next context text.

Low-level actions (`Discrete`) index the same grounded skills, for RL agents: the index
layout depends only on the capacity limits (`ActionLayout`), never on the house, so one
action space serves every house; indices past the house's entities are infeasible. A text
that is no skill at all is refused by `check_skill` (InvalidSkillError); a planner that
wants such a line of its plan to cost a failed step sends the low-level action
`ActionLayout.unknown_name_action` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base import InvalidSkillError
from .house import House
from .state import KnownHouse

SKILL_TEMPLATES = (
    "go to room <room>",
    "go to <receptacle>",
    "go to <object>",
    "look at <receptacle>",
    "pick up <object>",
    "place <object> on <receptacle>",
    "mission complete",
)
MISSION_COMPLETE = "mission complete"

_NAME = r"([a-z0-9_][a-z0-9_ ]*?)"
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("go_to_room", re.compile(rf"^go to room {_NAME}$")),
    ("go_to", re.compile(rf"^go to {_NAME}$")),
    ("look_at", re.compile(rf"^look at {_NAME}$")),
    ("pick_up", re.compile(rf"^pick up {_NAME}$")),
    ("place", re.compile(rf"^place {_NAME} on {_NAME}$")),
    ("mission_complete", re.compile(r"^mission complete$")),
)


@dataclass(frozen=True)
class Skill:
    verb: str  # go_to_room | go_to | look_at | pick_up | place | mission_complete
    args: tuple[str, ...] = ()

    def phrase(self) -> str:
        if self.verb == "go_to_room":
            return f"go to room {self.args[0]}"
        if self.verb == "go_to":
            return f"go to {self.args[0]}"
        if self.verb == "look_at":
            return f"look at {self.args[0]}"
        if self.verb == "pick_up":
            return f"pick up {self.args[0]}"
        if self.verb == "place":
            return f"place {self.args[0]} on {self.args[1]}"
        return MISSION_COMPLETE


def normalize(text: str) -> str:
    """Lowercase, single spaces, no surrounding punctuation or articles before names."""
    text = " ".join(str(text).lower().split()).strip(" .;,!\"'`")
    return re.sub(r"\b(the|a|an) ", "", text)


def parse_skill(text: str) -> Skill:
    """The skill a phrase names; `InvalidSkillError` (listing the phrasings) if none."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSkillError(_help("an empty skill"))
    phrase = normalize(text)
    for verb, pattern in _PATTERNS:
        match = pattern.match(phrase)
        if match:
            return Skill(verb, tuple(arg.strip().replace(" ", "_") for arg in match.groups()))
    raise InvalidSkillError(_help(repr(text)))


def skills_over(known: KnownHouse) -> list[str]:
    """Every well-formed skill over the names the agent knows (what the context shows).

    The planner's vocabulary for guided decoding: it rules out invented names, not mistakes
    (a skill here may still be infeasible now, e.g. picking up an object in another room).
    """
    objects = [obj for obj in known.objects if obj != known.held]
    carried = [*objects, known.held] if known.held else objects
    skills = [f"go to room {room}" for room in known.rooms]
    skills += [f"go to {rec}" for rec in known.receptacles]
    skills += [f"go to {obj}" for obj in objects]
    skills += [f"look at {rec}" for rec in known.receptacles]
    skills += [f"pick up {obj}" for obj in objects]
    skills += [f"place {obj} on {rec}" for obj in carried for rec in known.receptacles]
    skills.append(MISSION_COMPLETE)
    return skills


def _help(what: str) -> str:
    return f"{what} is not a Housekeep skill; skills are: " + "; ".join(SKILL_TEMPLATES)


@dataclass(frozen=True)
class ActionLayout:
    """Discrete action indices of the grounded skills, for houses within these capacities."""

    max_rooms: int = 12
    max_receptacles: int = 100
    max_objects: int = 12

    @property
    def size(self) -> int:
        rooms, recs, objs = self.max_rooms, self.max_receptacles, self.max_objects
        # ... + "a skill naming nothing in this house" (a failed step) + "mission complete"
        return rooms + recs + objs + recs + objs + objs * recs + 2

    @property
    def unknown_name_action(self) -> int:
        return self.size - 2

    @property
    def mission_complete_action(self) -> int:
        return self.size - 1

    def check_fits(self, house: House) -> None:
        for label, have, cap in (
            ("rooms", len(house.rooms), self.max_rooms),
            ("receptacles", len(house.receptacles), self.max_receptacles),
            ("objects", len(house.objects), self.max_objects),
        ):
            if have > cap:
                raise ValueError(
                    f"house {house.source!r} has {have} {label}, more than max_{label}={cap}; "
                    f"raise max_{label}"
                )

    def skill(self, action: int, house: House) -> str | None:
        """The phrase of action `action` in `house`, or None if it names nothing there."""
        rooms, recs, objs = self.max_rooms, self.max_receptacles, self.max_objects
        a = int(action)
        if not 0 <= a < self.size or a == self.unknown_name_action:
            return None
        if a == self.mission_complete_action:
            return MISSION_COMPLETE

        def room(i: int) -> str | None:
            return house.rooms[i] if i < len(house.rooms) else None

        def rec(i: int) -> str | None:
            return house.receptacles[i].name if i < len(house.receptacles) else None

        def obj(i: int) -> str | None:
            return house.objects[i].name if i < len(house.objects) else None

        spans = (("go_to_room", rooms), ("go_to_rec", recs), ("go_to_obj", objs))
        spans += (("look_at", recs), ("pick_up", objs), ("place", objs * recs))
        verb = "place"
        for verb, span in spans:  # noqa: B007 - the loop leaves `verb` at a's span
            if a < span:
                break
            a -= span
        if verb == "go_to_room":
            name = room(a)
            return None if name is None else f"go to room {name}"
        if verb in ("go_to_rec", "go_to_obj"):
            name = rec(a) if verb == "go_to_rec" else obj(a)
            return None if name is None else f"go to {name}"
        if verb == "look_at":
            name = rec(a)
            return None if name is None else f"look at {name}"
        if verb == "pick_up":
            name = obj(a)
            return None if name is None else f"pick up {name}"
        held, target = obj(a // recs), rec(a % recs)
        return None if held is None or target is None else f"place {held} on {target}"

    def action(self, skill: Skill, house: House) -> int | None:
        """The action index of a parsed skill in `house`, or None if a name is unknown."""
        rooms, recs, objs = self.max_rooms, self.max_receptacles, self.max_objects
        r_idx, o_idx = house.receptacle_index, house.object_index
        if skill.verb == "mission_complete":
            return self.mission_complete_action
        if skill.verb == "go_to_room" or (skill.verb == "go_to" and skill.args[0] in house.rooms):
            name = skill.args[0]
            return house.rooms.index(name) if name in house.rooms else None
        if skill.verb == "go_to":
            name = skill.args[0]
            if name in r_idx:
                return rooms + r_idx[name]
            return rooms + recs + o_idx[name] if name in o_idx else None
        base = rooms + recs + objs
        if skill.verb == "look_at":
            return base + r_idx[skill.args[0]] if skill.args[0] in r_idx else None
        base += recs
        if skill.verb == "pick_up":
            return base + o_idx[skill.args[0]] if skill.args[0] in o_idx else None
        base += objs
        held, target = skill.args
        if held in o_idx and target in r_idx:
            return base + o_idx[held] * recs + r_idx[target]
        return None
