"""The "planner" policy kind: play a skill environment by following a registered planner.

Policy spec: `{"kind": "planner", "name": <registered planner>, "kwargs": {...}}`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmrl.agents.episode import Decision, EpisodeDriver, EpisodeJob
from llmrl.agents.policy_spec import PolicySpec
from llmrl.agents.resources import RolloutResources
from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registered_name, registry
from llmrl.planners.base import Planner, make_planner

SKILL_RUNNING, SKILL_INFEASIBLE = 1, 3  # the simulator's SkillStatus values
REPLAN_ATTEMPTS = 3


class PlannerDriver(EpisodeDriver):
    """Plays a skill environment by following a planner's plans, re-planning when they run out.

    A skill is repeated while the environment reports it RUNNING; when it is DONE the next
    skill of the plan follows; when it is INFEASIBLE the rest of the plan is dropped and the
    planner asked again. A planner that gives no skills `REPLAN_ATTEMPTS` times in a row (or
    says it is done) ends the episode. `record_observations` are recorded with every step
    (see `EpisodeDriver`).
    """

    def __init__(self, planner: Planner, record_observations: tuple[str, ...] = ()) -> None:
        self.planner = planner
        self.observations = tuple(planner.observations)
        self.record_observations = tuple(record_observations)
        self._queue: list[str] = []
        self._current: str | None = None

    def reset(self) -> None:
        self.planner.reset()
        self._queue, self._current = [], None

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        status = int(observation.get("skill_status", 0))
        if self._current is not None and status == SKILL_RUNNING:
            return Decision(skill=self._current)
        if status == SKILL_INFEASIBLE:
            self._queue.clear()
        self._current = None
        calls: list[LlmCall] = []
        for _ in range(REPLAN_ATTEMPTS):
            if self._queue:
                break
            plan = self.planner.plan(observation, t)
            calls.extend(plan.llm_calls)
            if plan.done:
                return Decision(stop=True, llm_calls=calls, info={"stop": "planner done"})
            self._queue = [skill for skill in plan.skills if skill]
        if not self._queue:
            return Decision(stop=True, llm_calls=calls, info={"stop": "empty plan"})
        self._current = self._queue.pop(0)
        return Decision(skill=self._current, llm_calls=calls)


class PlannerRef(BaseModel):
    """A registered planner and its arguments, as policy specs carry them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., description="a registered planner (`llmrl planners`)")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="the planner's arguments")

    @model_validator(mode="before")
    @classmethod
    def _a_name_alone(cls, value: Any) -> Any:
        return {"name": value} if isinstance(value, str) else value  # "oracle" is a spec too

    @field_validator("name")
    @classmethod
    def _registered(cls, name: str) -> str:
        return registered_name("planner", name)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kwargs": dict(self.kwargs)}


class PlannerSpec(PolicySpec, PlannerRef):
    """`{"kind": "planner", "name": <registered planner>, "kwargs": {...}}`."""

    kind: Literal["planner"] = "planner"
    name: str = Field(..., description="a registered planner (`llmrl planners`)")


@registry.register_driver(
    "planner", "Follows a registered planner's plans of skills", spec=PlannerSpec
)
def planner_driver(
    spec: PlannerSpec, resources: RolloutResources, job: EpisodeJob
) -> PlannerDriver:
    planner = make_planner(
        spec.as_dict(), connect_llm=lambda: resources.llm, llm_defaults={"run_id": job.run_id}
    )
    return PlannerDriver(planner)
