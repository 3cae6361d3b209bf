"""Who decides when to ask: the learned mediator and the paper's baselines.

* `always`: asks at every step (the most informed, the most expensive).
* `forced-only`: never asks by choice; the planner is only queried when the plan is finished
  or infeasible (the forced queries every method has).
* `news-or-skill-end`: the paper's hard-coded rule (Hu et al. 2023, Sec. 5): ask whenever the
  agent's knowledge changes (a new object or door seen, a door opened, an object picked up:
  its text observation differs from the one at the last query) or the current skill (option)
  has just ended.
* `random`: asks with probability p at each step (p = the learned policy's ask rate, so the
  comparison is at equal cost).
* `learned`: a PPO policy over the mediator's observation.
* `until-confirmed` (a reference, not one of the paper's baselines nor a default method): asks
  at every step until an asked-for query returns the plan in hand (the observation's "plan
  confirmed" flag), then follows it until a query is forced. With a planner whose errors are
  drawn afresh per query, a plan given twice in a row is rarely wrong, so this is the obvious
  rule on the mediator's own observation: what a learned policy should at least match.
* `news-until-confirmed` (a reference too): the two combined, asks when the agent's knowledge
  changed since the last query and then until the answer is confirmed, so a plan is made
  with what the agent knows and checked once; it reads the same two flags a learned policy
  could combine.
* `until-confident` (a reference too, for planners that report a confidence): asks until the
  planner gave the plan in hand at least probability `threshold` (the mediator's confidence
  feature, `MediatorSettings(sees_confidence=True)`, its last entry): the obvious rule on that
  feature, for a sampling LLM re-draws a doubtful plan when asked again.

The rules read the mediator's own observation (`MediatorCore.features`), as the learned
policy does, so every method decides from the same information.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from llmrl.recipes.when2ask.mediator import (
    CONFIDENCE,
    KNOWLEDGE_CHANGED,
    PLAN_CONFIRMED,
    STATUS_START,
)
from llmrl.simulator.envs.base import SkillStatus

FORCED_ONLY, NEWS_OR_SKILL_END = "forced-only", "news-or-skill-end"
UNTIL_CONFIRMED, NEWS_UNTIL_CONFIRMED = "until-confirmed", "news-until-confirmed"
UNTIL_CONFIDENT = "until-confident"
ALWAYS = "always"
METHODS = (ALWAYS, FORCED_ONLY, NEWS_OR_SKILL_END, "random", "learned")
# evaluated only when asked for
REFERENCE_RULES = (UNTIL_CONFIRMED, NEWS_UNTIL_CONFIRMED, UNTIL_CONFIDENT)


class AskPolicy(Protocol):
    def ask(self, features: np.ndarray) -> bool: ...


class AlwaysAsk:
    def ask(self, features: np.ndarray) -> bool:
        return True


class ForcedOnly:
    def ask(self, features: np.ndarray) -> bool:
        return False


class NewsOrSkillEnd:
    """Ask when the agent's knowledge changed since the last query or a skill just ended."""

    def ask(self, features: np.ndarray) -> bool:
        knowledge_changed = features[KNOWLEDGE_CHANGED] > 0.5
        skill_ended = features[STATUS_START + SkillStatus.DONE] > 0.5
        return bool(knowledge_changed or skill_ended)


class UntilConfirmed:
    """Ask until an asked-for query returned the plan in hand; then follow it."""

    def ask(self, features: np.ndarray) -> bool:
        return bool(features[PLAN_CONFIRMED] <= 0.5)


class NewsUntilConfirmed:
    """Ask when the knowledge changed since the last query, then until a query confirms."""

    def ask(self, features: np.ndarray) -> bool:
        knowledge_changed = features[KNOWLEDGE_CHANGED] > 0.5
        return bool(knowledge_changed or features[PLAN_CONFIRMED] <= 0.5)


class UntilConfident:
    """Ask until the planner gave the plan in hand at least probability `threshold`."""

    def __init__(self, threshold: float) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"until-confident threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold

    def ask(self, features: np.ndarray) -> bool:
        return bool(features[CONFIDENCE] < self.threshold)


class RandomAsk:
    def __init__(self, p: float, seed: int = 0) -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"random-ask probability p must be in [0, 1], got {p}")
        self.p = p
        self.rng = np.random.default_rng(seed)

    def ask(self, features: np.ndarray) -> bool:
        return bool(self.rng.random() < self.p)


class LearnedAsk:
    def __init__(self, model: Any) -> None:
        self.model = model

    def ask(self, features: np.ndarray) -> bool:
        action, _ = self.model.predict(features, deterministic=True)
        return bool(int(np.asarray(action).reshape(-1)[0]) == 1)


def make_ask_policy(spec: dict[str, Any], seed: int = 0) -> AskPolicy:
    """`{"method": "always" | "forced-only" | "news-or-skill-end" | "random" (p) | "learned"
    (model: a PPO checkpoint or .zip path)}`."""
    method = str(spec.get("method"))
    if method == ALWAYS:
        return AlwaysAsk()
    if method == FORCED_ONLY:
        return ForcedOnly()
    if method == NEWS_OR_SKILL_END:
        return NewsOrSkillEnd()
    if method == UNTIL_CONFIRMED:
        return UntilConfirmed()
    if method == NEWS_UNTIL_CONFIRMED:
        return NewsUntilConfirmed()
    if method == UNTIL_CONFIDENT:
        return UntilConfident(float(spec.get("threshold", 0.5)))
    if method == "random":
        return RandomAsk(float(spec.get("p", 0.5)), seed=seed)
    if method == "learned":
        from llmrl.common import trusted
        from llmrl.learner.algorithms import load_cached

        model = trusted.resolve_artifact(spec.get("model", ""), "policy.ask.model")
        return LearnedAsk(load_cached("ppo", model))  # one load per process
    known = ", ".join((*METHODS, *REFERENCE_RULES))
    raise ValueError(f"unknown asking method {spec.get('method')!r}; methods: {known}")
