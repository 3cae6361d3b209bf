"""The in-process World: batching, auto-reset, seeding, validation, sharding."""

from __future__ import annotations

import numpy as np
import pytest
from support.world_rollouts import assert_same, rollout

from llmrl.simulator.client import make_world
from llmrl.simulator.world import StepType, World, WorldError, make_env

FIRST, MID, LAST = StepType.FIRST, StepType.MID, StepType.LAST
LEFT, RIGHT, STAY = 0, 1, 2


def test_batched_entries_have_leading_dim_and_types():
    with World("SimTestCorridor", num_envs=4, seed=1) as world:
        obs = world.reset()
        assert set(obs) == {
            "position",
            "grid",
            "distance",
            "text",
            "reward",
            "discount",
            "step_type",
        }
        assert "oracle_plan" not in obs  # privileged: only on request
        assert obs["position"].shape == (4, 1) and obs["position"].dtype == np.float32
        assert obs["grid"].shape == (4, 6) and obs["grid"].dtype == np.uint8
        assert obs["text"].dtype.kind == "U" and obs["text"].shape == (4,)
        assert obs["reward"].dtype == np.float32 and obs["discount"].dtype == np.float32
        assert (obs["step_type"] == FIRST).all() and (obs["reward"] == 0).all()
        assert world.observation_space["step_type"].n == 3
        plan = world.step(np.full(4, STAY), observations=["oracle_plan", "distance"])
        assert set(plan) == {"oracle_plan", "distance"}
        assert [p.count("go right") for p in plan["oracle_plan"]] == list(plan["distance"])


def test_terminal_step_then_next_step_auto_resets_ignoring_action():
    with World("SimTestCorridor", num_envs=1, seed=0, length=3) as world:
        obs = world.reset()
        while obs["distance"][0] > 0:
            obs = world.step([RIGHT])
        # reaching the goal terminates: LAST, reward 1, discount 0
        assert obs["step_type"][0] == LAST and obs["reward"][0] == 1 and obs["discount"][0] == 0
        restarted = world.step([RIGHT])  # ignored: this step starts the next episode
        assert restarted["step_type"][0] == FIRST
        assert restarted["reward"][0] == 0 and restarted["discount"][0] == 1
        assert restarted["distance"][0] > 0  # a fresh start, not a step to the right of the goal
        assert world.step([STAY])["step_type"][0] == MID


def test_time_limit_truncation_is_last_with_discount_one():
    with World("SimTestCorridor", num_envs=2, seed=0, max_episode_steps=3) as world:
        world.reset()
        types = [world.step([LEFT, LEFT]) for _ in range(3)]
        assert [t["step_type"].tolist() for t in types] == [[MID, MID], [MID, MID], [LAST, LAST]]
        assert types[-1]["discount"].tolist() == [1.0, 1.0]
        assert world.step([LEFT, LEFT])["step_type"].tolist() == [FIRST, FIRST]


def test_first_step_without_reset_starts_episodes():
    with World("SimTestCorridor", num_envs=2, seed=5) as a, World("SimTestCorridor", 2, 5) as b:
        first = a.step([9, 9])  # ignored, even out of range, would be refused on a later step
        assert (first["step_type"] == FIRST).all()
        np.testing.assert_array_equal(first["distance"], b.reset()["distance"])


def test_same_seed_same_episodes_and_env_i_gets_seed_plus_i():
    assert_same(
        rollout(World("SimTestCorridor", 5, seed=3), 30),
        rollout(World("SimTestCorridor", 5, seed=3), 30),
    )
    four = World("SimTestCorridor", 4, seed=10).reset()["distance"]
    shifted = World("SimTestCorridor", 3, seed=11).reset()["distance"]
    np.testing.assert_array_equal(four[1:], shifted)
    starts = {tuple(World("SimTestCorridor", 8, seed=s).reset()["distance"]) for s in range(4)}
    assert len(starts) > 1  # seeds matter


def test_reset_with_seed_reproduces_the_episode_starts():
    with World("SimTestCorridor", num_envs=6) as world:
        a = world.reset(seed=42)["distance"]
        world.step(np.full(6, LEFT))
        np.testing.assert_array_equal(world.reset(seed=42)["distance"], a)


def test_sharded_world_equals_unsharded_world():
    with World("SimTestSkills", num_envs=5, seed=3, num_workers=2) as sharded:
        local = World("SimTestSkills", num_envs=5, seed=3)
        assert sharded.observation_space == local.observation_space
        assert_same(rollout(sharded, 40), rollout(local, 40))
        skills = np.array(["go to the goal", "", "go to the start", "", "go to the goal"])
        actions = np.array([0, 1, 0, 2, 0])
        assert_same([sharded.step(actions, skills)], [local.step(actions, skills)])
        # a bad skill in the second shard is refused before the first shard steps
        before = sharded.step(np.full(5, STAY), observations=["distance"])["distance"]
        with pytest.raises(WorldError, match=r"skill\[4\].*fly"):
            sharded.step(np.full(5, RIGHT), ["", "", "", "", "fly"])
        after = sharded.step(np.full(5, STAY), observations=["distance"])["distance"]
        np.testing.assert_array_equal(before, after)


def test_skills_step_through_their_controllers():
    with World("SimTestSkills", num_envs=2, seed=0, length=5) as world:
        obs = world.reset()
        for _ in range(6):
            obs = world.step(action=[STAY, STAY], skill=["go to the goal", "go to the start"])
            if obs["step_type"][0] == LAST:
                break
        assert obs["reward"][0] == 1 and obs["step_type"][0] == LAST
        assert obs["position"][1, 0] == 0  # the second env walked to the start
        assert world.step(action=[STAY, STAY], skill=["", ""])["skill_status"][1] == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"action": [0.0, 1.0, 0.0]}, "action"),
        ({"action": [True, False, True]}, "action"),
        ({"action": [0, 1]}, "action"),
        ({"action": [[0], [1], [2]]}, "action"),
        ({"action": [0, 3, 0]}, r"action\[1\]"),
        ({"action": [-1, 0, 0]}, r"action\[0\]"),
        ({"action": None}, "action"),
        ({"action": [0, 0, 0], "skill": ["go to the goal", "jump", ""]}, r"skill\[1\]"),
        ({"action": [0, 0, 0], "skill": [1, 2, 3]}, "skill"),
        ({"action": [0, 0, 0], "skill": ["", ""]}, "skill"),
        ({"skill": ["go to the goal", "", ""]}, "action"),
        ({"action": [0, 0, 0], "observations": ["nope"]}, "observations"),
        ({"action": [0, 0, 0], "active": [1, 0, 1]}, "active"),
    ],
)
def test_bad_actions_are_refused_before_any_env_steps(kwargs, field):
    with World("SimTestSkills", num_envs=3, seed=2) as world:
        start = world.reset()["distance"]
        with pytest.raises(WorldError, match=rf"^{field}: ") as info:
            world.step(**kwargs)
        assert info.value.field == field.replace("\\", "")
        np.testing.assert_array_equal(world.step([STAY] * 3)["distance"], start)


def test_skill_on_a_plain_env_and_bad_settings_are_refused():
    with (
        World("SimTestCorridor", num_envs=2) as world,
        pytest.raises(WorldError, match=r"^skill: .*no skill"),
    ):
        world.step([0, 0], skill=["go to the goal", ""])
    with pytest.raises(
        WorldError, match=r"^env: unknown env 'NoSuchEnv'; registered envs: .*SimTestCorridor"
    ):
        World("NoSuchEnv")
    with pytest.raises(WorldError, match=r"^colour: unknown setting.*length"):
        World("SimTestCorridor", colour="red")
    for name, value in [("num_envs", 0), ("num_workers", -1), ("seed", "x"), ("num_envs", 1.5)]:
        with pytest.raises(WorldError, match=f"^{name}: expected an integer"):
            World("SimTestCorridor", **{name: value})


def test_active_mask_resets_finished_envs_without_stepping_others():
    with World("SimTestCorridor", num_envs=2, seed=0, length=3, max_episode_steps=50) as world:
        obs = world.reset()
        while obs["step_type"][0] != LAST:
            obs = world.step([RIGHT if obs["step_type"][0] != LAST else STAY, LEFT])
        other_position = obs["position"][1].copy()
        restarted = world.step(active=[True, False])
        assert restarted["step_type"].tolist() == [FIRST, obs["step_type"][1]]
        np.testing.assert_array_equal(restarted["position"][1], other_position)
        assert world.step([STAY, STAY])["step_type"].tolist() == [MID, MID]


def test_make_world_without_address_is_in_process():
    with make_world("SimTestCorridor", num_envs=2, seed=1) as world:
        assert isinstance(world, World) and world.num_envs == 2
        with pytest.raises(WorldError, match="closed"):
            world.close() or world.step([0, 0])


def test_stdout_stays_clean_in_process_and_in_workers(capfd):
    with World("SimTestCorridor", 2, seed=0) as local, World("SimTestCorridor", 2, 0, 2) as sharded:
        for world in (local, sharded):
            world.reset()
            for _ in range(15):  # episodes end and auto-reset
                world.step([0, 0])
    print("printed after")  # stdout itself still works
    assert capfd.readouterr().out == "printed after\n"


@pytest.mark.parametrize("env", ["SimTestCorridor", "SimTestSkills"])
def test_test_envs_pass_gymnasium_env_checker(env):
    # they share the registry with the built-in envs, so they must be proper envs too
    from gymnasium.utils.env_checker import check_env

    check_env(make_env(env).unwrapped, skip_render_check=True)
