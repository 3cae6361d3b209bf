"""Rearrangement metrics and rewards, exact on a tiny hand-built house."""

from __future__ import annotations

import pytest
from support.housekeep import tiny_house

from llmrl.simulator.envs.base import SkillStatus, step_skill
from llmrl.simulator.envs.housekeep import HousekeepEnv, rearrangement_metrics

MUG, BOOK, APPLE = 0, 1, 2
COUNTER, FRIDGE, BED, SHELF = 0, 1, 2, 3


def test_metrics_at_start():
    house = tiny_house()
    m = rearrangement_metrics(house, house.start)
    assert (m.correct_at_start, m.misplaced_at_start, m.correctly_placed) == (1, 2, 1)
    assert m.success_rate == 0.0
    assert m.object_success == 0.0
    assert m.soft_score == pytest.approx((0.0 + 0.2) / 2)  # mug on bed, book on counter


def test_metrics_after_partial_fix_and_breaking_a_correct_object():
    house = tiny_house()
    fixed_mug = rearrangement_metrics(house, [COUNTER, COUNTER, FRIDGE], touched=[MUG])
    assert fixed_mug.success_rate == pytest.approx(50.0)
    assert fixed_mug.object_success == pytest.approx(0.5)
    assert fixed_mug.soft_score == pytest.approx((0.9 + 0.2) / 2)

    all_fixed = rearrangement_metrics(house, [COUNTER, BED, FRIDGE], touched=[MUG, BOOK])
    assert all_fixed.success_rate == 100.0
    assert all_fixed.object_success == 1.0
    assert all_fixed.soft_score == pytest.approx((0.9 + 0.6) / 2)

    # Moving the apple out of the fridge (correct -> wrong) makes the rate negative and
    # brings the apple into the objects that object success and soft score are taken over.
    broken = rearrangement_metrics(house, [BED, COUNTER, SHELF], touched=[APPLE])
    assert broken.success_rate == pytest.approx(-50.0)
    assert broken.object_success == 0.0
    assert broken.soft_score == pytest.approx((0.0 + 0.2 + 0.1) / 3)

    held = rearrangement_metrics(house, [None, COUNTER, FRIDGE], touched=[MUG])
    assert held.soft_score == pytest.approx(0.2 / 2)  # a held object scores 0
    assert held.success_rate == 0.0


def play(env: HousekeepEnv, skills: list[str]) -> list[tuple[float, dict]]:
    results = []
    for skill in skills:
        _, reward, _, _, info = step_skill(env, skill)
        results.append((reward, info))
    return results


def test_env_episode_rewards_and_metrics():
    env = HousekeepEnv()
    obs, _ = env.reset(seed=0, options={"house": tiny_house()})
    assert int(obs["misplaced_at_start"]) == 2 and int(obs["correctly_placed"]) == 1
    results = play(
        env,
        [
            "go to room kitchen_0",  # finds 2 receptacles and 2 objects (book, apple)
            "go to room bedroom_0",  # finds 2 receptacles and the mug
            "go to mug_1",
            "pick up mug_1",
            "go to counter_1",
            "place mug_1 on counter_1",  # +1 correctly placed
            "pick up book_1",
            "go to fridge_1",
            "place book_1 on fridge_1",  # still wrong
        ],
    )
    rewards = [reward for reward, _ in results]
    assert rewards == [4.0, 3.0, 0.0, 0.0, 0.0, 10.0, 0.0, 0.0, 0.0]
    final = results[-1][1]
    assert final["success_rate"] == pytest.approx(50.0)
    assert final["object_success"] == pytest.approx(0.5)
    assert final["soft_score"] == pytest.approx((0.9 + 0.0) / 2)
    # travel: start (0,-5) -> kitchen centre (1.5, 2) -> bedroom centre (10, 1) -> bed (10, 0)
    # -> counter (0, 0) -> fridge (3, 4)
    expected = (1.5**2 + 7**2) ** 0.5 + (8.5**2 + 1) ** 0.5 + 1.0 + 10.0 + 5.0
    assert final["distance"] == pytest.approx(expected)
    assert all(info["skill_status"] == SkillStatus.DONE for _, info in results)


def test_env_success_observation_and_mission_complete():
    env = HousekeepEnv()
    env.reset(seed=0, options={"house": tiny_house()})
    plan = env.oracle_plan()
    for skill in plan:
        obs, _, terminated, truncated, info = step_skill(env, skill)
        assert info["skill_success"], (skill, info["message"])
        assert not terminated and not truncated
    assert float(obs["success_rate"]) == 100.0 and int(obs["success"]) == 1
    _, _, terminated, _, info = step_skill(env, "mission complete")
    assert terminated and info["skill_status"] == SkillStatus.DONE
