"""Who decides when to ask: the learned mediator and the paper's baselines.

* `always`: asks at every step (the most informed, the most expensive).
* `hard-coded`: never asks by choice; the planner is only queried when the plan is finished
  or infeasible (the forced queries every method has).
* `random`: asks with probability p at each step (p = the learned policy's ask rate, so the
  comparison is at equal cost).
* `learned`: a PPO policy over the mediator's observation.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

METHODS = ("always", "hard-coded", "random", "learned")


class AskPolicy(Protocol):
    def ask(self, features: np.ndarray) -> bool: ...


class AlwaysAsk:
    def ask(self, features: np.ndarray) -> bool:
        return True


class HardCoded:
    def ask(self, features: np.ndarray) -> bool:
        return False


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
    """`{"method": "always" | "hard-coded" | "random" (p) | "learned" (model: a PPO checkpoint
    or .zip path)}`."""
    method = spec.get("method")
    if method == "always":
        return AlwaysAsk()
    if method == "hard-coded":
        return HardCoded()
    if method == "random":
        return RandomAsk(float(spec.get("p", 0.5)), seed=seed)
    if method == "learned":
        from llmrl.learner.algorithms import load_cached

        return LearnedAsk(load_cached("ppo", spec["model"]))  # one load per process
    raise ValueError(f"unknown asking method {method!r}; methods: {', '.join(METHODS)}")
