"""The When2Ask mediator: the agent's only decision is whether to ask the planner now.

Hu et al. (2023) put a small RL policy between an agent and its LLM planner. Each mediator
step runs the current skill's controller for one low-level step in the simulator. Before the
step the planner is queried when the mediator's action is ASK, and always when the plan is
finished or its last skill turned out infeasible (a forced query). Every query costs:

    reward = env reward - lam * [queried] - same_plan_penalty * [asked, got the same plan]
                        + new_plan_bonus * [asked, got another plan]

The second term is the paper's penalty for asking again and getting back the plan it already
had: asking is only worth it when something has changed. The original code (LLM4RL's
`Game.collect`) also pays a small bonus for an asked-for query that changed the plan (0.1 *
0.1 = 0.01, which makes such a query free at lam = 0.01) and charges 0.1 for the same plan;
our defaults (same-plan penalty 0.01, no bonus) are milder, and both are settings.

Observation (the paper feeds the change between consecutive partial observations; so do we,
plus what the mediator knows about its own plan), all in [0, 1]:
  - the agent's view now (3x3 minigrid encoding, scaled),
  - which cells of the view changed since the previous step (binary),
  - whether the agent's knowledge (its text observation) changed since the last query,
  - whether the last query, when asked for, returned a plan that disagrees with the one in
    hand (a planner that errs, see `llmrl.planners.noisy_oracle`, contradicts itself: a sign
    that one of the two plans is wrong),
  - whether the plan in hand is confirmed: an asked-for query returned it again (a forced
    query's plan, or one that contradicted its predecessor, is not; with a planner whose
    errors are drawn afresh per query, a plan given twice in a row is rarely wrong),
  - the status of the last skill step (one-hot NONE/RUNNING/DONE/INFEASIBLE),
  - plan steps remaining and steps since the last query (both scaled and clipped),
  - with `sees_plan` (config `mediator_sees_plan`), the skill in hand: its verb (one-hot over
    explore / go to / pick up / toggle) and its object's type (one-hot over key, door, box,
    ball, goal; none for explore). An agent follows its plan, so it can read it; with the view
    (whose agent cell shows what it carries) a learned mediator can judge whether the plan fits
    the situation (going to the door empty-handed, say), which no fixed rule does.
  - with `sees_knowledge` (config `mediator_sees_knowledge`), what the planner was prompted
    with and what it answered, in compact form: the skill in hand (verb, object type, as with
    `sees_plan`, and the object's colour), and the agent's knowledge read from its text (the
    colours of the keys, doors, boxes and balls it has seen, whether it has seen the goal, the
    seen doors' states, what it carries). In these tasks the right next skill follows from
    that knowledge, so a mediator that reads both can learn which plans do not fit it (a key
    whose colour no door has, the door while empty-handed): a learned check of the plan, which
    no fixed rule makes. It still cannot pick the skill; only the planner gives plans.
  - with `counts_objects` (config `mediator_counts_objects`), how many objects the agent's
    knowledge names (scaled by 1/6, clipped): the more a planner must tell apart, the more
    it errs (see the noisy planner's `distractors` mode), so a plan made with much in view
    is worth confirming.
  - with `sees_time` (config `mediator_sees_time`), the share of the step cap used so far
    (steps taken / cap). Under a tight cap a detour fails the episode, so whether a doubtful
    plan is worth a query depends on the steps left; and since the time is then in the state,
    training ends an episode at the cap as a termination, not a truncation to bootstrap past
    (Pardo et al. 2018, "Time limits in reinforcement learning").
  - with `sees_confidence` (config `mediator_sees_confidence`), the probability the planner
    gave the plan in hand when it was last asked (`Plan.confidence`: a scoring LLM's softmax
    probability of the skill it chose; 1 for a planner that cannot say, 0 with no plan). A
    sampling LLM's wrong plans are mostly its unlikely draws, so a doubtful plan is worth
    asking about again, which no fixed rule reads.

`MediatorSettings` declares what the mediator is paid and observes, once: the recipe's config
(`lam`, `mediator_sees_plan`...), its training job and its driver's policy spec embed it.
`MediatorCore` holds the logic once; `MediatorEnv` (training, a gymnasium env over a world of
one env) and the rollout driver (evaluation by rollout workers) both use it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from minigrid.core.constants import COLOR_NAMES

from llmrl.common.episodes import LlmCall
from llmrl.planners.base import Plan, Planner, observation_text
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings
from llmrl.simulator.envs.base import SkillStatus
from llmrl.simulator.envs.when2ask.knowledge import BALL, BOX, DOOR, GOAL, KEY
from llmrl.simulator.envs.when2ask.skills import (
    DOOR_STATE_WORDS,
    VERBS,
    Skill,
    carried_object,
    door_states,
    parse_skill,
    seen_objects,
)

CARRY_ON, ASK = 0, 1
FALLBACK_SKILL = "explore"  # what the agent does when the planner gave no usable plan
VIEW_CELLS = 3 * 3 * 3
OBS_SIZE = 2 * VIEW_CELLS + 3 + len(SkillStatus) + 2
PLAN_TARGET_TYPES = (KEY, DOOR, BOX, BALL, GOAL)
PLAN_FEATURES = len(VERBS) + len(PLAN_TARGET_TYPES)  # appended with sees_plan or sees_knowledge
KNOWN_TYPES = (KEY, DOOR, BOX, BALL)  # seen colours per type (the goal: seen or not)
CARRIED_TYPES = (KEY, BALL)  # what can be picked up
# plan colour, seen colours per type, goal seen, door states, carried type and colour
KNOWLEDGE_FEATURES = (
    len(COLOR_NAMES) * (2 + len(KNOWN_TYPES)) + 1 + len(DOOR_STATE_WORDS) + len(CARRIED_TYPES)
)
OBJECTS_KNOWN_SCALE = 6  # objects named in the knowledge, scaled by 1/6 (counts_objects)
UNKNOWN_CONFIDENCE = 1.0  # a planner that cannot say how sure it is counts as sure
CONFIDENCE = -1  # with sees_confidence, the planner's confidence is the last feature
# Feature indices (see `features`); the hand-written rules read some of them.
KNOWLEDGE_CHANGED = 2 * VIEW_CELLS
PLAN_DISAGREED = KNOWLEDGE_CHANGED + 1
PLAN_CONFIRMED = PLAN_DISAGREED + 1
STATUS_START = PLAN_CONFIRMED + 1
WORLD_ENTRIES = ("reward", "discount", "step_type")
FEATURE_OBSERVATIONS = ("image", "skill_status", "text")  # what `features` reads every step
_ENCODING_SCALE = np.float32(1 / 10)  # minigrid encodes object/colour/state as ints < 11


@dataclass
class EpisodeStats:
    """What one mediator episode did; reset at every episode start."""

    queries: int = 0  # every planner query, forced or asked for
    asked: int = 0  # the mediator's ASK actions
    forced: int = 0  # queries the mediator did not choose (plan finished or infeasible)
    same_plan: int = 0  # asks that returned the plan already being followed
    wrong_plans: int = 0  # queries whose plan was a deliberate error (see Plan.erred)
    penalty: float = 0.0
    llm_calls: list[LlmCall] = field(default_factory=list)


@dataclass
class StepChoice:
    """What the mediator does at one step, and what deciding it cost."""

    skill: str
    queried: bool
    asked: bool
    penalty: float
    llm_calls: list[LlmCall]
    # the skill comes from a plan its planner knows to be wrong (None: the planner cannot say)
    wrong_plan: bool | None = None


class MediatorCore:
    """Plan bookkeeping, query accounting and observation features for one env."""

    def __init__(
        self,
        planner: Planner,
        settings: MediatorSettings | None = None,
        step_cap: int | None = None,
    ):
        settings = settings or MediatorSettings()
        self.planner = planner
        self.lam = settings.lam
        self.same_plan_penalty = settings.same_plan_penalty
        self.new_plan_bonus = settings.new_plan_bonus
        self.sees_plan = settings.sees_plan
        self.counts_objects = settings.counts_objects
        self.sees_confidence = settings.sees_confidence
        self.sees_knowledge = settings.sees_knowledge
        if settings.sees_time and step_cap is None:
            raise ValueError("sees_time: the mediator's clock needs its step cap (max_steps)")
        if step_cap is not None and step_cap < 1:
            raise ValueError(f"step_cap must be at least 1 (None: no clock), got {step_cap}")
        # sees_time: the time feature is steps taken / step_cap
        self.step_cap = step_cap if settings.sees_time else None
        self.observation_space = observation_space(settings)
        self.observations = tuple(sorted({*FEATURE_OBSERVATIONS, *planner.observations}))
        # the planner's other entries (privileged ones cost a search) are read at queries only
        self.query_observations = tuple(
            name for name in self.observations if name not in FEATURE_OBSERVATIONS
        )
        self.reset()

    def reset(self) -> None:
        self.planner.reset()
        self.stats = EpisodeStats()
        self.plan: list[str] = []
        self.needs_plan = True
        self._text_at_query = ""
        self._since_query = 0
        self._steps = 0
        self._plan_disagreed = False
        self._plan_confirmed = False
        self._plan_confidence = 0.0  # no plan yet
        self._plan_erred: bool | None = None  # diagnostic only: never a feature
        self._prev_view: np.ndarray | None = None

    def after_step(self, obs: dict[str, Any]) -> None:
        """Advance the plan by the status the last skill step reported."""
        status = int(obs.get("skill_status", SkillStatus.NONE))
        if status == SkillStatus.DONE and self.plan:
            self.plan.pop(0)
        if status == SkillStatus.INFEASIBLE:
            self.plan = []  # the plan is stale: the next step asks whatever the policy says
        if not self.plan:
            self.needs_plan = True
        self._since_query += 1
        self._steps += 1

    @property
    def steps(self) -> int:
        """Mediator steps taken this episode (the clock `sees_time` observes)."""
        return self._steps

    @property
    def wrong_plan_in_hand(self) -> bool | None:
        """Whether the plan in hand is one its planner knows to be wrong (None: it cannot say);
        a diagnostic for reports, never a feature."""
        return self._plan_erred

    @property
    def sees_time(self) -> bool:
        return self.step_cap is not None

    def choose(self, obs: dict[str, Any], ask: bool, t: int) -> StepChoice:
        """Query the planner if asked to (or forced), then pick the skill to run now."""
        penalty, calls, queried = 0.0, [], False
        if ask or self.needs_plan:
            queried = True
            plan = self.planner.plan(obs, t=t)
            calls = list(plan.llm_calls)
            self.stats.llm_calls.extend(calls)
            self.stats.queries += 1
            penalty = self.lam
            same = bool(plan.skills) and plan.skills == self.plan
            # another usable plan replaced the one in hand (an empty answer replaces nothing)
            replaced = bool(self.plan) and bool(plan.skills) and not same
            if ask:
                self.stats.asked += 1
                if same:
                    self.stats.same_plan += 1
                    penalty += self.same_plan_penalty
                elif replaced:
                    penalty -= self.new_plan_bonus
            else:
                self.stats.forced += 1
            self._plan_disagreed = bool(self.plan) and plan.skills != self.plan
            self._plan_confirmed = ask and same
            self.plan = list(plan.skills)
            self._plan_confidence = plan_confidence(plan)
            self._plan_erred = plan.erred
            self.stats.wrong_plans += int(bool(plan.erred))
            self.needs_plan = False
            self._text_at_query = observation_text(obs.get("text", ""))
            self._since_query = 0
        self.stats.penalty += penalty
        skill = self.plan[0] if self.plan else FALLBACK_SKILL
        return StepChoice(skill, queried, bool(ask), penalty, calls, self._plan_erred)

    def features(self, obs: dict[str, Any]) -> np.ndarray:
        """The mediator's observation (see the module docstring); call once per step."""
        image = np.asarray(obs.get("image", np.zeros(VIEW_CELLS)), dtype=np.float32)
        view = image.reshape(-1)[:VIEW_CELLS] * _ENCODING_SCALE
        prev = view if self._prev_view is None else self._prev_view
        changed = (view != prev).astype(np.float32)
        self._prev_view = view
        text = observation_text(obs.get("text", ""))
        knowledge_changed = float(text != self._text_at_query)
        status = int(obs.get("skill_status", SkillStatus.NONE))
        status_onehot = np.eye(len(SkillStatus), dtype=np.float32)[status]
        progress = np.array(
            [min(len(self.plan), 10) / 10, min(self._since_query, 20) / 20], np.float32
        )
        plan_flags = [float(self._plan_disagreed), float(self._plan_confirmed)]
        parts = [view, changed, [knowledge_changed, *plan_flags], status_onehot, progress]
        skill = self.plan[0] if self.plan else None
        if self.sees_plan or self.sees_knowledge:
            parts.append(skill_features(skill))
        if self.sees_knowledge:
            parts.append(knowledge_features(text, skill))
        if self.counts_objects:
            parts.append([len(seen_objects(text)) / OBJECTS_KNOWN_SCALE])
        if self.step_cap is not None:
            parts.append([self._steps / self.step_cap])
        if self.sees_confidence:  # last: the until-confident rule reads features[CONFIDENCE]
            parts.append([self._plan_confidence])
        return np.clip(np.concatenate(parts), 0.0, 1.0).astype(np.float32)


def plan_confidence(plan: Plan) -> float:
    """The confidence feature of a plan just received: 0 for no plan, else the planner's
    figure (UNKNOWN_CONFIDENCE when it cannot say)."""
    if not plan.skills:
        return 0.0
    return UNKNOWN_CONFIDENCE if plan.confidence is None else float(plan.confidence)


def skill_features(skill: str | None) -> np.ndarray:
    """One-hot verb and object type of `skill`; zeros for no plan or an unparsable skill."""
    features = np.zeros(PLAN_FEATURES, np.float32)
    parsed = _parsed(skill)
    if parsed is None:
        return features
    features[VERBS.index(parsed.verb)] = 1.0
    if parsed.target is not None:
        features[len(VERBS) + PLAN_TARGET_TYPES.index(parsed.target[0])] = 1.0
    return features


def knowledge_features(text: str, skill: str | None) -> np.ndarray:
    """The plan's object colour and the agent's knowledge (see the module docstring), from the
    knowledge text the planner is prompted with; zeros where nothing is known."""
    colours = len(COLOR_NAMES)
    plan_colour = np.zeros(colours, np.float32)
    parsed = _parsed(skill)
    target = parsed.target if parsed is not None else None
    if target is not None and target[0] != GOAL:
        plan_colour[target[1]] = 1.0
    seen = seen_objects(text)
    seen_colours = np.zeros((len(KNOWN_TYPES), colours), np.float32)
    for kind, colour in seen:
        if kind in KNOWN_TYPES:
            seen_colours[KNOWN_TYPES.index(kind), colour] = 1.0
    goal_seen = [float((GOAL, 0) in seen)]
    doors = np.zeros(len(DOOR_STATE_WORDS), np.float32)
    for state in door_states(text).values():
        doors[state] = 1.0
    carried_type = np.zeros(len(CARRIED_TYPES), np.float32)
    carried_colour = np.zeros(colours, np.float32)
    carried = carried_object(text)
    if carried is not None and carried[0] in CARRIED_TYPES:
        carried_type[CARRIED_TYPES.index(carried[0])] = 1.0
        carried_colour[carried[1]] = 1.0
    return np.concatenate(
        [plan_colour, seen_colours.reshape(-1), goal_seen, doors, carried_type, carried_colour]
    )


def _parsed(skill: str | None) -> Skill | None:
    """The skill in hand parsed, or None for no plan or an unparsable skill (an LLM's free
    text the env would refuse anyway)."""
    if not skill:
        return None
    try:
        return parse_skill(skill)
    except ValueError:
        return None


def observation_space(settings: MediatorSettings | None = None) -> spaces.Box:
    """The mediator's features with `settings`' optional ones (`MediatorCore.features`)."""
    s = settings or MediatorSettings()
    size = OBS_SIZE + (PLAN_FEATURES if s.sees_plan or s.sees_knowledge else 0)
    size += (KNOWLEDGE_FEATURES if s.sees_knowledge else 0) + int(s.counts_objects)
    size += int(s.sees_time) + int(s.sees_confidence)
    return spaces.Box(0.0, 1.0, shape=(size,), dtype=np.float32)


class MediatorEnv(gym.Env):
    """Action {0: carry on, 1: ask} over a world of one skill env; see the module docstring.

    An infeasible skill does not advance the underlying env (no time passes), so the
    mediator caps its own steps at `max_steps` as well: a truncation, or with `sees_time`,
    where the mediator observes its clock, a termination (the cap is part of the task).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        world_factory: Callable[[], Any],
        planner: Planner,
        settings: MediatorSettings | None = None,
        max_steps: int = 200,
    ) -> None:
        self.world = world_factory()
        if self.world.num_envs != 1:
            raise ValueError(f"a mediator needs a world of 1 env, got {self.world.num_envs}")
        self.core = MediatorCore(planner, settings, step_cap=max_steps)
        self.max_steps = max_steps
        self.requested = list(dict.fromkeys([*self.core.observations, *WORLD_ENTRIES]))
        # The planner's own entries (the oracle's plan, the feasible skills: a search each) are
        # asked for only when the planner will be queried, as the evaluation driver does.
        self.for_query = list(self.core.query_observations)
        self.every_step = [name for name in self.requested if name not in self.for_query]
        self.observation_space = self.core.observation_space
        self.action_space = spaces.Discrete(2)
        self._obs: dict[str, Any] = {}
        self._env_return = 0.0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        batch = self.world.reset(seed=seed, observations=self.requested)  # all: a query follows
        self._obs = {k: v[0] for k, v in batch.items()}
        self.core.reset()
        self._env_return = 0.0
        return self.core.features(self._obs), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if int(action) not in (CARRY_ON, ASK):
            raise ValueError(f"action must be 0 (carry on) or 1 (ask), got {action!r}")
        ask = int(action) == ASK
        if self.for_query and self.core.steps > 0 and (ask or self.core.needs_plan):
            # the env as it stands: an inactive step moves nothing and returns the entries now
            now = self.world.step(active=[False], observations=self.for_query)
            self._obs.update({k: v[0] for k, v in now.items()})
        choice = self.core.choose(self._obs, ask=ask, t=self.core.steps)
        batch = self.world.step(skill=[choice.skill], observations=self.every_step)
        self._obs = {k: v[0] for k, v in batch.items()}
        self.core.after_step(self._obs)  # counts the step
        env_reward = float(self._obs["reward"])
        self._env_return += env_reward
        last = int(self._obs["step_type"]) == 2
        capped = not last and self.core.steps >= self.max_steps
        # with the clock observed, the cap is part of the task: it ends it
        terminated = (last and float(self._obs["discount"]) == 0.0) or (
            capped and self.core.sees_time
        )
        truncated = (last or capped) and not terminated
        info: dict[str, Any] = {"skill": choice.skill, "queried": choice.queried}
        if terminated or truncated:
            # "r" and "l" are SB3's Monitor keys (its logger reads them); the rest are ours.
            info["episode"] = {
                "r": self._env_return - self.core.stats.penalty,
                "l": self.core.steps,
                "env_return": self._env_return,
                "success": terminated and env_reward > 0,
                "length": self.core.steps,
                "queries": self.core.stats.queries,
                "asked": self.core.stats.asked,
                "penalty": self.core.stats.penalty,
                "wrong_plans": self.core.stats.wrong_plans,  # a diagnostic (noisy planner)
            }
        reward = env_reward - choice.penalty
        return self.core.features(self._obs), reward, terminated, truncated, info

    def close(self) -> None:
        self.world.close()
