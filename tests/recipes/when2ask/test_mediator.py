"""The mediator's accounting is exact: queries, forced queries, penalties, rewards."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from minigrid.core.constants import COLOR_NAMES, COLOR_TO_IDX
from pydantic import ValidationError

from llmrl.common.episodes import EpisodeRecord, StepRecord
from llmrl.planners.base import Plan, Planner
from llmrl.recipes.when2ask.mediator import (
    ASK,
    CARRY_ON,
    KNOWLEDGE_FEATURES,
    OBJECTS_KNOWN_SCALE,
    OBS_SIZE,
    PLAN_CONFIRMED,
    PLAN_DISAGREED,
    PLAN_FEATURES,
    PLAN_TARGET_TYPES,
    MediatorCore,
    MediatorEnv,
    knowledge_features,
    skill_features,
)
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings as Settings
from llmrl.recipes.when2ask.report import summarize
from llmrl.simulator.envs.when2ask.knowledge import GOAL, KEY
from llmrl.simulator.envs.when2ask.skills import VERBS, seen_objects
from llmrl.simulator.world import World

LAM, SAME = 0.05, 0.02


class ScriptedPlanner(Planner):
    """Returns the plans it is given, in order (the last one forever); counts its calls."""

    observations = ("text",)

    def __init__(self, plans: list[list[str]]) -> None:
        self.plans = plans
        self.calls = 0

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        plan = self.plans[min(self.calls, len(self.plans) - 1)]
        self.calls += 1
        return Plan(skills=list(plan))


def mediator(plans: list[list[str]]) -> tuple[MediatorEnv, ScriptedPlanner]:
    planner = ScriptedPlanner(plans)
    env = MediatorEnv(
        lambda: World("SimpleDoorKey", 1, seed=0),
        planner,
        Settings(lam=LAM, same_plan_penalty=SAME),
    )
    return env, planner


def test_first_step_forces_a_query_and_costs_lambda():
    env, planner = mediator([["explore"]])
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE,) and env.observation_space.contains(obs)
    _, reward, *_ = env.step(CARRY_ON)
    stats = env.core.stats
    assert (planner.calls, stats.queries, stats.forced, stats.asked) == (1, 1, 1, 0)
    assert reward == pytest.approx(-LAM)  # no env reward on a first explore step


def _reset_where_explore_keeps_running(env: MediatorEnv) -> None:
    """A seed whose first explore step finds nothing new (deterministic search)."""
    for seed in range(100):
        env.reset(seed=seed)
        env.step(CARRY_ON)  # forced query: plan = [explore]
        if not env.core.needs_plan:
            return
    raise AssertionError("no seed in 0..99 keeps explore running after one step")


def test_asking_for_the_same_plan_costs_the_extra_penalty():
    env, planner = mediator([["explore"]])
    _reset_where_explore_keeps_running(env)
    planner.calls = 1
    rewards = []
    for _ in range(3):
        if env.core.needs_plan:
            break  # explore finished: the next query would be forced, not asked
        _, reward, *_ = env.step(ASK)
        rewards.append(reward)
    assert rewards, "explore should still be running after one step"
    stats = env.core.stats
    assert stats.asked == len(rewards) and stats.same_plan == len(rewards)
    assert stats.queries == 1 + len(rewards) == planner.calls
    assert rewards == pytest.approx([-(LAM + SAME)] * len(rewards))
    assert stats.penalty == pytest.approx(LAM + len(rewards) * (LAM + SAME))


def test_a_new_plan_costs_only_lambda():
    env, planner = mediator([["explore"]])
    _reset_where_explore_keeps_running(env)
    planner.plans = [["go to the goal"]]
    _, reward, *_ = env.step(ASK)
    assert env.core.stats.same_plan == 0
    assert reward == pytest.approx(-LAM)
    assert env.core.plan[:1] == ["go to the goal"] or env.core.needs_plan


def test_the_original_codes_bonus_pays_for_a_plan_that_changed():
    """LLM4RL's shaping: an asked-for query that replaces the plan earns `new_plan_bonus`
    back; one that returns the same plan still pays the same-plan penalty."""
    bonus = 0.03
    planner = ScriptedPlanner([["explore"]])
    env = MediatorEnv(
        lambda: World("SimpleDoorKey", 1, seed=0),
        planner,
        Settings(lam=LAM, same_plan_penalty=SAME, new_plan_bonus=bonus),
    )
    _reset_where_explore_keeps_running(env)
    before = env.core.stats.penalty
    planner.plans = [["explore", "go to the goal"]]  # another plan; explore keeps running
    _, changed, *_ = env.step(ASK)
    assert changed == pytest.approx(-LAM + bonus)
    assert env.core.stats.penalty - before == pytest.approx(LAM - bonus)
    assert not env.core.needs_plan, "the new plan's explore should still be running"
    _, same, *_ = env.step(ASK)  # the same plan again: no bonus, the penalty
    assert same == pytest.approx(-(LAM + SAME))
    planner.plans = [[]]  # an empty answer replaces nothing: no bonus
    _, empty, *_ = env.step(ASK)
    assert empty == pytest.approx(-LAM)


def test_negative_query_costs_are_refused():
    with pytest.raises(ValidationError, match="new_plan_bonus"):
        Settings(new_plan_bonus=-1)


def test_infeasible_skill_forces_the_next_query():
    # Nothing is seen at the start of seed 3, so picking up a key is infeasible.
    env, planner = mediator([["pick up the purple key"], ["explore"]])
    env.reset(seed=3)
    _, _, _, _, info = env.step(CARRY_ON)
    assert info["skill"] == "pick up the purple key"
    assert env.core.needs_plan and env.core.plan == []
    env.step(CARRY_ON)
    assert planner.calls == 2 and env.core.stats.forced == 2


def test_episode_summary_matches_the_step_rewards():
    env, _ = mediator([["explore"]])
    env.reset(seed=5)
    total, info, done, rng = 0.0, {}, False, np.random.default_rng(0)
    while not done:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(2)))
        total += reward
        done = terminated or truncated
    episode = info["episode"]
    assert total == pytest.approx(episode["env_return"] - episode["penalty"])
    assert episode["queries"] == env.core.stats.queries
    assert episode["penalty"] == pytest.approx(
        LAM * episode["queries"] + SAME * env.core.stats.same_plan
    )


class KnowingPlanner(ScriptedPlanner):
    """A scripted planner that says which of its plans are wrong (as the noisy oracle does)."""

    def __init__(self, plans: list[tuple[list[str], bool]]) -> None:
        super().__init__([skills for skills, _ in plans])
        self.erred = [erred for _, erred in plans]

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        erred = self.erred[min(self.calls, len(self.erred) - 1)]
        return Plan(skills=super().plan(observation, t).skills, erred=erred)


def test_steps_on_a_known_wrong_plan_are_marked_until_a_query_replaces_it():
    planner = KnowingPlanner([(["explore"], True), (["go to the goal"], False)])
    core = MediatorCore(planner)
    obs = {"text": "You have seen nothing.", "skill_status": 1}
    marks = []
    for t, ask in enumerate([False, False, False, True, False]):  # forced at t=0, asked at 3
        if t:
            core.after_step(obs)
        marks.append(core.choose(obs, ask=ask, t=t).wrong_plan)
    assert marks == [True, True, True, False, False]
    assert core.stats.wrong_plans == 1 and core.stats.queries == 2
    unknowing = MediatorCore(ScriptedPlanner([["explore"]]))
    assert unknowing.choose(obs, ask=False, t=0).wrong_plan is None  # an LLM cannot say


def test_the_summary_counts_wrong_plans_received_and_the_steps_spent_on_them():
    def episode(steps: list[dict[str, int]]) -> EpisodeRecord:
        record = EpisodeRecord("r", "e", "SimpleDoorKey", seed=0, policy="learned")
        record.steps = [StepRecord(t=t, info=info) for t, info in enumerate(steps)]
        return record

    first = episode([{"queried": 1, "wrong_plan": 1}, {"queried": 0, "wrong_plan": 1},
                     {"queried": 1, "wrong_plan": 0}])  # fmt: skip
    second = episode([{"queried": 1, "wrong_plan": 0}, {"queried": 0, "wrong_plan": 0}])
    summary = summarize([first, second])
    assert summary["wrong_plans_per_episode"] == 0.5  # one wrong plan in two episodes
    assert summary["wrong_plan_steps_per_episode"] == 1.0  # two steps on it
    unknown = summarize([episode([{"queried": 1}])])  # a planner that cannot say
    assert "wrong_plans_per_episode" not in unknown


def test_bad_mediator_action_is_a_clear_error():
    env, _ = mediator([["explore"]])
    env.reset(seed=0)
    with pytest.raises(ValueError, match="0 \\(carry on\\) or 1 \\(ask\\)"):
        env.step(2)


def test_a_plan_is_confirmed_only_when_an_ask_returns_it_again():
    env, planner = mediator([["explore"]])
    _reset_where_explore_keeps_running(env)  # a forced query gave [explore]
    assert env.core.features(env._obs)[PLAN_CONFIRMED] == 0  # forced: not confirmed
    obs, *_ = env.step(ASK)  # the same plan again
    assert obs[PLAN_CONFIRMED] == 1 and obs[PLAN_DISAGREED] == 0
    planner.plans = [["go to the goal"]]
    obs, *_ = env.step(ASK)  # a different plan: a disagreement, nothing confirmed
    assert obs[PLAN_CONFIRMED] == 0 and obs[PLAN_DISAGREED] == 1


def test_a_mediator_that_sees_its_plan_observes_the_skill_in_hand():
    """sees_plan appends the skill in hand (verb, object type) after the base features."""
    planner = ScriptedPlanner([["explore"]])
    env = MediatorEnv(lambda: World("SimpleDoorKey", 1, seed=0), planner, Settings(sees_plan=True))
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE + PLAN_FEATURES,) and env.observation_space.contains(obs)
    assert not obs[OBS_SIZE:].any()  # no plan yet
    _reset_where_explore_keeps_running(env)
    seen = env.core.features(env._obs)[OBS_SIZE:]
    assert seen.tolist() == skill_features("explore").tolist()
    env.core.plan = ["pick up the red key", "toggle the red door"]  # what a query leaves
    seen = env.core.features(env._obs)[OBS_SIZE:]
    assert seen.tolist() == skill_features("pick up the red key").tolist()
    env.core.plan = []
    assert not env.core.features(env._obs)[OBS_SIZE:].any()


def test_skill_features_name_the_verb_and_the_object_type():
    verbs = len(VERBS)
    pick = skill_features("pick up the red key")
    assert pick[VERBS.index("pick up")] == 1 and pick.sum() == 2
    assert pick[verbs + PLAN_TARGET_TYPES.index(KEY)] == 1
    goal = skill_features("go to the goal")
    assert goal[VERBS.index("go to")] == 1 and goal[verbs + PLAN_TARGET_TYPES.index(GOAL)] == 1
    explore = skill_features("explore")
    assert explore[VERBS.index("explore")] == 1 and explore.sum() == 1
    assert not skill_features(None).any() and not skill_features("dance a jig").any()
    toggles = {skill_features(f"toggle the blue {kind}").argmax() for kind in ("door", "box")}
    assert toggles == {VERBS.index("toggle")}
    assert not np.array_equal(
        skill_features("toggle the blue door"), skill_features("toggle the blue box")
    )


def test_knowledge_features_read_the_plans_object_and_what_the_agent_knows():
    """The plan's colour, seen colours per type, the goal, door states and what is carried,
    each read from the knowledge text the env writes."""
    red, green, blue, yellow = (COLOR_TO_IDX[c] for c in ("red", "green", "blue", "yellow"))
    text = (
        "You have seen a locked red door, a green key, a blue box, the goal. "
        "You carry a yellow key."
    )
    features = knowledge_features(text, "pick up the green key")
    assert features.shape == (KNOWLEDGE_FEATURES,)
    n = len(COLOR_NAMES)
    plan_colour, seen = features[:n], features[n : 5 * n].reshape(4, n)
    goal, doors, carried_type, carried_colour = (
        features[5 * n],
        features[5 * n + 1 : 5 * n + 4],
        features[5 * n + 4 : 5 * n + 6],
        features[5 * n + 6 :],
    )
    assert plan_colour.tolist() == np.eye(n)[green].tolist()
    assert seen[0, [green, yellow]].tolist() == [1, 1] and seen[0].sum() == 2  # keys
    assert seen[1].tolist() == np.eye(n)[red].tolist()  # doors
    assert seen[2].tolist() == np.eye(n)[blue].tolist() and not seen[3].any()  # box, no ball
    assert goal == 1 and doors.tolist() == [0, 0, 1]  # the red door is locked
    assert carried_type.tolist() == [1, 0] and carried_colour.tolist() == np.eye(n)[yellow].tolist()
    # a wrong-colour key changes the plan's colour only; explore and the goal have none
    other = knowledge_features(text, "pick up the blue key")
    assert not np.array_equal(other[:n], features[:n]) and np.array_equal(other[n:], features[n:])
    assert not knowledge_features(text, "explore")[:n].any()
    assert not knowledge_features(text, "go to the goal")[:n].any()
    empty = knowledge_features("You have seen nothing yet. You carry nothing.", None)
    assert not empty.any()
    opened = knowledge_features("You have seen an open red door. You carry nothing.", None)
    assert opened[5 * n + 1 : 5 * n + 4].tolist() == [1, 0, 0]


def test_a_mediator_that_sees_knowledge_observes_the_plan_and_the_agents_knowledge():
    """sees_knowledge appends the skill in hand's features, then its knowledge features."""
    planner = ScriptedPlanner([["explore"]])
    env = MediatorEnv(
        lambda: World("ColoredDoorKey", 1, seed=0), planner, Settings(sees_knowledge=True)
    )
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE + PLAN_FEATURES + KNOWLEDGE_FEATURES,)
    assert env.observation_space.contains(obs)
    for _ in range(40):
        obs, _, terminated, truncated, _ = env.step(CARRY_ON)
        text = str(env._obs["text"])
        skill = env.core.plan[0] if env.core.plan else None
        assert obs[OBS_SIZE : OBS_SIZE + PLAN_FEATURES].tolist() == skill_features(skill).tolist()
        assert obs[OBS_SIZE + PLAN_FEATURES :].tolist() == knowledge_features(text, skill).tolist()
        if terminated or truncated:
            break
    assert obs[OBS_SIZE + PLAN_FEATURES :].any()  # exploring finds objects


def test_a_mediator_that_counts_objects_observes_how_many_the_agent_knows():
    """counts_objects appends the number of objects the knowledge text names, scaled."""
    planner = ScriptedPlanner([["explore"]])
    env = MediatorEnv(
        lambda: World("ColoredDoorKey", 1, seed=0), planner, Settings(counts_objects=True)
    )
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE + 1,) and env.observation_space.contains(obs)
    counts = set()
    for _ in range(40):
        known = len(seen_objects(str(env._obs["text"])))
        assert obs[-1] == np.float32(known / OBJECTS_KNOWN_SCALE)
        counts.add(known)
        obs, _, terminated, truncated, _ = env.step(CARRY_ON)
        if terminated or truncated:
            break
    assert len(counts) >= 2  # exploring finds objects, and the feature follows


class SureOrNot(Planner):
    """Plans with the confidences it is given, in order (None: a planner that cannot say)."""

    observations = ("text",)

    def __init__(self, answers: list[tuple[list[str], float | None]]) -> None:
        self.answers = answers
        self.calls = 0

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        skills, confidence = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return Plan(skills=list(skills), confidence=confidence)


def test_a_mediator_that_sees_confidence_observes_how_sure_the_planner_was():
    """sees_confidence appends the probability the last query gave the plan in hand: 0 with
    no plan, 1 for a planner that cannot say, and the planner's own figure otherwise."""
    planner = SureOrNot([(["explore"], 0.3), (["explore"], 0.9), (["explore"], None)])
    env = MediatorEnv(
        lambda: World("SimpleDoorKey", 1, seed=0), planner, Settings(sees_confidence=True)
    )
    obs, _ = env.reset(seed=3)
    assert obs.shape == (OBS_SIZE + 1,) and env.observation_space.contains(obs)
    assert obs[-1] == 0  # no plan yet
    obs, *_ = env.step(CARRY_ON)  # the forced first query: a doubtful plan
    assert obs[-1] == np.float32(0.3)
    obs, *_ = env.step(ASK)  # asked again: the same plan, now given with 0.9
    assert obs[-1] == np.float32(0.9)
    obs, *_ = env.step(ASK)  # a planner that cannot say counts as sure
    assert obs[-1] == 1.0 and planner.calls == 3
    env.core.plan = []  # the plan finished: the feature stays what the last query said
    assert env.core.features(env._obs)[-1] == 1.0


class PrivilegedRecorder(Planner):
    """Follows the oracle's plan; records the privileged entries each query was given."""

    observations = ("text", "oracle_plan", "feasible_skills")

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        seen = (str(observation["oracle_plan"]), str(observation["feasible_skills"]))
        self.seen.append(seen)
        return Plan(skills=seen[0].split("\n") if seen[0] else [])


def test_the_planners_privileged_entries_are_fetched_only_for_queries_and_are_current():
    planner = PrivilegedRecorder()
    env = MediatorEnv(lambda: World("KeyInBox", 1, seed=0), planner, Settings(lam=LAM))
    fetched: list[list[str]] = []
    step = env.world.step

    def recording_step(*args: Any, observations: Any = None, **kwargs: Any) -> Any:
        fetched.append(list(observations or []))
        return step(*args, observations=observations, **kwargs)

    env.world.step = recording_step  # type: ignore[method-assign]
    env.reset(seed=5)
    rng = np.random.default_rng(0)
    skills, queried = [], []
    for _ in range(25):
        _, _, terminated, truncated, info = env.step(int(rng.random() < 0.3))
        skills.append(info["skill"])
        queried.append(info["queried"])
        if terminated or truncated:
            break
    with_privileged = [names for names in fetched if "oracle_plan" in names]
    assert len(with_privileged) == sum(queried) - 1  # the reset brought the first query's
    assert all("oracle_plan" not in names for names in fetched if "reward" in names)

    # The same skills in a world that sends every entry at every step: each query saw the
    # entries as they were at its step.
    eager = World("KeyInBox", 1, seed=0)
    names = ["oracle_plan", "feasible_skills"]
    batch = eager.reset(seed=5, observations=names)
    expected = []
    for skill, was_queried in zip(skills, queried, strict=True):
        if was_queried:
            expected.append((str(batch["oracle_plan"][0]), str(batch["feasible_skills"][0])))
        batch = eager.step(skill=[skill], observations=names)
    assert planner.seen == expected and len(expected) >= 3


def run_to_cap(sees_time: bool) -> tuple[list[np.ndarray], bool, bool]:
    """Five carry-on steps at a cap of 5 (the plan never ends); the observations and how the
    episode ended."""
    planner = SureOrNot([(["explore"] * 50, 0.6)])
    env = MediatorEnv(
        lambda: World("ColoredDoorKey", 1, seed=0),
        planner,
        Settings(sees_confidence=True, sees_time=sees_time),
        max_steps=5,
    )
    obs, _ = env.reset(seed=3)
    seen, terminated, truncated = [obs], False, False
    while not (terminated or truncated):
        obs, _, terminated, truncated, _ = env.step(CARRY_ON)
        seen.append(obs)
    return seen, terminated, truncated


def test_a_mediator_that_sees_time_observes_its_clock_and_the_cap_ends_the_task():
    """sees_time adds steps taken / cap before the confidence (which stays last, where the
    until-confident rule reads it); at the cap the episode terminates instead of truncating,
    so PPO does not bootstrap past a limit the mediator can see coming."""
    seen, terminated, truncated = run_to_cap(sees_time=True)
    assert len(seen) == 6 and all(obs.shape == (OBS_SIZE + 2,) for obs in seen)
    assert [float(obs[-2]) for obs in seen] == pytest.approx([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    assert all(obs[-1] == np.float32(0.6) for obs in seen[1:])
    assert terminated and not truncated
    blind, terminated, truncated = run_to_cap(sees_time=False)
    assert all(obs.shape == (OBS_SIZE + 1,) for obs in blind)
    assert truncated and not terminated
    # the clock is the only difference between the two observations
    assert all(np.array_equal(np.delete(a, -2), b) for a, b in zip(seen, blind, strict=True))
