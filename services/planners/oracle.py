"""The oracle planner: follows the environment's privileged `oracle_plan` observation.

MiniGrid When2Ask environments (and any env that offers it) provide `oracle_plan`, the
remaining skills of a solution computed from the privileged state, one per line. The oracle
needs no language model; it is the upper bound of what a planner can do and the planner of
the first job in the README (`llmrl run evaluate env=SimpleDoorKey planner=oracle`).
"""

from __future__ import annotations

from typing import Any, ClassVar

from llmrl.common.registry import registry
from llmrl.planners.base import Plan, Planner


@registry.register_planner("oracle", "Scripted: follows the env's privileged oracle_plan")
class OraclePlanner(Planner):
    observations: ClassVar[tuple[str, ...]] = ("oracle_plan",)
    uses_llm: ClassVar[bool] = False

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        if "oracle_plan" not in observation:
            raise KeyError("the oracle planner needs the env's 'oracle_plan' observation")
        skills = [line.strip() for line in str(observation["oracle_plan"]).split("\n")]
        skills = [skill for skill in skills if skill]
        return Plan(skills=skills, done=not skills)
