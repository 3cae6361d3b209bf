"""The Housekeep demonstrator (LLM-Personalize's scripted planner): plans cut short still solve
procedural houses, and it solves real validation episodes."""

from __future__ import annotations

from llmrl.planners.base import make_planner
from llmrl.simulator.envs.base import step_skill
from llmrl.simulator.envs.housekeep import HousekeepEnv

EPISODES_PER_VAL_SCENE = 12


def test_demonstrator_plans_can_be_cut_short_and_still_solve():
    planner = make_planner("housekeep-demonstrator", max_plan_length=2)
    env = HousekeepEnv(max_steps=200)
    obs, _ = env.reset(seed=11)
    queries = 0
    while not (plan := planner.plan(obs)).done:
        queries += 1
        assert 1 <= len(plan.skills) <= 2
        for skill in plan.skills:
            obs, _, _, _, info = step_skill(env, skill)
            assert info["skill_success"], (skill, info["message"])
    assert float(obs["success_rate"]) == 100.0
    assert queries >= int(obs["step"]) / 2


def test_demonstrator_solves_real_validation_episodes(data_dir):
    planner = make_planner("housekeep-demonstrator")
    rates = []
    for scene in ("Ihlen_1_int", "Merom_1_int"):
        env = HousekeepEnv(data_dir=data_dir, scene=scene)
        for episode in range(0, 200, 200 // EPISODES_PER_VAL_SCENE)[:EPISODES_PER_VAL_SCENE]:
            obs, _ = env.reset(seed=episode, options={"episode": episode})
            assert obs["text"].count("Explored rooms: none.") == 1
            while not (plan := planner.plan(obs)).done:
                for skill in plan.skills:
                    obs, _, terminated, truncated, info = step_skill(env, skill)
                    assert info["skill_success"], (scene, episode, skill, info["message"])
                    assert not (terminated or truncated)
            rates.append(float(obs["success_rate"]))
            assert int(obs["success"]) == 1
            assert 0.5 < float(obs["soft_score"]) <= 1.0
    assert rates == [100.0] * (2 * EPISODES_PER_VAL_SCENE)


def test_asked_at_every_step_the_demonstrator_plays_the_same_episode_with_a_plan_per_state():
    from llmrl.recipes.llm_personalize.demonstrations import demonstration_episode
    from llmrl.recipes.llm_personalize.prompts import parse_plan

    kwargs = {"max_plan_length": 4}
    whole = demonstration_episode(seed=3, planner_kwargs=kwargs)
    every = demonstration_episode(seed=3, planner_kwargs=kwargs, query_every_step=True)
    assert [s.skill for s in every.steps] == [s.skill for s in whole.steps]
    assert every.metrics["success_rate"] == whole.metrics["success_rate"] == 100.0
    # one logged plan per step (and the final "mission complete"), each starting with the
    # step's skill; plans are still whole (up to 4 skills), not the one skill played
    assert len(every.llm_calls) == len(every.steps) + 1 > len(whole.llm_calls)
    for call, step in zip(every.llm_calls, every.steps, strict=False):
        assert parse_plan(call.response).skills[0] == step.skill
    assert max(len(parse_plan(c.response).skills) for c in every.llm_calls) == 4
    assert every.llm_calls[-1].response == "1. mission complete"
