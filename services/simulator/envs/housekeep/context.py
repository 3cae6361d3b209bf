"""The explored part of the house in words: the text observation and the planner's context.

Example (rooms known from the start, two explored):

    Rooms of the house: bathroom_0, bedroom_0, kitchen_0.
    Explored rooms: bathroom_0, kitchen_0. Unexplored rooms: bedroom_0.
    Receptacles found, with the objects on them:
    - in bathroom_0: bathtub_1 (empty); sink_1 (toothbrush_1)
    - in kitchen_0: counter_1 (mug_1, book_1); fridge_1 (empty)
    You are in kitchen_0, at counter_1. You are holding nothing.
    Last action: pick up lamp_1 (failed: you have not found lamp_1).
    Steps left: 42.
"""

from __future__ import annotations

from .state import KnownHouse


def _names(items: list[str]) -> str:
    return ", ".join(items) if items else "none"


def render_context(
    known: KnownHouse,
    steps_left: int | None = None,
    last_action: str | None = None,
    last_feedback: str | None = None,
) -> str:
    explored = [room for room in known.rooms if room in known.explored_rooms]
    unexplored = [room for room in known.rooms if room not in known.explored_rooms]
    inspected = set(known.inspected)
    lines = [
        f"Rooms of the house: {_names(known.rooms)}.",
        f"Explored rooms: {_names(explored)}. Unexplored rooms: {_names(unexplored)}.",
    ]
    if known.receptacles:
        lines.append("Receptacles found, with the objects on them:")
        for room in known.rooms:
            receptacles = known.receptacles_in(room)
            if not receptacles:
                continue
            parts = []
            for rec in receptacles:
                if rec not in inspected:
                    parts.append(f"{rec} (not looked at yet)")
                else:
                    objects = known.objects_on(rec)
                    parts.append(f"{rec} ({', '.join(objects) if objects else 'empty'})")
            lines.append(f"- in {room}: " + "; ".join(parts))
    else:
        lines.append("No receptacles found yet.")
    where = "at the start position"
    if known.room is not None:
        where = f"in {known.room}" + (f", at {known.at}" if known.at else "")
    lines.append(f"You are {where}. You are holding {known.held or 'nothing'}.")
    if last_action:
        outcome = f"failed: {last_feedback}" if last_feedback else "done"
        lines.append(f"Last action: {last_action} ({outcome}).")
    if steps_left is not None:
        lines.append(f"Steps left: {steps_left}.")
    return "\n".join(lines)
