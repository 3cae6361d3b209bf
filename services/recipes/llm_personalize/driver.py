"""LLM-Personalize's policy kinds: Housekeep played by a planner, its plans logged as LLM calls.

`housekeep-planner` follows LLM-Personalize's executor. Unlike the generic `planner` kind
(which re-plans after an infeasible skill and can only send skills), it executes every line of
a plan in order: an infeasible skill is a failed step (the environment charges it and the plan
goes on), a line that is no skill is sent as the environment's "unknown name" action (a failed
step too), an empty answer costs one such step, the planner is asked again when the plan runs
out, and "mission complete" ends the episode when it is executed.

`housekeep-demonstration` plays the generic `planner` kind's loop (re-plan after a failed skill,
stop when the planner says the mission is complete) with a scripted planner, by default the
demonstrator: the demonstrations that bootstrap the planner (`demonstrations.py`). With
`"query_every_step": true` the scripted planner is asked at every step and only its plan's first
skill is played: every state of the episode gets a logged plan, not only the states where a
plan ran out, which are the only ones a planner following whole plans is asked in. A learner
whose plans end early is asked in the states between, and the demonstrator's plans are
deterministic in the state, so the episode is the same.

Both record the Housekeep counters with every step (`records.RECORDED`), so that each query can
be scored (`datasets.py`), and log a scripted planner's plans as the LLM call the LLM planner
would have made (`PromptRecorder`): the prompt it would be sent and the plan in the planner's
answer format, which is what bootstrapping fine-tunes on.

Policy specs: `{"kind": "housekeep-planner" | "housekeep-demonstration", "name": <planner>,
"kwargs": {...}, "few_shot": bool (the recorded prompts' worked example), "query_every_step":
bool (demonstrations only)}`.
"""

from __future__ import annotations

import inspect
from typing import Any, Literal

from pydantic import Field

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.planner_driver import PlannerDriver, PlannerRef
from llmrl.agents.policy_spec import PolicySpec
from llmrl.common.episodes import LlmCall
from llmrl.common.registry import registry
from llmrl.planners.base import Plan, Planner, make_planner, observation_text
from llmrl.recipes.llm_personalize.prompts import build_messages, format_plan
from llmrl.simulator.envs.base import InvalidSkillError
from llmrl.simulator.envs.housekeep import HousekeepEnv
from llmrl.simulator.envs.housekeep.records import RECORDED
from llmrl.simulator.envs.housekeep.skills import MISSION_COMPLETE, ActionLayout, parse_skill

POLICY_KIND = "housekeep-planner"
DEMONSTRATION_KIND = "housekeep-demonstration"


def is_skill(line: str) -> bool:
    try:
        parse_skill(line)
    except InvalidSkillError:
        return False
    return True


class PromptRecorder(Planner):
    """A scripted planner whose every plan is logged as the LLM planner's call: the Housekeep
    prompt of the observation (`prompts.build_messages`) and the plan in its answer format."""

    def __init__(
        self, planner: Planner, name: str, few_shot: bool = True, play_first_only: bool = False
    ) -> None:
        self.planner = planner
        self.name = name
        self.few_shot = few_shot
        self.play_first_only = play_first_only  # log the whole plan, play its first skill
        self.observations = tuple(dict.fromkeys(("text", *planner.observations)))

    def reset(self) -> None:
        self.planner.reset()

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        plan = self.planner.plan(observation, t)
        text = observation_text(observation["text"])
        call = LlmCall(
            t=t,
            messages=build_messages(text, few_shot=self.few_shot),
            response=format_plan(plan.skills, plan.done),
            parsed=list(plan.skills),
            model=self.name,
            info={"done": plan.done, "scripted": True},
        )
        skills = list(plan.skills)
        if self.play_first_only and len(skills) > 1:
            return Plan(skills=skills[:1], llm_calls=[call])
        return Plan(skills=skills, llm_calls=[call], done=plan.done)


class HousekeepPlanDriver(EpisodeDriver):
    optional_observations = ("text", "skill_status", "success")
    record_observations = RECORDED

    def __init__(self, planner: Planner, unknown_action: int) -> None:
        self.planner = planner
        self.observations = tuple(planner.observations)
        self.unknown_action = unknown_action
        self._queue: list[str] = []

    def reset(self) -> None:
        self.planner.reset()
        self._queue = []

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        calls: list[LlmCall] = []
        if not self._queue:
            plan = self.planner.plan(observation, t)
            calls = list(plan.llm_calls)
            self._queue = [*plan.skills, MISSION_COMPLETE] if plan.done else list(plan.skills)
            if not self._queue:
                self._queue = [""]  # an answer without any line costs one failed step
        line = self._queue.pop(0)
        if is_skill(line):
            return Decision(skill=line, llm_calls=calls)
        return Decision(action=self.unknown_action, llm_calls=calls, info={"not_a_skill": line})


def _layout(env_kwargs: dict[str, Any]) -> ActionLayout:
    """The env's discrete action layout (its capacities, defaults from HousekeepEnv)."""
    defaults = inspect.signature(HousekeepEnv).parameters
    sizes = {
        name: int(env_kwargs.get(name, defaults[name].default))
        for name in ("max_rooms", "max_receptacles", "max_objects")
    }
    return ActionLayout(**sizes)


class HousekeepSpec(PolicySpec, PlannerRef):
    """A planner (`name`, `kwargs`) and how its scripted plans are logged (module docstring)."""

    name: str = Field(..., description="a registered planner (`llmrl planners`)")
    few_shot: bool = Field(True, description="the recorded prompts carry the worked example")
    query_every_step: bool = Field(
        False, description="ask a scripted planner every step and play its first skill"
    )


class HousekeepPlannerSpec(HousekeepSpec):
    kind: Literal["housekeep-planner"] = POLICY_KIND


class DemonstrationSpec(HousekeepSpec):
    kind: Literal["housekeep-demonstration"] = DEMONSTRATION_KIND


def _planner(
    spec: HousekeepSpec, resources: RolloutResources, job: EpisodeJob, **llm_defaults: Any
) -> Planner:
    """The spec's planner; a scripted one wrapped so that its plans are logged as LLM calls."""
    planner = make_planner(
        spec.as_dict(),
        connect_llm=lambda: resources.llm,
        llm_defaults={"run_id": job.run_id, **llm_defaults},
    )
    if getattr(planner, "uses_llm", False):
        return planner
    return PromptRecorder(planner, spec.name, spec.few_shot, play_first_only=spec.query_every_step)


@registry.register_driver(
    POLICY_KIND,
    "LLM-Personalize's executor: every plan line is a step",
    spec=HousekeepPlannerSpec,
)
def _housekeep_driver(
    spec: HousekeepPlannerSpec, resources: RolloutResources, job: EpisodeJob
) -> HousekeepPlanDriver:
    return HousekeepPlanDriver(
        _planner(spec, resources, job, charge_unparsable=True),
        unknown_action=_layout(job.env_kwargs).unknown_name_action,
    )


@registry.register_driver(
    DEMONSTRATION_KIND,
    "Housekeep demonstrations: a scripted planner's plans as LLM calls",
    spec=DemonstrationSpec,
)
def _demonstration_driver(
    spec: DemonstrationSpec, resources: RolloutResources, job: EpisodeJob
) -> PlannerDriver:
    return PlannerDriver(_planner(spec, resources, job), record_observations=RECORDED)
