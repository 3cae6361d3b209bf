"""An LLM planner with a temperature samples its plan (seeded); at temperature 0 it is greedy."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from support.tiny_llm import TINY_MODEL, tiny_gateway_settings

from llmrl.llm_gateway.client import connect
from llmrl.planners.base import make_planner
from llmrl.simulator.world import World


@pytest.fixture(scope="module")
def observation():
    """A first observation with several feasible skills (explore and some go-tos)."""
    world = World("ColoredDoorKey", 1, seed=0)
    try:
        for seed in range(50):
            batch = world.reset(seed=seed, observations=["text", "feasible_skills"])
            obs = {k: v[0] for k, v in batch.items()}
            if len(str(obs["feasible_skills"]).split("\n")) >= 3:
                return obs
    finally:
        world.close()
    raise AssertionError("no seed in 0..49 offers three feasible skills at the start")


def plans(client, observation, temperature: float, seed: int, n: int = 24) -> list[str]:
    planner = make_planner(
        "when2ask-llm",
        llm=client,
        model=TINY_MODEL,
        mode="score",
        temperature=temperature,
        seed=seed,
    )
    return [planner.plan(observation).skills[0] for _ in range(n)]


def test_sampling_varies_the_plan_reproducibly(tiny_model_dir, observation):
    client = connect(**tiny_gateway_settings(tiny_model_dir, cache="none"))
    try:
        feasible = str(observation["feasible_skills"]).split("\n")
        greedy = plans(client, observation, 0.0, seed=0)
        assert len(set(greedy)) == 1 and greedy[0] in feasible
        hot = plans(client, observation, 10.0, seed=1)
        assert set(hot) <= set(feasible) and len(Counter(hot)) >= 2  # asking again can change it
        assert plans(client, observation, 10.0, seed=1) == hot  # same seed, same draws
    finally:
        client.close()


def test_bad_temperature_is_rejected():
    with pytest.raises(ValueError, match="temperature must be in"):
        make_planner("when2ask-llm", llm=None, temperature=-1.0)


def test_sampling_when_every_candidate_is_impossible_still_chooses():
    """Log-probabilities of -inf for all candidates give no distribution: the planner falls
    back to the first best instead of failing the episode on NaN probabilities."""
    planner = make_planner("when2ask-llm", llm=None, temperature=1.0)
    assert planner._choose([float("-inf")] * 3) == (0, None)  # no distribution: no confidence
    assert planner._choose([float("-inf"), -2.0, float("-inf")]) == (1, 1.0)


def softmax(scores: list[float], temperature: float) -> np.ndarray:
    logits = np.asarray(scores) / temperature
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0])
def test_each_plan_carries_the_probability_the_planner_gave_it(temperature):
    """A plan's confidence is the softmax probability of the skill drawn (at T = 1 when
    greedy), so unlikely draws, where a sampling planner's errors are, read as doubtful."""
    planner = make_planner("when2ask-llm", llm=None, temperature=temperature, seed=3)
    scores = [-1.0, -1.5, -4.0]
    probs = softmax(scores, temperature or 1.0)
    draws = [planner._choose(scores) for _ in range(300)]
    for chosen, confidence in draws:
        assert confidence == pytest.approx(probs[chosen])
    if temperature == 0:
        assert {chosen for chosen, _ in draws} == {0}
    else:
        assert {chosen for chosen, _ in draws} == {0, 1, 2}  # every candidate gets drawn


def test_a_scored_plan_reports_its_confidence(tiny_model_dir, observation):
    client = connect(**tiny_gateway_settings(tiny_model_dir, cache="none"))
    try:
        planner = make_planner(
            "when2ask-llm", llm=client, model=TINY_MODEL, mode="score", temperature=2.0, seed=0
        )
        plan = planner.plan(observation)
        candidates = plan.llm_calls[0].info["candidates"]
        probs = softmax(list(candidates.values()), 2.0)
        chosen = list(candidates).index(plan.skills[0])
        assert plan.confidence == pytest.approx(probs[chosen])
        assert plan.llm_calls[0].info["confidence"] == plan.confidence
    finally:
        client.close()
