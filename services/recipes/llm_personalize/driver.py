"""The `housekeep-planner` policy kind: Housekeep played by a planner, one plan line per step.

Unlike the generic `planner` kind (which re-plans after an infeasible skill and can only
send skills), this executor follows LLM-Personalize: it executes every line of a plan in
order, an infeasible skill is a failed step (the environment charges it and the plan goes
on), a line that is no skill is sent as the environment's "unknown name" action (a failed
step too), an empty answer costs one such step, the planner is asked again when the plan
runs out, and "mission complete" ends the episode when it is executed.

Steps record the Housekeep counters (`records.STEP_COUNTERS`) so that the annotator can score
each query. Scripted planners (the demonstrator) get their plans recorded as the LLM call
the planner would have made (`record_prompts`): the prompt it would be sent and the plan in
the planner's answer format, which is what bootstrapping fine-tunes on.

Policy spec: `{"kind": "housekeep-planner", "name": <planner>, "kwargs": {...},
"few_shot": bool (prompts recorded for scripted planners)}`.
"""

from __future__ import annotations

import inspect
from typing import Any

from llmrl.common.episodes import LlmCall
from llmrl.orchestrator.rollout import (
    Decision,
    EpisodeDriver,
    EpisodeJob,
    build_planner,
    register_driver,
)
from llmrl.planners import housekeep_demonstrator, housekeep_llm  # noqa: F401 - registered
from llmrl.planners.base import Planner
from llmrl.simulator.envs.base import InvalidSkillError
from llmrl.simulator.envs.housekeep import HousekeepEnv
from llmrl.simulator.envs.housekeep.prompts import build_messages, format_plan
from llmrl.simulator.envs.housekeep.records import STEP_COUNTERS
from llmrl.simulator.envs.housekeep.skills import MISSION_COMPLETE, ActionLayout, parse_skill

POLICY_KIND = "housekeep-planner"
RECORDED = (*STEP_COUNTERS, "success_rate", "object_success", "soft_score", "distance")


def is_skill(line: str) -> bool:
    try:
        parse_skill(line)
    except InvalidSkillError:
        return False
    return True


class HousekeepPlanDriver(EpisodeDriver):
    optional_observations = ("text", "skill_status", "success")
    record_observations = RECORDED

    def __init__(
        self,
        planner: Planner,
        unknown_action: int,
        record_prompts: bool,
        few_shot: bool,
        planner_name: str = "",
    ) -> None:
        self.planner = planner
        self.planner_name = planner_name or type(planner).__name__
        self.observations = tuple(planner.observations)
        self.unknown_action = unknown_action
        self.record_prompts = record_prompts
        self.few_shot = few_shot
        self._queue: list[str] = []

    def reset(self) -> None:
        self.planner.reset()
        self._queue = []

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        calls: list[LlmCall] = []
        if not self._queue:
            plan = self.planner.plan(observation, t)
            calls = list(plan.llm_calls)
            if self.record_prompts and not calls:
                calls = [self._scripted_call(observation, plan.skills, plan.done, t)]
            self._queue = [*plan.skills, MISSION_COMPLETE] if plan.done else list(plan.skills)
            if not self._queue:
                self._queue = [""]  # an answer without any line costs one failed step
        line = self._queue.pop(0)
        if is_skill(line):
            return Decision(skill=line, llm_calls=calls)
        return Decision(action=self.unknown_action, llm_calls=calls, info={"not_a_skill": line})

    def _scripted_call(
        self, observation: dict[str, Any], skills: list[str], done: bool, t: int
    ) -> LlmCall:
        text = str(observation["text"])
        return LlmCall(
            t=t,
            messages=build_messages(text, few_shot=self.few_shot),
            response=format_plan(skills, done),
            parsed=list(skills),
            model=self.planner_name,
            info={"done": done, "scripted": True},
        )


def _layout(env_kwargs: dict[str, Any]) -> ActionLayout:
    """The env's discrete action layout (its capacities, defaults from HousekeepEnv)."""
    defaults = inspect.signature(HousekeepEnv).parameters
    sizes = {
        name: int(env_kwargs.get(name, defaults[name].default))
        for name in ("max_rooms", "max_receptacles", "max_objects")
    }
    return ActionLayout(**sizes)


@register_driver(POLICY_KIND)
def _housekeep_driver(
    policy: dict[str, Any], resources: Any, job: EpisodeJob
) -> HousekeepPlanDriver:
    planner = build_planner(policy, resources, job, charge_unparsable=True)
    uses_llm = bool(getattr(planner, "uses_llm", False))
    return HousekeepPlanDriver(
        planner,
        unknown_action=_layout(job.env_kwargs).unknown_name_action,
        record_prompts=not uses_llm,  # scripted planners: their plans as the LLM's calls
        few_shot=bool(policy.get("few_shot", True)),
        planner_name=policy["name"],
    )
