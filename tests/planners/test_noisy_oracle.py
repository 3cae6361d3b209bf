"""The noisy oracle errs at rate p per query (seeded), and only with plausible wrong plans."""

from __future__ import annotations

from typing import Any

import pytest

from llmrl.planners.base import make_planner, reseeded
from llmrl.planners.noisy_oracle import carry_through, distractors, seen_objects, wrong_skills
from llmrl.simulator.envs.when2ask.skills import parse_skill
from llmrl.simulator.world import World

OBSERVATIONS = ["text", "oracle_plan", "feasible_skills"]


def observations(env: str, seeds: range) -> list[dict[str, Any]]:
    """First observations of real episodes, as one env's dict of entries."""
    world = World(env, 1, seed=0)
    try:
        found = []
        for seed in seeds:
            batch = world.reset(seed=seed, observations=OBSERVATIONS)
            found.append({k: v[0] for k, v in batch.items()})
        return found
    finally:
        world.close()


def oracle_skills(obs: dict[str, Any]) -> list[str]:
    return [s for s in str(obs["oracle_plan"]).split("\n") if s]


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_error_rate_matches_p_over_many_queries(p):
    planner = make_planner("noisy-oracle", p=p, seed=7)
    obs = observations("ColoredDoorKey", range(5))
    n = 3000
    wrong = 0
    for i in range(n):
        o = obs[i % len(obs)]
        plan = planner.plan(o)
        wrong += plan.skills != oracle_skills(o)
        assert plan.erred == (plan.skills != oracle_skills(o))  # it knows its own errors
    assert planner.queries == n and planner.errors == wrong  # every error changes the plan
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(wrong / n - p) < 4 * sigma


def test_same_seed_same_errors_and_reseeded_streams_differ():
    obs = observations("SimpleDoorKey", range(3))

    def plans(spec) -> list[list[str]]:
        planner = make_planner(spec)
        return [planner.plan(obs[i % 3]).skills for i in range(200)]

    spec = {"name": "noisy-oracle", "kwargs": {"p": 0.5, "seed": 3}}
    assert plans(spec) == plans(spec)
    assert plans(reseeded(spec, 1)) != plans(reseeded(spec, 2))
    assert reseeded("oracle", 5) == "oracle"  # planners that draw nothing are left alone


def test_wrong_plans_are_feasible_skills_other_than_the_right_one():
    planner = make_planner("noisy-oracle", p=1.0, seed=0)
    for obs in observations("RandomBoxKey", range(20)):
        right = oracle_skills(obs)
        plan = planner.plan(obs)
        feasible = [s for s in str(obs["feasible_skills"]).split("\n") if s]
        assert plan.skills[0] != right[0]
        assert len(plan.skills) == len(right)
        if len(feasible) > 1:
            assert plan.skills[0] in feasible
        for skill in plan.skills:
            parse_skill(skill)  # every skill is well formed


def test_mutations_follow_the_issue():
    text = "You have seen a red key, a blue key, a locked red door. You carry nothing."
    seen = seen_objects(text)
    assert len(seen) == 3
    options = wrong_skills("pick up the red key", seen)
    assert options["wrong-colour key"] == ["pick up the blue key"]  # the other key seen
    assert options["wrong kind"] == ["go to the red key"]
    assert options["another object"] == ["pick up the blue key"]  # doors cannot be picked up
    assert wrong_skills("go to the red door", seen)["another object"] == [
        "go to the red key",
        "go to the blue key",
    ]
    assert wrong_skills("go to the goal", seen)["wrong kind"] == ["explore"]
    # A wrong key is followed through the plan; the door stays the door.
    plan = ["go to the red key", "pick up the red key", "go to the red door"]
    assert carry_through(plan, "go to the blue key") == [
        "go to the blue key",
        "pick up the blue key",
        "go to the red door",
    ]


def test_bad_error_rate_is_rejected():
    with pytest.raises(ValueError, match="error rate p must be in"):
        make_planner("noisy-oracle", p=1.5)


def test_a_seed_that_is_no_integer_is_refused_by_name():
    with pytest.raises(ValueError, match=r"planner\.kwargs\.seed: expected an integer"):
        reseeded({"name": "noisy-oracle", "kwargs": {"seed": "x"}}, 1)


def test_bad_noise_mode_is_rejected_by_name():
    with pytest.raises(ValueError, match="mode must be one of fresh, persistent"):
        make_planner("noisy-oracle", p=0.2, mode="sometimes")


def distinct_inputs(env: str, seeds: range) -> list[dict[str, Any]]:
    """Real first observations, one per distinct planner input (knowledge, feasible skills)."""
    found = {(str(o["text"]), str(o["feasible_skills"])): o for o in observations(env, seeds)}
    return list(found.values())


def test_persistent_mode_answers_the_same_input_with_the_same_plan():
    planner = make_planner("noisy-oracle", p=0.5, seed=4, mode="persistent")
    obs = distinct_inputs("ColoredDoorKey", range(12))
    assert len(obs) >= 4
    first = [planner.plan(o).skills for o in obs]
    again = [planner.plan(o).skills for o in reversed(obs)][::-1]  # order does not matter
    assert first == again
    # A fresh planner with the same seed gives the same answers; a new episode draws anew.
    twin = make_planner("noisy-oracle", p=0.5, seed=4, mode="persistent")
    assert [twin.plan(o).skills for o in obs] == first
    answers = set()
    for _ in range(20):
        planner.reset()
        answers.add(tuple(planner.plan(obs[0]).skills))
    assert len(answers) > 1


def test_fresh_mode_may_answer_the_same_input_differently():
    planner = make_planner("noisy-oracle", p=0.5, seed=4)
    obs = observations("ColoredDoorKey", range(1))[0]
    assert len({tuple(planner.plan(obs).skills) for _ in range(20)}) > 1


@pytest.mark.parametrize("p", [0.1, 0.3])
def test_persistent_error_rate_matches_p_over_distinct_inputs(p):
    planner = make_planner("noisy-oracle", p=p, seed=11, mode="persistent")
    obs = distinct_inputs("RandomBoxKey", range(30)) + distinct_inputs("KeyInBox", range(30))
    n, wrong = 0, 0
    while n < 3000:
        planner.reset()  # a new episode: every (episode, input) pair is drawn once
        for o in obs:
            wrong += planner.plan(o).skills != oracle_skills(o)
            n += 1
    assert planner.errors == wrong
    sigma = (p * (1 - p) / n) ** 0.5
    assert abs(wrong / n - p) < 4 * sigma


def test_distractors_mode_errs_more_the_more_objects_are_known():
    """Each query errs at min(1, p x the seen objects other than the plan's); with nothing
    else seen the planner never errs."""
    p = 0.15
    planner = make_planner("noisy-oracle", p=p, seed=5, mode="distractors")
    obs = distinct_inputs("ColoredDoorKey", range(40)) + distinct_inputs("SimpleDoorKey", range(40))
    by_count: dict[int, list[dict[str, Any]]] = {}
    for o in obs:
        count = len(distractors(oracle_skills(o)[0], seen_objects(str(o["text"]))))
        by_count.setdefault(count, []).append(o)
    assert len(by_count) >= 2 and max(by_count) >= 2  # situations that differ
    for count, group in by_count.items():
        rate = min(1.0, p * count)
        first = group[0]
        assert planner.error_rate(oracle_skills(first)[0], seen_objects(str(first["text"]))) == rate
        n = 1500
        wrong = sum(
            planner.plan(group[i % len(group)]).skills != oracle_skills(group[i % len(group)])
            for i in range(n)
        )
        sigma = max(rate * (1 - rate) / n, 1e-12) ** 0.5
        assert abs(wrong / n - rate) < 4 * sigma + 1e-9, (count, wrong / n, rate)


def test_distractors_are_the_seen_objects_but_the_plans_own():
    seen = seen_objects("You have seen a red key, a blue key, a locked red door, the goal.")
    assert distractors("pick up the red key", seen) == [seen[1], seen[2], seen[3]]
    assert distractors("explore", seen) == seen  # exploring acts on nothing seen
    assert distractors("explore", []) == []
