"""The demonstrator's strategy, shared by the `housekeep-demonstrator` planner and the env's
privileged `oracle_plan`: explore every room, then carry each misplaced object that has been
found to a correct receptacle that has been found.

Plans are lists of skill phrases (see `skills.py`). `demonstration_plan` returns one phase at
a time (the exploration, or, once everything is explored, the carrying), which is how a
planner that is re-asked when its plan runs out would work; `[]` means nothing is left to do.
"""

from __future__ import annotations

from .state import KnownHouse


def exploration_steps(
    known: KnownHouse, receptacles_by_room: dict[str, list[str]] | None = None
) -> list[str]:
    """Go to every room not explored yet and look at every receptacle not looked at yet.

    `receptacles_by_room` (privileged) lists the receptacles of rooms not explored yet, so the
    plan can include looking at them; without it, only receptacles already found are looked at.
    """
    inspected = set(known.inspected)
    explored = set(known.explored_rooms)
    steps: list[str] = []
    here = known.room
    for room in known.rooms:
        found = known.receptacles_in(room)
        receptacles = found if room in explored else (receptacles_by_room or {}).get(room, [])
        to_look = [rec for rec in receptacles if rec not in inspected]
        if room in explored and not to_look:
            continue
        if room != here or room not in explored:
            steps.append(f"go to room {room}")
            here = room
        steps.extend(f"look at {rec}" for rec in to_look)
    return steps


def carry_steps(known: KnownHouse, correct: dict[str, list[str]]) -> list[str]:
    """Move each found misplaced object to the first correct receptacle found so far."""
    steps: list[str] = []
    at = known.at

    def target_for(obj: str) -> str | None:
        return next((rec for rec in correct.get(obj, []) if rec in known.receptacles), None)

    if known.held is not None:
        target = target_for(known.held)
        if target is not None:
            if at != target:
                steps.append(f"go to {target}")
            steps.append(f"place {known.held} on {target}")
            at = target
        else:  # nowhere right is known: leave it on the receptacle at hand to free the hand
            return steps
    for obj, rec in known.objects.items():
        target = target_for(obj)
        if rec in correct.get(obj, []) or target is None:
            continue
        if at != rec:
            steps.append(f"go to {obj}")
        steps.append(f"pick up {obj}")
        steps.append(f"go to {target}")
        steps.append(f"place {obj} on {target}")
        at = target
    return steps


def demonstration_plan(known: KnownHouse, correct: dict[str, list[str]]) -> list[str]:
    """The next phase of the demonstrator's plan from what is known: explore, else carry."""
    return exploration_steps(known) or carry_steps(known, correct)
