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

from typing import Any

from llmrl.agents import Decision, EpisodeDriver, EpisodeJob, RolloutResources
from llmrl.common.registry import registry
from llmrl.planners.base import make_planner, reseeded
from llmrl.recipes.when2ask.asking import (
    ALWAYS,
    UNTIL_CONFIDENT,
    AskPolicy,
    canonical_method,
    make_ask_policy,
)
from llmrl.recipes.when2ask.mediator import FEATURE_OBSERVATIONS, MediatorCore

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


@registry.register_driver(
    "when2ask", "When2Ask: a mediator decides when to ask the planner", artifacts=("ask.model",)
)
def _mediator_driver(
    policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob
) -> MediatorDriver:
    planner = make_planner(
        reseeded(policy["planner"], job.seed),  # a noisy planner errs differently per episode
        connect_llm=lambda: resources.llm,
        llm_defaults={"run_id": job.run_id},
    )
    sees_time = bool(policy.get("sees_time", False))
    if sees_time and job.max_steps is None:
        # the clock runs to the cap the mediator was trained with; without one it has no scale
        raise ValueError("policy.sees_time: needs the episode job's max_steps (the step cap)")
    core = MediatorCore(
        planner,
        lam=float(policy.get("lam", 0.01)),
        same_plan_penalty=float(policy.get("same_plan_penalty", 0.01)),
        new_plan_bonus=float(policy.get("new_plan_bonus", 0.0)),
        sees_plan=bool(policy.get("sees_plan", False)),
        counts_objects=bool(policy.get("counts_objects", False)),
        sees_confidence=bool(policy.get("sees_confidence", False)),
        step_cap=job.max_steps if sees_time else None,
        sees_knowledge=bool(policy.get("sees_knowledge", False)),
    )
    method = canonical_method(str(policy["ask"].get("method")))
    if method == UNTIL_CONFIDENT and not core.sees_confidence:
        # without the feature the rule would read whatever feature comes last
        raise ValueError(f'policy.sees_confidence: {UNTIL_CONFIDENT} needs "sees_confidence": true')
    entries = policy.get("planner_entries", PLANNER_ENTRIES[0])
    if entries not in PLANNER_ENTRIES:
        allowed = ", ".join(PLANNER_ENTRIES)
        raise ValueError(f"policy.planner_entries: expected one of {allowed}, got {entries!r}")
    ask_policy = make_ask_policy(policy["ask"], seed=job.seed)
    # always-ask queries every step: reading the entries apart would only add a call per step
    every_step = entries == "every_step" or method == ALWAYS
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


@registry.register_driver("sb3", artifacts=("model",))
def _sb3_driver(policy: dict[str, Any], resources: RolloutResources, job: EpisodeJob) -> Any:
    """`{"kind": "sb3", "model": <a saved .zip or checkpoint>, "algorithm": "ppo", "keys":
    [...]}`."""
    from llmrl.common import trusted
    from llmrl.learner.algorithms import load_cached

    if not policy.get("model"):
        raise ValueError("policy.model: a saved SB3 model (.zip or checkpoint) is required")
    model = load_cached(policy.get("algorithm", "ppo"), trusted.policy_artifacts(policy)["model"])
    return SB3ActionDriver(model, list(policy["keys"]))
