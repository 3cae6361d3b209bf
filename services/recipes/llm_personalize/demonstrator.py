"""The Housekeep demonstrator: a scripted planner that knows where objects belong.

It reads the explored house from the `known_house` observation and the correct placements
from the privileged `correct_receptacles`, then plans like a tidy person who knows the
household's preferences: explore every room first, then carry each misplaced object it has
found to a correct receptacle it has found. Each call returns one phase (exploration or
carrying), at most `max_plan_length` skills; with nothing left to do it declares the
mission complete. Its plans are the demonstrations that bootstrap the LLM planner.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from llmrl.common.registry import registry
from llmrl.planners.base import Plan, Planner, observation_text
from llmrl.simulator.envs.housekeep.solver import demonstration_plan
from llmrl.simulator.envs.housekeep.state import KnownHouse


@registry.register_planner("housekeep-demonstrator")
class HousekeepDemonstrator(Planner):
    """Explores every room, then puts each found misplaced object on a correct receptacle."""

    observations: ClassVar[tuple[str, ...]] = ("text", "known_house", "correct_receptacles")

    def __init__(self, max_plan_length: int | None = None) -> None:
        if max_plan_length is not None and max_plan_length < 1:
            raise ValueError(
                f"max_plan_length must be a positive integer or None, got {max_plan_length}"
            )
        self.max_plan_length = max_plan_length

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        missing = [name for name in self.observations[1:] if name not in observation]
        if missing:
            raise KeyError(
                f"housekeep-demonstrator needs the observations {', '.join(missing)} "
                "(request them from the Housekeep environment)"
            )
        known = KnownHouse.from_json(observation_text(observation["known_house"]))
        correct = json.loads(observation_text(observation["correct_receptacles"]))
        skills = demonstration_plan(known, correct)
        if not skills:
            return Plan(skills=[], done=True)
        return Plan(skills=skills[: self.max_plan_length] if self.max_plan_length else skills)
