"""The Housekeep environment: partial observability, skills, limits, spaces, procedural houses."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env
from support.housekeep import tiny_house

from llmrl.common.registry import gym_id, registry
from llmrl.planners.base import make_planner
from llmrl.simulator.envs.base import InvalidSkillError, SkillStatus, step_skill
from llmrl.simulator.envs.housekeep import HousekeepEnv, KnownHouse, generate_house
from llmrl.simulator.envs.housekeep.skills import parse_skill


def tiny_env(**kwargs) -> tuple[HousekeepEnv, dict]:
    env = HousekeepEnv(**kwargs)
    obs, _ = env.reset(seed=0, options={"house": tiny_house()})
    return env, obs


def test_registered_and_made_through_gymnasium():
    assert registry.get_env("Housekeep") is HousekeepEnv
    env = gym.make(gym_id("Housekeep"))
    obs, _ = env.reset(seed=3)
    assert "Rooms of the house:" in obs["text"]


def test_gymnasium_check_env_on_procedural_houses():
    check_env(HousekeepEnv(), skip_render_check=True)


def test_partial_observability_rooms_reveal_receptacles_and_objects():
    env, obs = tiny_env()
    known = KnownHouse.from_json(obs["known_house"])
    assert known.rooms == ["kitchen_0", "bedroom_0"]
    assert known.receptacles == {} and known.objects == {}
    assert "No receptacles found yet." in obs["text"] and "mug_1" not in obs["text"]
    assert int(obs["receptacles_found"]) == 0 and int(obs["objects_found"]) == 0

    obs, _, _, _, _ = step_skill(env, "go to room kitchen_0")
    known = KnownHouse.from_json(obs["known_house"])
    assert set(known.receptacles) == {"counter_1", "fridge_1"}
    assert known.objects == {"book_1": "counter_1", "apple_1": "fridge_1"}
    assert "- in kitchen_0: counter_1 (book_1); fridge_1 (apple_1)" in obs["text"]
    assert "bed_1" not in obs["text"] and "mug_1" not in obs["text"]  # bedroom unexplored
    # objects and receptacles not found yet cannot be used, even though they exist
    obs, _, _, _, info = step_skill(env, "go to mug_1")
    assert info["skill_status"] == SkillStatus.INFEASIBLE
    assert "not found" in info["message"]


def test_look_mode_objects_are_seen_only_on_looking():
    env, _ = tiny_env(observe_objects_on_entry=False)
    obs, reward, _, _, _ = step_skill(env, "go to room bedroom_0")
    assert reward == 2.0  # two receptacles, no objects yet
    assert "bed_1 (not looked at yet)" in obs["text"] and "mug_1" not in obs["text"]
    _, _, _, _, info = step_skill(env, "look at counter_1")  # a receptacle not found yet
    assert info["skill_status"] == SkillStatus.INFEASIBLE
    obs, reward, _, _, _ = step_skill(env, "look at bed_1")
    assert reward == 1.0 and "bed_1 (mug_1)" in obs["text"]
    step_skill(env, "go to room kitchen_0")
    _, _, _, _, info = step_skill(env, "look at bed_1")  # bed_1 is in another room
    assert (
        info["skill_status"] == SkillStatus.INFEASIBLE and "go to room bedroom_0" in info["message"]
    )


@pytest.mark.parametrize("bad", ["", "   ", "fly to the moon", "go", "place mug_1", "pick mug_1"])
def test_malformed_skills_raise_with_the_list_of_skills(bad):
    env, _ = tiny_env()
    with pytest.raises(InvalidSkillError) as error:
        env.check_skill(bad)
    assert "place <object> on <receptacle>" in str(error.value)
    with pytest.raises(InvalidSkillError):
        step_skill(env, bad)
    assert env.steps == 0  # nothing was stepped


def test_skill_phrasing_is_forgiving_about_case_articles_and_spaces():
    assert parse_skill("Go to the Bottom Cabinet 2.").phrase() == "go to bottom_cabinet_2"
    assert parse_skill("place mug_1 on counter_1").args == ("mug_1", "counter_1")
    assert parse_skill("go to room kitchen_0").verb == "go_to_room"


def test_infeasible_skills_are_failed_steps_with_reasons():
    env, _ = tiny_env(max_steps=50)

    def expect_failure(skill: str, reason: str) -> None:
        before = env.steps
        obs, reward, _, _, info = step_skill(env, skill)
        assert info["skill_status"] == SkillStatus.INFEASIBLE and int(obs["skill_status"]) == 3
        assert reason in info["message"], (skill, info["message"])
        assert env.steps == before + 1 and reward == 0.0
        assert f"Last action: {skill} (failed:" in obs["text"]

    expect_failure("go to room garage_0", "there is no room garage_0")
    expect_failure("pick up book_1", "not found")
    step_skill(env, "go to room kitchen_0")
    expect_failure("pick up book_1", "go to book_1 first")  # in the room, not at the counter
    expect_failure("place book_1 on counter_1", "not holding book_1")
    step_skill(env, "go to book_1")
    assert step_skill(env, "pick up book_1")[4]["skill_success"]
    step_skill(env, "go to fridge_1")
    _, _, _, _, info = step_skill(env, "pick up apple_1")  # one hand
    assert not info["skill_success"] and "hand is full" in info["message"]
    _, _, _, _, info = step_skill(env, "place book_1 on counter_1")  # not at the counter
    assert not info["skill_success"] and "go to counter_1 first" in info["message"]
    assert step_skill(env, "place book_1 on fridge_1")[4]["skill_success"]


def test_step_limit_truncates():
    env, _ = tiny_env(max_steps=3)
    results = [step_skill(env, "go to room kitchen_0") for _ in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert not any(r[2] for r in results)


def test_low_level_actions_are_the_same_skills():
    env, _ = tiny_env()
    house = env.house
    for skill in [
        "go to room bedroom_0",
        "go to bed_1",
        "go to mug_1",
        "look at shelf_1",
        "pick up mug_1",
        "place mug_1 on counter_1",
        "mission complete",
    ]:
        action = env.layout.action(parse_skill(skill), house)
        assert env.layout.skill(action, house) == skill
    obs, reward, _, _, info = env.step(
        env.layout.action(parse_skill("go to room bedroom_0"), house)
    )
    assert reward == 3.0 and info["skill_success"] and "bed_1 (mug_1)" in obs["text"]
    _, _, _, _, info = env.step(env.layout.size - 3)  # a place action naming no object here
    assert not info["skill_success"] and "names nothing" in info["message"]
    obs, _, _, _, info = env.step(env.layout.unknown_name_action)  # an unparsable plan line
    assert not info["skill_success"] and int(obs["step"]) == 3
    assert "Last action: (not a skill) (failed: that is not a skill" in obs["text"]


def test_feasible_skills_all_succeed():
    env, _ = tiny_env()
    step_skill(env, "go to room kitchen_0")
    step_skill(env, "go to book_1")
    feasible = env.feasible_skills()
    assert "pick up book_1" in feasible and "pick up apple_1" not in feasible
    for skill in feasible[:-1]:  # all but mission complete
        probe, _ = tiny_env()
        for prefix in ("go to room kitchen_0", "go to book_1"):
            step_skill(probe, prefix)
        assert step_skill(probe, skill)[4]["skill_success"], skill


def test_procedural_houses_are_seeded_and_solvable():
    assert generate_house(5).source == generate_house(5).source
    assert [o.name for o in generate_house(5).objects] == [
        o.name for o in generate_house(5).objects
    ]
    planner = make_planner("housekeep-demonstrator")
    for on_entry in (True, False):
        env = HousekeepEnv(observe_objects_on_entry=on_entry, max_steps=200)
        for seed in range(5):
            obs, _ = env.reset(seed=seed)
            oracle = obs["oracle_plan"].split("\n")
            while not (plan := planner.plan(obs)).done:
                for skill in plan.skills:
                    obs, _, _, _, info = step_skill(env, skill)
                    assert info["skill_success"], (skill, info["message"])
            assert float(obs["success_rate"]) == 100.0
            if on_entry:  # the privileged plan follows the same strategy
                assert int(obs["step"]) == len(oracle)
            else:  # ... but knows the receptacles of unexplored rooms: no second visit
                assert len(oracle) < int(obs["step"]) <= len(oracle) + len(env.house.rooms)


def test_bad_settings_name_the_setting(tmp_path):
    with pytest.raises(FileNotFoundError, match="data_dir"):
        HousekeepEnv(data_dir=tmp_path)
    with pytest.raises(ValueError, match="reward_weights"):
        HousekeepEnv(reward_weights={"speed": 1.0})
    with pytest.raises(ValueError, match="max_steps"):
        HousekeepEnv(max_steps=0)
    with pytest.raises(ValueError, match="max_objects"):
        HousekeepEnv(max_objects=2).reset(seed=0, options={"house": tiny_house()})
