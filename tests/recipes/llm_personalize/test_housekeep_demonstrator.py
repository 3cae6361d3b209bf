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
