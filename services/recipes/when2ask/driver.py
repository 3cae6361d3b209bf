"""Rollout driver for When2Ask policy specs, so evaluation episodes run on rollout workers.

Policy spec: `{"kind": "when2ask", "name": <method>, "ask": {"method": ..., ...},
"planner": {"name": ..., "kwargs": {...}}, "lam": ..., "same_plan_penalty": ...,
"new_plan_bonus": ..., "sees_plan": ..., "counts_objects": ..., "sees_confidence": ...,
"sees_time": ..., "sees_knowledge": ..., "planner_entries": "at_queries" | "every_step"}`.
With `sees_time` the mediator's clock runs to the episode job's `max_steps`, the cap it was
trained with. Each step's `info` records `queried`, `asked` and `penalty`, from which the
recipe computes queries per episode and the penalised return; with a planner that knows its
errors (the noisy oracle) also `wrong_plan`, whether the step follows a plan that was a
deliberate error (a diagnostic: how long each method follows a wrong plan before a query
replaces it).
The planner's privileged entries (the oracle's plan, the feasible skills: a search each) are
read only at the steps that query it (`on_demand_observations`), as in training; always-ask,
which queries every step, and `"planner_entries": "every_step"` (the loop as it was, kept to
measure the difference: `bench/when2ask_eval.py`) read them with every step.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.agents.planner_driver import PlannerRef
from llmrl.agents.policy_spec import ArtifactRef, PolicySpec
from llmrl.common.registry import registry
from llmrl.planners.base import make_planner, reseeded
from llmrl.recipes.when2ask.asking import (
    ALWAYS,
    METHODS,
    REFERENCE_RULES,
    UNTIL_CONFIDENT,
    AskPolicy,
    make_ask_policy,
)
from llmrl.recipes.when2ask.mediator import FEATURE_OBSERVATIONS, MediatorCore
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings

PLANNER_ENTRIES = ("at_queries", "every_step")  # when the planner's own entries are read


class MediatorDriver(EpisodeDriver):
    optional_observations = ("success",)

    def __init__(self, core: MediatorCore, ask_policy: AskPolicy, every_step: bool = False):
        self.core = core
        self.ask_policy = ask_policy
        if every_step:  # the planner's entries come with each step, no extra read
            self.observations = core.observations
        else:
            self.observations = FEATURE_OBSERVATIONS
            self.on_demand_observations = core.query_observations

    def reset(self) -> None:
        self.core.reset()

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        if t > 0:
            self.core.after_step(observation)
        ask = self.ask_policy.ask(self.core.features(observation))
        if self.on_demand_observations and t > 0 and (ask or self.core.needs_plan):
            # the reset brought every entry; later steps read the planner's at its queries
            observation = {**observation, **self.look(self.on_demand_observations)}
        choice = self.core.choose(observation, ask=ask, t=t)
        info = {"queried": int(choice.queried), "asked": int(ask), "penalty": choice.penalty}
        if choice.wrong_plan is not None:
            info["wrong_plan"] = int(choice.wrong_plan)
        return Decision(skill=choice.skill, llm_calls=choice.llm_calls, info=info)


class AskSpec(BaseModel):
    """How the mediator decides to ask: a rule, a random rate or a learned policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: str = Field(..., description="an asking method or reference rule")
    p: float = Field(0.5, ge=0, le=1, description="random: the probability of asking")
    threshold: float = Field(0.5, ge=0, le=1, description=f"{UNTIL_CONFIDENT}: the confidence")
    model: ArtifactRef | None = Field(None, description="learned: the saved asking policy")

    @field_validator("method")
    @classmethod
    def _known(cls, method: str) -> str:
        if method not in (*METHODS, *REFERENCE_RULES):
            raise ValueError(f"expected one of {', '.join((*METHODS, *REFERENCE_RULES))}")
        return method

    @model_validator(mode="after")
    def _learned_has_a_model(self) -> AskSpec:
        if self.method == "learned" and self.model is None:
            raise ValueError("model: the learned method needs its saved asking policy")
        return self


class MediatorSpec(PolicySpec, MediatorSettings):
    """`{"kind": "when2ask", "ask": {...}, "planner": {...}, ...}` (the module docstring); the
    mediator's costs and observations are `MediatorSettings`' fields."""

    kind: Literal["when2ask"] = "when2ask"
    ask: AskSpec
    planner: PlannerRef
    planner_entries: Literal[PLANNER_ENTRIES] = Field(  # type: ignore[valid-type]
        PLANNER_ENTRIES[0], description="when the planner's own entries are read"
    )

    @model_validator(mode="after")
    def _confidence_is_seen(self) -> MediatorSpec:
        if self.ask.method == UNTIL_CONFIDENT and not self.sees_confidence:
            # without the feature the rule would read whatever feature comes last
            raise ValueError(f'sees_confidence: {UNTIL_CONFIDENT} needs "sees_confidence": true')
        return self


@registry.register_driver(
    "when2ask", "When2Ask: a mediator decides when to ask the planner", spec=MediatorSpec
)
def _mediator_driver(
    spec: MediatorSpec, resources: RolloutResources, job: EpisodeJob
) -> MediatorDriver:
    planner = make_planner(
        reseeded(spec.planner.as_dict(), job.seed),  # a noisy planner errs differently per episode
        connect_llm=lambda: resources.llm,
        llm_defaults={"run_id": job.run_id},
    )
    if spec.sees_time and job.max_steps is None:
        # the clock runs to the cap the mediator was trained with; without one it has no scale
        raise ValueError("policy.sees_time: needs the episode job's max_steps (the step cap)")
    core = MediatorCore(planner, spec, step_cap=job.max_steps)
    method = spec.ask.method
    ask_policy = make_ask_policy(spec.ask.model_dump(exclude_none=True), seed=job.seed)
    # always-ask queries every step: reading the entries apart would only add a call per step
    every_step = spec.planner_entries == "every_step" or method == ALWAYS
    return MediatorDriver(core, ask_policy, every_step=every_step)


class SB3ActionDriver(EpisodeDriver):
    """Low-level actions from a Stable-Baselines3 model (the never-ask baseline)."""

    optional_observations = ("success",)

    def __init__(self, model: Any, keys: list[str]) -> None:
        self.model = model
        self.keys = keys
        self.observations = tuple(keys)

    def act(self, observation: dict[str, Any], t: int) -> Decision:
        import numpy as np

        # float32, as the never-ask baseline was trained (see recipe.FloatObservations)
        obs = {key: np.asarray(observation[key], np.float32)[None] for key in self.keys}
        action, _ = self.model.predict(obs, deterministic=True)
        return Decision(action=int(np.asarray(action).reshape(-1)[0]))


class SB3Spec(PolicySpec):
    """`{"kind": "sb3", "model": <a saved .zip or checkpoint>, "algorithm": "ppo", "keys":
    [...]}`: low-level actions from a Stable-Baselines3 model on the observations `keys`."""

    kind: Literal["sb3"] = "sb3"
    model: ArtifactRef
    algorithm: str = Field("ppo", description="the SB3 algorithm that saved it")
    keys: list[str] = Field(..., min_length=1, description="the observations it reads")


@registry.register_driver("sb3", "a Stable-Baselines3 policy's own actions", spec=SB3Spec)
def _sb3_driver(spec: SB3Spec, resources: RolloutResources, job: EpisodeJob) -> Any:
    from llmrl.learner.algorithms import load_cached

    return SB3ActionDriver(load_cached(spec.algorithm, spec.model), list(spec.keys))
