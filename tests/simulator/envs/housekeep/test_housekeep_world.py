"""Housekeep served by a simulator world (contract 2): batched skills, privileged entries."""

from __future__ import annotations

from llmrl.simulator.world import World


def test_world_steps_housekeep_skills_and_hides_privileged_entries():
    with World("Housekeep", num_envs=2, seed=0) as world:
        first = world.reset(seed=0)
        assert "text" in first and "oracle_plan" not in first and "correct_receptacles" not in first
        plans = world.reset(seed=0, observations=["oracle_plan"])["oracle_plan"]
        skills = [plan.split("\n")[0] for plan in plans]  # "go to room ..." for each house
        after = world.step(skill=skills, observations=["text", "skill_status", "rooms_explored"])
        assert after["skill_status"].tolist() == [2, 2]
        assert after["rooms_explored"].tolist() == [1, 1]
        assert all("Receptacles found" in text for text in after["text"])
        failed = world.step(skill=["pick up nothing_1", skills[1]], observations=["skill_status"])
        assert failed["skill_status"].tolist() == [3, 2]
