"""The fixed asking rules decide as they say: news-or-skill-end asks exactly when the agent's
knowledge changes or its skill ends; forced-only never asks by choice."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from llmrl.agents import EpisodeJob, RolloutResources, make_driver
from llmrl.planners.base import Plan, Planner
from llmrl.recipes.when2ask.asking import make_ask_policy
from llmrl.recipes.when2ask.driver import MediatorDriver
from llmrl.recipes.when2ask.mediator import MediatorCore
from llmrl.recipes.when2ask.mediator_settings import MediatorSettings
from llmrl.simulator.envs.base import SkillStatus
from llmrl.simulator.world import World

NOTHING = "You have seen nothing yet. You carry nothing."
KEY = "You have seen a red key. You carry nothing."
KEY_DOOR = "You have seen a red key, a locked red door. You carry nothing."
CARRY = "You have seen a locked red door. You carry a red key."
RUN, DONE, NONE = SkillStatus.RUNNING, SkillStatus.DONE, SkillStatus.NONE

# A hand-built episode: (knowledge text, status of the last skill step, rule asks?).
EPISODE = [
    (NOTHING, NONE, True),  # first step: nothing known at the last query (there was none)
    (NOTHING, RUN, False),
    (KEY, RUN, True),  # a key seen
    (KEY, RUN, False),
    (KEY, DONE, True),  # explore ended
    (KEY, RUN, False),
    (KEY, RUN, False),
    (KEY_DOOR, RUN, True),  # a door seen while going to the key
    (KEY_DOOR, DONE, True),  # arrived at the key (and the knowledge is what it was)
    (CARRY, DONE, True),  # picked it up: knowledge changed and the skill ended
    (CARRY, RUN, False),
    (CARRY, RUN, False),
]


class LongPlans(Planner):
    """Always the same long plan, so no query is ever forced after the first."""

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        return Plan(skills=["explore"] * 50)


def observation(text: str, status: SkillStatus, t: int) -> dict[str, Any]:
    image = np.zeros((3, 3, 3), np.uint8)
    image[0, 0, 0] = t % 3  # the view changes now and then; the rule must not care
    return {"text": np.str_(text), "skill_status": int(status), "image": image}


def run_episode(method: str) -> tuple[list[bool], list[bool]]:
    driver = MediatorDriver(MediatorCore(LongPlans()), make_ask_policy({"method": method}))
    driver.reset()
    asked, queried = [], []
    for t, (text, status, _) in enumerate(EPISODE):
        decision = driver.act(observation(text, status, t), t)
        asked.append(bool(decision.info["asked"]))
        queried.append(bool(decision.info["queried"]))
    return asked, queried


def test_news_or_skill_end_asks_exactly_on_knowledge_changes_and_skill_ends():
    asked, queried = run_episode("news-or-skill-end")
    assert asked == [expected for _, _, expected in EPISODE]
    assert queried == asked  # with plans this long nothing else forces a query


def test_forced_only_never_asks_and_is_queried_once():
    asked, queried = run_episode("forced-only")
    assert not any(asked)
    assert queried == [True] + [False] * (len(EPISODE) - 1)


class Scripted(Planner):
    """Plans A, B, B, then B for good: a planner that contradicted itself once."""

    def __init__(self) -> None:
        self.answers = [["explore"] * 50, ["go to the red key"] * 50]

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        return Plan(skills=self.answers[min(t, 1)])


def asks_over_six_steps(driver: MediatorDriver) -> list[bool]:
    """Whether the driver's rule asked at each of six steps with nothing new to see."""
    driver.reset()
    asked = []
    for t in range(6):
        decision = driver.act(observation(NOTHING, RUN if t else NONE, t), t)
        asked.append(bool(decision.info["asked"]))
    return asked


def test_until_confirmed_asks_until_a_query_returns_the_plan_in_hand():
    rule = make_ask_policy({"method": "until-confirmed"})
    asked = asks_over_six_steps(MediatorDriver(MediatorCore(Scripted()), rule))
    # t=0: no plan yet; t=1: B disagrees with A; t=2: B again, confirmed; then it follows B
    assert asked == [True, True, True, False, False, False]


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="unknown asking method 'sometimes'"):
        make_ask_policy({"method": "sometimes"})


def test_driver_reseeds_a_noisy_planner_per_episode():
    """Two episodes of the same policy spec get different planner draws."""
    policy = {
        "kind": "when2ask",
        "ask": {"method": "always"},
        "planner": {"name": "noisy-oracle", "kwargs": {"p": 0.5, "seed": 0}},
    }
    build = make_driver
    resources = RolloutResources()

    def draws(seed: int) -> list[float]:
        job = EpisodeJob(
            run_id="r", episode_id="p/0", env="SimpleDoorKey", seed=seed, policy=policy
        )
        driver = build(policy, resources, job)
        return [float(driver.core.planner.rng.random()) for _ in range(3)]

    assert draws(1) != draws(2)
    assert draws(1) == draws(1)


class Confirming(Planner):
    """Answers A then B until the knowledge changes at t=4; from then on C twice, then D."""

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        answers = {0: ["explore"], 1: ["go to the red key"], 2: ["go to the red key"]}
        if t < 4:
            return Plan(skills=answers.get(t, ["go to the red key"]))
        return Plan(skills=["pick up the red key"] if t < 6 else ["go to the red door"])


def test_news_until_confirmed_asks_on_news_and_then_until_confirmed():
    rule = make_ask_policy({"method": "news-until-confirmed"})
    driver = MediatorDriver(MediatorCore(Confirming()), rule)
    driver.reset()
    asked = []
    for t, text in enumerate([NOTHING] * 4 + [KEY] * 4):
        decision = driver.act(observation(text, RUN if t else NONE, t), t)
        asked.append(bool(decision.info["asked"]))
    # t=0-2: A, then B disagrees, then B confirmed; t=3 follows B; t=4: a key seen, so it asks
    # (C disagrees), t=5: C again, confirmed; then it follows C though D would come back.
    assert asked == [True, True, True, False, True, True, False, False]


class Doubtful(Planner):
    """Answers with confidence 0.2, 0.4, then 0.8 for good: sure only at the third query."""

    def __init__(self) -> None:
        self.calls = 0

    def plan(self, observation: dict[str, Any], t: int = 0) -> Plan:
        confidence = (0.2, 0.4, 0.8)[min(self.calls, 2)]
        self.calls += 1
        return Plan(skills=["explore"] * 50, confidence=confidence)


def test_until_confident_asks_until_the_planner_is_sure_enough():
    rule = make_ask_policy({"method": "until-confident", "threshold": 0.5})
    asked = asks_over_six_steps(
        MediatorDriver(MediatorCore(Doubtful(), MediatorSettings(sees_confidence=True)), rule)
    )
    # t=0: no plan (confidence 0); t=1: 0.2; t=2: 0.4; t=3 on: 0.8, so it follows the plan
    assert asked == [True, True, True, False, False, False]
    with pytest.raises(ValueError, match="threshold must be in"):
        make_ask_policy({"method": "until-confident", "threshold": 0})


def test_a_driver_refuses_until_confident_without_the_confidence_feature():
    """Without the feature the rule would read another one; the spec is refused by its key."""
    build = make_driver
    policy = {"kind": "when2ask", "ask": {"method": "until-confident"}, "planner": "oracle"}
    job = EpisodeJob(run_id="r", episode_id="p/0", env="SimpleDoorKey", seed=0, policy=policy)
    with pytest.raises(ValueError, match=r"policy\.sees_confidence"):
        build(policy, RolloutResources(), job)
    sure = {**policy, "sees_confidence": True}
    assert build(sure, RolloutResources(), job).core.sees_confidence


class CountingWorld:
    """A real world that notes which entries each reset or step asked for."""

    def __init__(self, world: Any) -> None:
        self.world = world
        self.requests: list[tuple[str, set[str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.world, name)

    def reset(self, **kwargs: Any) -> Any:
        self.requests.append(("reset", set(kwargs.get("observations") or ())))
        return self.world.reset(**kwargs)

    def step(self, **kwargs: Any) -> Any:
        kind = "look" if kwargs.get("active") is not None else "step"
        self.requests.append((kind, set(kwargs.get("observations") or ())))
        return self.world.step(**kwargs)


def play_counted(method: str, entries: str = "at_queries") -> tuple[Any, list[Any]]:
    """One noisy-oracle episode of `method` on SimpleDoorKey, and what its world was asked
    (`entries`: when the planner's entries are read)."""
    from llmrl.agents import run_episode
    from llmrl.simulator.client import make_world

    policy = {
        "kind": "when2ask",
        "ask": {"method": method},
        "planner": {"name": "noisy-oracle", "kwargs": {"p": 0.3, "seed": 0}},
        "planner_entries": entries,
    }
    worlds: list[CountingWorld] = []

    def counting_world(env: str, **kwargs: Any) -> CountingWorld:
        worlds.append(CountingWorld(make_world(env, **kwargs)))
        return worlds[-1]

    job = EpisodeJob("r", "p/0", "SimpleDoorKey", seed=3, policy=policy, max_steps=40)
    resources = RolloutResources(world_factory=counting_world)
    try:
        record = run_episode(job, resources)
    finally:
        resources.close()
    return record, worlds[0].requests


@pytest.mark.parametrize("method", ["news-or-skill-end", "forced-only"])
def test_the_planners_privileged_entries_are_read_only_at_its_queries(method):
    record, requests = play_counted(method)
    eager, eager_requests = play_counted(method, "every_step")
    privileged = {"oracle_plan", "feasible_skills"}
    # the same episode, step for step, as when every step asked for everything
    assert [(s.skill, s.info) for s in record.steps] == [(s.skill, s.info) for s in eager.steps]
    assert record.success == eager.success and record.length == eager.length
    assert all(privileged <= names for kind, names in eager_requests if kind != "look")
    # now: at the reset, then once at each later query, never with a step
    assert requests[0][0] == "reset" and privileged <= requests[0][1]
    looks = [names for kind, names in requests if kind == "look"]
    later_queries = sum(s.info["queried"] for s in record.steps[1:])
    assert len(looks) == later_queries > 0
    assert all(names == privileged for names in looks)
    assert not any(privileged & names for kind, names in requests[1:] if kind != "look")


def test_always_ask_reads_the_planners_entries_with_every_step():
    """A query every step: an extra read per step would only cost, so none is made."""
    record, requests = play_counted("always")
    eager, _ = play_counted("always", "every_step")
    assert [(s.skill, s.info) for s in record.steps] == [(s.skill, s.info) for s in eager.steps]
    assert not any(kind == "look" for kind, _ in requests)
    assert all({"oracle_plan", "feasible_skills"} <= names for _, names in requests)


def test_an_unknown_planner_entries_setting_is_named():
    policy = {
        "kind": "when2ask",
        "ask": {"method": "forced-only"},
        "planner": "oracle",
        "planner_entries": "sometimes",
    }
    job = EpisodeJob("r", "p/0", "SimpleDoorKey", seed=0, policy=policy)
    expected = r"policy\.planner_entries: Input should be 'at_queries' or 'every_step'"
    with pytest.raises(ValueError, match=expected):
        make_driver(policy, RolloutResources(), job)


def test_a_driver_that_sees_time_runs_its_clock_to_the_episode_jobs_cap():
    """Evaluation's mediator observes the same clock as training's: steps taken / the job's
    max_steps, the cap the recipe trains with."""
    build = make_driver
    policy = {"kind": "when2ask", "ask": {"method": "forced-only"}, "planner": "oracle"}
    job = EpisodeJob(
        run_id="r", episode_id="p/0", env="SimpleDoorKey", seed=0, policy=policy, max_steps=8
    )
    assert build(policy, RolloutResources(), job).core.step_cap is None
    driver = build({**policy, "sees_time": True}, RolloutResources(), job)
    assert driver.core.step_cap == 8
    no_cap = EpisodeJob(run_id="r", episode_id="p/1", env="SimpleDoorKey", seed=0, policy=policy)
    with pytest.raises(ValueError, match=r"policy\.sees_time: needs the episode job's max_steps"):
        build({**policy, "sees_time": True}, RolloutResources(), no_cap)
    clock: list[float] = []
    forced_only = driver.ask_policy

    class Recording:
        def ask(self, features: np.ndarray) -> bool:
            clock.append(float(features[-1]))
            return forced_only.ask(features)

    driver.ask_policy = Recording()
    world = World("SimpleDoorKey", 1, seed=0)
    names = list(driver.core.observations)
    obs = {k: v[0] for k, v in world.reset(seed=1, observations=names).items()}
    for t in range(4):
        decision = driver.act(obs, t)
        obs = {k: v[0] for k, v in world.step(skill=[decision.skill], observations=names).items()}
    assert clock == pytest.approx([0, 1 / 8, 2 / 8, 3 / 8])
