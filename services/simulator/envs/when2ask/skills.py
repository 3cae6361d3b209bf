"""When2Ask's skills: their text form and their scripted controllers.

Skills (objects are named "the <colour> <type>" or "the goal"):

* `explore`: walk to the nearest pose from which an unseen cell would come into view; done
  as soon as a new object has been seen (or infeasible when nothing is left to see).
* `go to <object>`: walk until facing the object (for the goal: onto it), along a shortest
  path over cells seen to be free, or, when there is none, one through unseen cells.
* `pick up <object>` (keys, balls): the object must be next to the agent; the agent turns to
  it and picks it up. Carrying something else, it first drops that in a free neighbouring
  cell (never one next to a door, so it cannot block the doorway), as the paper's skill does.
* `toggle <object>` (doors, boxes): the object must be next to the agent; the agent turns to
  it and toggles it. A locked door is infeasible unless the agent carries its key.

Controllers see only the agent's knowledge (`AgentKnowledge`) and what it carries; they pick
one low-level action per call, so a mediator can interrupt them between any two steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from minigrid.core.constants import COLOR_NAMES

from ..base import InvalidSkillError, SkillStatus
from .knowledge import (
    BALL,
    BOX,
    DIR_VECTORS,
    DOOR,
    DOOR_LOCKED,
    EMPTY,
    GOAL,
    KEY,
    AgentKnowledge,
    Identity,
    color_index,
    identity_of,
    object_name,
)
from .navigation import LEFT, RIGHT, FrontierTest, Pose, PoseSearch

PICKUP, DROP, TOGGLE = 3, 4, 5

TYPE_NAMES = {"key": KEY, "door": DOOR, "box": BOX, "ball": BALL}
PICKABLE = frozenset({KEY, BALL})  # boxes are not: carrying a box would hide its key for good
TOGGLEABLE = frozenset({DOOR, BOX})
VERBS = ("explore", "go to", "pick up", "toggle")

SKILL_FORMS = (
    "explore | go to the goal | go to the <colour> <key|door|box|ball> | "
    "pick up the <colour> <key|ball> | toggle the <colour> <door|box>; "
    f"colours: {', '.join(COLOR_NAMES)}"
)

_SKILL_RE = re.compile(r"^(explore|go to|pick up|toggle)(?: (?:(?:the|a|an) )?(.+))?$")


@dataclass(frozen=True)
class Skill:
    verb: str  # one of VERBS
    target: Identity | None = None  # None for explore

    @property
    def text(self) -> str:
        """The canonical phrase, e.g. "pick up the red key"."""
        return self.verb if self.target is None else f"{self.verb} {object_name(self.target)}"


def parse_skill(text: str) -> Skill:
    """Parse a skill phrase (case and extra spaces ignored; "the" optional).

    Raises `InvalidSkillError` naming the valid forms for anything else.
    """
    if not isinstance(text, str):
        raise InvalidSkillError(f"skill must be a string, got {type(text).__name__}")
    words = " ".join(text.lower().replace(".", " ").split())
    match = _SKILL_RE.match(words)
    if match is None:
        raise InvalidSkillError(f"unknown skill {text!r}; valid skills: {SKILL_FORMS}")
    verb, obj = match.groups()
    if verb == "explore":
        if obj:
            raise InvalidSkillError(f"'explore' takes no object, got {text!r}")
        return Skill("explore")
    if obj is None:
        raise InvalidSkillError(f"skill {text!r} needs an object; valid skills: {SKILL_FORMS}")
    if obj == "goal":
        if verb != "go to":
            raise InvalidSkillError(f"the goal can only be gone to, got {text!r}")
        return Skill(verb, (GOAL, 0))
    parts = obj.split()
    if len(parts) != 2 or parts[0] not in COLOR_NAMES or parts[1] not in TYPE_NAMES:
        raise InvalidSkillError(
            f"unknown object {obj!r} in skill {text!r}; objects are 'the <colour> "
            f"<key|door|box|ball>' or 'the goal'; valid skills: {SKILL_FORMS}"
        )
    obj_type = TYPE_NAMES[parts[1]]
    if verb == "pick up" and obj_type not in PICKABLE:
        raise InvalidSkillError(f"only keys and balls can be picked up, got {text!r}")
    if verb == "toggle" and obj_type not in TOGGLEABLE:
        raise InvalidSkillError(f"only doors and boxes can be toggled, got {text!r}")
    return Skill(verb, (obj_type, color_index(parts[0])))


# Objects the knowledge text names: "a locked red door", "an open blue box", "the goal".
_OBJECT_RE = re.compile(
    r"\b(?:a|an) (?:(?:open|closed|locked) )?(" + "|".join(COLOR_NAMES) + r") "
    r"(" + "|".join(TYPE_NAMES) + r")\b"
)


def seen_objects(text: str) -> list[Identity]:
    """The objects a knowledge text (the env's `text` entry) names, in order, the goal last if
    seen: what a planner prompted with that text knows of."""
    found = [
        identity_of(TYPE_NAMES[kind], color_index(colour))
        for colour, kind in _OBJECT_RE.findall(text)
    ]
    if "the goal" in text:
        found.append(identity_of(GOAL, 0))
    return list(dict.fromkeys(found))


_CARRY_RE = re.compile(
    r"You carry (?:a|an) (" + "|".join(COLOR_NAMES) + r") (" + "|".join(TYPE_NAMES) + r")\."
)
_DOOR_RE = re.compile(r"\b(open|closed|locked) (" + "|".join(COLOR_NAMES) + r") door\b")
DOOR_STATE_WORDS = ("open", "closed", "locked")  # index = minigrid's door state


def carried_object(text: str) -> Identity | None:
    """What a knowledge text says the agent carries, or None when it carries nothing."""
    match = _CARRY_RE.search(text)
    if match is None:
        return None
    return identity_of(TYPE_NAMES[match.group(2)], color_index(match.group(1)))


def door_states(text: str) -> dict[Identity, int]:
    """The doors a knowledge text names, each with its state as last seen (open 0, closed 1,
    locked 2: minigrid's door states)."""
    return {
        identity_of(DOOR, color_index(colour)): DOOR_STATE_WORDS.index(state)
        for state, colour in _DOOR_RE.findall(text)
    }


def all_skill_phrases() -> list[str]:
    """Every well-formed skill phrase (in canonical form)."""
    phrases = ["explore", "go to the goal"]
    for verb, types in (("go to", TYPE_NAMES), ("pick up", PICKABLE), ("toggle", TOGGLEABLE)):
        for color in COLOR_NAMES:
            for type_name, obj_type in TYPE_NAMES.items():
                if obj_type in types:
                    phrases.append(f"{verb} the {color} {type_name}")
    return phrases


@dataclass(frozen=True)
class Decision:
    action: int | None  # None: no step (see status)
    status: SkillStatus  # RUNNING when an action is taken
    completes: bool = False  # this action carries the skill out (toggle)


RUNNING = SkillStatus.RUNNING
DONE = Decision(None, SkillStatus.DONE)
INFEASIBLE = Decision(None, SkillStatus.INFEASIBLE)


class AgentState:
    """What the controllers may use at one step: the agent's map, pose and load."""

    def __init__(
        self, knowledge: AgentKnowledge, pos: tuple[int, int], direction: int, carrying: Identity
    ) -> None:
        self.knowledge = knowledge
        self.pos = (int(pos[0]), int(pos[1]))
        self.direction = int(direction)
        self.carrying = carrying  # None when empty-handed

    @cached_property
    def search(self) -> PoseSearch:
        return PoseSearch(self.knowledge, self.pose)

    @cached_property
    def search_through_unseen(self) -> PoseSearch:
        return PoseSearch(self.knowledge, self.pose, through_unseen=True)

    @cached_property
    def frontier(self) -> FrontierTest:
        return FrontierTest(self.knowledge)

    @property
    def pose(self) -> Pose:
        return (*self.pos, self.direction)

    @property
    def front(self) -> tuple[int, int]:
        dx, dy = DIR_VECTORS[self.direction]
        return (self.pos[0] + int(dx), self.pos[1] + int(dy))

    def is_adjacent(self, cell: tuple[int, int]) -> bool:
        return abs(cell[0] - self.pos[0]) + abs(cell[1] - self.pos[1]) == 1

    def turn_towards(self, cell: tuple[int, int]) -> int:
        """The turn that brings an adjacent `cell` in front soonest."""
        delta = (cell[0] - self.pos[0], cell[1] - self.pos[1])
        wanted = next(d for d, v in enumerate(DIR_VECTORS) if tuple(v) == delta)
        return LEFT if (wanted - self.direction) % 4 == 3 else RIGHT


def decide(skill: Skill, state: AgentState) -> Decision:
    """The controller of `skill`: the next low-level action, or why there is none."""
    if skill.verb == "explore":
        return _explore(state)
    target = skill.target
    assert target is not None
    if skill.verb == "pick up" and state.carrying == target:
        return DONE
    where = state.knowledge.find(target)
    if where is None:
        return INFEASIBLE
    if skill.verb == "go to":
        return _go_to(state, target, where)
    if not state.is_adjacent(where):
        return INFEASIBLE
    if skill.verb == "pick up":
        return _pick_up(state, where)
    return _toggle(state, target, where)


def goal_reached(skill: Skill, state: AgentState) -> bool:
    """Whether a go to / pick up skill's goal holds (explore and toggle: see the env)."""
    if skill.verb == "pick up":
        return state.carrying == skill.target
    if skill.verb == "go to":
        where = state.knowledge.find(skill.target)
        if where is None:
            return False
        return state.pos == where if skill.target[0] == GOAL else state.front == where
    return False


def _explore(state: AgentState) -> Decision:
    if not state.frontier.anything_to_see:
        return INFEASIBLE
    start = state.pose
    found = state.search.nearest(lambda pose: pose != start and state.frontier(pose))
    if found is None or found[1] is None:
        return INFEASIBLE
    return Decision(found[1], RUNNING)


def _go_to(state: AgentState, target: Identity, where: tuple[int, int]) -> Decision:
    """Shortest path over cells known to be free; failing that, through unseen cells too."""
    if target[0] == GOAL:
        if state.pos == where:
            return DONE
        found = state.search.action_to_stand_on(where)
        if found is None:
            found = state.search_through_unseen.action_to_stand_on(where)
    else:
        if state.front == where:
            return DONE
        found = state.search.action_to_face(where)
        if found is None:
            found = state.search_through_unseen.action_to_face(where)
    if found is None or found[1] is None:
        return INFEASIBLE
    return Decision(found[1], RUNNING)


def _pick_up(state: AgentState, where: tuple[int, int]) -> Decision:
    if state.carrying is None:
        if state.front == where:
            return Decision(PICKUP, RUNNING)
        return Decision(state.turn_towards(where), RUNNING)
    spot = _drop_spot(state, avoid=where)
    if spot is None:
        return INFEASIBLE
    if state.front == spot:
        return Decision(DROP, RUNNING)
    return Decision(state.turn_towards(spot), RUNNING)


def _drop_spot(state: AgentState, avoid: tuple[int, int]) -> tuple[int, int] | None:
    """A free neighbouring cell for what the agent carries, never next to a door."""
    cells = state.knowledge.cells
    width, height = state.knowledge.width, state.knowledge.height

    def free(x: int, y: int) -> bool:
        return 0 <= x < width and 0 <= y < height and cells[x, y, 0] == EMPTY

    def near_door(x: int, y: int) -> bool:
        return any(
            0 <= x + dx < width and 0 <= y + dy < height and cells[x + dx, y + dy, 0] == DOOR
            for dx, dy in DIR_VECTORS
        )

    # Nearest first in turns: ahead, right, left, behind.
    for turn in (0, 1, 3, 2):
        dx, dy = DIR_VECTORS[(state.direction + turn) % 4]
        cell = (state.pos[0] + int(dx), state.pos[1] + int(dy))
        if cell != avoid and free(*cell) and not near_door(*cell):
            return cell
    return None


def _toggle(state: AgentState, target: Identity, where: tuple[int, int]) -> Decision:
    if target[0] == DOOR:
        locked = state.knowledge.cells[where[0], where[1], 2] == DOOR_LOCKED
        if locked and state.carrying != (KEY, target[1]):
            return INFEASIBLE
    if state.front == where:
        return Decision(TOGGLE, RUNNING, completes=True)
    return Decision(state.turn_towards(where), RUNNING)
