"""A planner that errs as language models do: the oracle's plan, wrong with probability p.

When2Ask's point (Hu et al. 2023) is that an LLM planner is sometimes wrong, so asking again
can repair a plan (or break a good one) and a mediator should learn when that is worth it.
With the privileged oracle a new plan is never better than the one in hand; this planner
replaces the oracle's plan, with probability `p` per query (drawn from its own seeded
generator), by a plausible wrong one: its first skill is swapped for

* the same skill on another object the agent has seen ("go to the blue box"),
* the same skill on a key of the wrong colour ("pick up the green key"), or
* a skill of the wrong kind on the same object ("go to the red key" instead of picking it up;
  for `explore`, going to something already seen; for the goal, exploring),

chosen uniformly among those that apply. A wrong object is kept through the rest of the plan
(an LLM that takes the blue key for the door's key plans to go to it and pick it up), so the
error costs what following it costs. As an LLM planner that scores the feasible skills only
errs among those (`when2ask-llm`, score mode), wrong skills are drawn from the feasible ones
when that leaves any; failing that, from any feasible skill other than the right one (often
`explore`). The planner sees what an LLM planner would (the agent's knowledge in `text`, the
feasible skills) plus the oracle's plan.

When errors are drawn (`mode`):

* `fresh` (default): an independent draw per query from the planner's generator, as an LLM
  that samples does; asking again with the same knowledge may repair a wrong plan, or break a
  right one (an agent that asks at every step dithers).
* `persistent`: the same input gets the same answer within an episode, as a deterministic
  (greedy) LLM gives: whether the plan is wrong, and how, is drawn from a generator seeded by
  the planner's seed, the episode (counted by `reset`) and a hash of what an LLM would be
  prompted with (the knowledge text and the feasible skills). Asking again only helps once
  that input has changed (a new object seen, the agent moved next to something); until then a
  wrong plan stays wrong however often the agent asks. The error rate over distinct inputs
  is still p.
* `distractors`: fresh draws, but the error rate depends on the situation: a query errs with
  probability min(1, p × d), where d counts the objects the agent has seen other than the one
  the right plan's first skill acts on (for `explore`, every object seen). An LLM confuses
  objects more the more of them its prompt names (Hu et al.'s Vicuna mixes up key colours
  when several keys are known); with nothing else seen it does not err. A mediator that
  counts the objects it knows (`MediatorSettings(counts_objects=True)`) can learn when a plan is
  worth confirming; no fixed rule looks.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, ClassVar

import numpy as np
from minigrid.core.constants import COLOR_NAMES

from llmrl.common.registry import registry
from llmrl.planners.base import Plan, Planner, observation_text
from llmrl.planners.oracle import OraclePlanner
from llmrl.simulator.envs.when2ask.knowledge import GOAL, KEY, Identity, color_index, object_name
from llmrl.simulator.envs.when2ask.skills import (
    PICKABLE,
    TOGGLEABLE,
    parse_skill,
    seen_objects,
)

MUTATIONS = ("another object", "wrong-colour key", "wrong kind")
NOISE_MODES = ("fresh", "persistent", "distractors")


def _verbs_for(identity: Identity) -> list[str]:
    """The verbs a well-formed skill may use on this object."""
    verbs = ["go to"]
    if identity[0] in PICKABLE:
        verbs.append("pick up")
    if identity[0] in TOGGLEABLE:
        verbs.append("toggle")
    return verbs


def _skill(verb: str, identity: Identity | None) -> str:
    return verb if identity is None else f"{verb} {object_name(identity)}"


def wrong_skills(skill: str, seen: list[Identity]) -> dict[str, list[str]]:
    """Per mutation kind, the plausible wrong replacements for `skill` (all differ from it)."""
    parsed = parse_skill(skill)
    verb, target = parsed.verb, parsed.target
    options: dict[str, list[str]] = {kind: [] for kind in MUTATIONS}
    if target is not None:
        options["another object"] = [
            _skill(verb, other) for other in seen if other != target and verb in _verbs_for(other)
        ]
    if target is not None and target[0] == KEY:
        seen_colours = [c for kind, c in seen if kind == KEY and c != target[1]]
        other_colours = seen_colours or [
            color_index(name) for name in COLOR_NAMES if color_index(name) != target[1]
        ]
        options["wrong-colour key"] = [_skill(verb, (KEY, c)) for c in other_colours]
    if target is None:  # explore: go somewhere already seen instead
        options["wrong kind"] = [_skill("go to", other) for other in seen]
    elif target[0] == GOAL:
        options["wrong kind"] = ["explore"]
    else:
        options["wrong kind"] = [_skill(v, target) for v in _verbs_for(target) if v != verb]
    return {kind: choices for kind, choices in options.items() if choices}


def distractors(right_skill: str | None, seen: list[Identity]) -> list[Identity]:
    """The seen objects a planner could take for the one `right_skill` acts on (every seen
    object when it acts on none, as `explore` does)."""
    target = parse_skill(right_skill).target if right_skill else None
    return [identity for identity in seen if identity != target]


def carry_through(plan: list[str], replacement: str) -> list[str]:
    """`plan` with its first skill replaced; a wrong object replaces the right one in the
    skills after it too (the plan stays consistent with the error)."""
    right, wrong = parse_skill(plan[0]), parse_skill(replacement)
    rest = plan[1:]
    if right.target is not None and wrong.target is not None and wrong.target != right.target:
        old_name, new_name = object_name(right.target), object_name(wrong.target)
        rest = [_swap_object(skill, old_name, new_name) for skill in rest]
    return [replacement, *rest]


def _swap_object(skill: str, old_name: str, new_name: str) -> str:
    if not skill.endswith(old_name):
        return skill
    swapped = skill[: -len(old_name)] + new_name
    try:
        parse_skill(swapped)  # e.g. "pick up the blue door" is no skill: keep the right one
    except ValueError:
        return skill
    return swapped


@registry.register_planner(
    "noisy-oracle", "The oracle's plan, replaced with probability p by a plausible wrong one"
)
class NoisyOraclePlanner(Planner):
    observations: ClassVar[tuple[str, ...]] = ("text", "oracle_plan", "feasible_skills")
    uses_llm: ClassVar[bool] = False
    seeded: ClassVar[bool] = True

    def __init__(self, p: float = 0.1, seed: int = 0, mode: str = "fresh") -> None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"noisy-oracle: error rate p must be in [0, 1], got {p}")
        if mode not in NOISE_MODES:
            raise ValueError(
                f"noisy-oracle: mode must be one of {', '.join(NOISE_MODES)}, got {mode!r}"
            )
        self.p = float(p)
        self.seed = int(seed)
        self.mode = mode
        self.rng = np.random.default_rng(seed)
        self.oracle = OraclePlanner()
        self.episode = 0  # episodes begun (persistent mode: part of the draw's seed)
        self.queries = 0  # queries answered (over the planner's lifetime, not per episode)
        self.errors = 0  # of which answered with a wrong plan
        self.last_mutation: str | None = None  # kind of the last wrong plan, None if right

    def reset(self) -> None:
        self.episode += 1

    def _generator(self, text: str, feasible: list[str]) -> np.random.Generator:
        """fresh and distractors: the planner's own stream; persistent: one seeded by the
        input (see the module docstring), so the same input gives the same draws."""
        if self.mode != "persistent":
            return self.rng
        digest = hashlib.blake2b("\n".join([text, *feasible]).encode(), digest_size=8).digest()
        return np.random.default_rng([self.seed, self.episode, int.from_bytes(digest, "little")])

    def error_rate(self, right_skill: str | None, seen: list[Identity]) -> float:
        """The chance that a query whose right first skill is `right_skill` errs (see `mode`)."""
        if self.mode != "distractors":
            return self.p
        return min(1.0, self.p * len(distractors(right_skill, seen)))

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        right = self.oracle.plan(observation, t)
        self.queries += 1
        self.last_mutation = None
        text = observation_text(observation.get("text", ""))
        feasible = [
            s for s in observation_text(observation.get("feasible_skills", "")).split("\n") if s
        ]
        rng = self._generator(text, feasible)
        seen = seen_objects(text)
        rate = self.error_rate(right.skills[0] if right.skills else None, seen)
        # One draw per query whatever the plan, so the error rate is exactly `rate` per query.
        wrong = bool(rng.random() < rate)
        if not wrong or not right.skills:
            return dataclasses.replace(right, erred=False)
        first = right.skills[0]
        options = wrong_skills(first, seen)
        if feasible:
            options = {k: [c for c in v if c in feasible] for k, v in options.items()}
            options = {k: v for k, v in options.items() if v}
            if not options and [s for s in feasible if s != first]:
                options = {"another feasible skill": [s for s in feasible if s != first]}
        if not options:  # nothing else to do or seen: an LLM names a key it imagines
            colour = COLOR_NAMES[int(rng.integers(len(COLOR_NAMES)))]
            options = {"wrong-colour key": [f"go to the {colour} key"]}
        kind = list(options)[int(rng.integers(len(options)))]
        choices = options[kind]
        replacement = choices[int(rng.integers(len(choices)))]
        self.errors += 1
        self.last_mutation = kind
        return Plan(skills=carry_through(right.skills, replacement), erred=True)
