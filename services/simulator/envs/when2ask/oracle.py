"""The privileged oracle: a skill plan that solves the task from the current state.

It reads the true grid (where the key really is, what the box holds) but plans only skills
that the agent's controllers can carry out: whenever an object the plan needs is not yet on
the agent's map, the plan explores first. The plan is recomputed from scratch at every step,
so following it skill by skill (re-reading it after each skill) solves the task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minigrid.core.world_object import Box, Key

from .knowledge import BOX, DOOR, GOAL, KEY, color_index, identity_of, object_name
from .skills import Skill, goal_reached

if TYPE_CHECKING:
    from .env import When2AskEnv


def oracle_plan(env: When2AskEnv) -> list[str]:
    """The remaining skills of a solution, first to last; [] once the task is over."""
    door = env.door
    knowledge = env.knowledge
    door_id = identity_of(DOOR, color_index(door.color))
    key_id = identity_of(KEY, color_index(door.color))
    goal_id = identity_of(GOAL, 0)
    if tuple(env.agent_pos) == env.goal_pos:
        return []

    plan: list[str] = []

    state = env.agent_state()

    def reach(identity: tuple[int, int]) -> None:
        if knowledge.find(identity) is None:
            plan.append("explore")
        elif goal_reached(Skill("go to", identity), state):
            return  # already there
        plan.append(f"go to {object_name(identity)}")

    if not door.is_open:
        carried = env.carrying
        if not (isinstance(carried, Key) and carried.color == door.color):
            if isinstance(carried, Box):
                return []  # the key can only be in the carried box: skills cannot drop it
            box = _box_holding_key(env)
            if box is not None:
                box_id = identity_of(BOX, color_index(box.color))
                reach(box_id)
                plan.append(f"toggle {object_name(box_id)}")
            else:
                reach(key_id)
            plan.append(f"pick up {object_name(key_id)}")
        reach(door_id)
        plan.append(f"toggle {object_name(door_id)}")
        # Opening the door shows what lies right behind it; anywhere else needs a look.
        if knowledge.find(goal_id) is None and env.goal_pos != env.behind_door:
            plan.append("explore")
        plan.append(f"go to {object_name(goal_id)}")
        return plan
    reach(goal_id)
    return plan


def _box_holding_key(env: When2AskEnv) -> Box | None:
    for obj in env.grid.grid:
        key = obj.contains if isinstance(obj, Box) else None
        if isinstance(key, Key) and key.color == env.door.color:
            return obj
    return None
