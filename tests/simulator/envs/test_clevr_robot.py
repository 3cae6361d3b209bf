"""CLEVR-Robot: success and reward on hand-placed balls, the 2-D pushing physics, the levels'
goals and instructions, and the env in worlds (in-process, sharded, over gRPC) with bad settings
named."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from support.world_rollouts import assert_same

from llmrl.simulator.client import RemoteWorld
from llmrl.simulator.envs import clevr_robot as cr
from llmrl.simulator.envs.text_spaces import TEXT_CHARSET
from llmrl.simulator.world import World, WorldError

RED, BLUE, GREEN, PURPLE, CYAN = range(5)
# Far-apart resting places for the balls a test does not place itself.
PARKED = {GREEN: (-0.5, 0.6), PURPLE: (0.5, 0.6), CYAN: (0.5, -0.3)}


def place(**balls: tuple[float, float]) -> np.ndarray:
    """A state with the named balls (red=..., blue=...) where given, the others parked."""
    positions = {i: PARKED.get(i, (-0.5, -0.3)) for i in range(5)}
    for name, xy in balls.items():
        positions[cr.COLORS.index(name)] = xy
    return np.array([positions[i] for i in range(5)], np.float32).reshape(-1)


def red_relative_to_blue(direction: int) -> np.ndarray:
    return cr.GOALS[[i for i, g in enumerate(cr.GOALS) if g[RED] == 1 and g[BLUE] == 2][direction]]


@pytest.mark.parametrize(
    ("direction", "offset"),
    [(0, (0.0, 0.3)), (1, (-0.3, 0.0)), (2, (0.0, -0.3)), (3, (0.3, 0.0))],
)
def test_success_in_each_direction_and_only_there(direction, offset):
    goal = red_relative_to_blue(direction)
    assert goal[-1] == direction
    state = place(blue=(0.0, 0.1), red=(offset[0], 0.1 + offset[1]))
    assert cr.success(state, goal)
    others = [red_relative_to_blue(d) for d in range(4) if d != direction]
    assert not any(cr.success(state, g) for g in others)
    # the reverse goal (blue relative to red) is the opposite direction
    assert not cr.success(state, cr.GOALS[list(cr.GOALS[:, -1]).index(direction)])


def test_success_edges_distance_and_angle():
    behind = red_relative_to_blue(0)
    assert cr.success(place(blue=(0, 0), red=(0, 0.385)), behind)
    assert not cr.success(place(blue=(0, 0), red=(0, 0.395)), behind)  # 0.39 apart or more
    r = 0.3
    inside, outside = np.deg2rad(90 + 44), np.deg2rad(90 + 46)  # ±45° around +y
    assert cr.success(place(blue=(0, 0), red=(r * np.cos(inside), r * np.sin(inside))), behind)
    assert not cr.success(
        place(blue=(0, 0), red=(r * np.cos(outside), r * np.sin(outside))), behind
    )


def test_reward_success_disturbance_and_shaping():
    goal = red_relative_to_blue(3)  # red to the right of blue
    start = place(blue=(0.0, 0.0), red=(-0.3, 0.0))
    closer = place(blue=(0.0, 0.0), red=(-0.15, 0.0))  # nearer the point right of blue
    assert cr.reward(start, place(blue=(0.0, 0.0), red=(0.25, 0.0)), goal) == 100.0
    assert cr.reward(start, closer, goal) > 0 > cr.reward(closer, start, goal)
    # green is not named by the goal: moving it more than 0.2 costs 10
    knocked = closer.copy()
    knocked[2 * GREEN] += 0.25
    assert cr.reward(start, knocked, goal) == -10.0
    nudged = closer.copy()
    nudged[2 * GREEN] += 0.1
    assert cr.reward(start, nudged, goal) == pytest.approx(cr.reward(start, closer, goal) - 0.1)
    # moving the reference ball is part of the task, never the penalty
    moved_ref = start.copy()
    moved_ref[2 * BLUE + 1] += 0.3
    assert cr.reward(start, moved_ref, goal) != -10.0


def test_group_goals_of_the_hard_level():
    row, column, ordered, gathered = (
        g for g in cr.goals("unseen-hard") if set(np.flatnonzero(g[:5] == 3)) == {0, 1, 2}
    )
    lined = place(red=(-0.4, 0.1), blue=(0.0, 0.14), green=(0.4, 0.06))
    assert cr.success(lined, row) and cr.success(lined, ordered)
    assert not cr.success(lined, column) and not cr.success(lined, gathered)
    crooked = place(red=(-0.4, 0.1), blue=(0.0, 0.3), green=(0.4, 0.05))
    assert not cr.success(crooked, row)
    swapped = place(red=(0.0, 0.14), blue=(-0.4, 0.1), green=(0.4, 0.06))
    assert cr.success(swapped, row) and not cr.success(swapped, ordered)
    stacked = place(red=(0.0, 0.0), blue=(0.02, 0.2), green=(-0.03, -0.15))
    assert cr.success(stacked, column) and cr.success(stacked, gathered)
    assert cr.LEVEL_SUCCESS["unseen-hard"](stacked, column)


@pytest.mark.parametrize("direction", range(8))
def test_a_push_moves_the_ball_about_0_2_in_its_direction(direction):
    state = place(red=(0.0, 0.1))
    moved = (cr.push(state, RED * 8 + direction) - state).reshape(5, 2)
    unit = cr.physics.DIRECTIONS[direction] / np.linalg.norm(cr.physics.DIRECTIONS[direction])
    assert np.linalg.norm(moved[RED]) == pytest.approx(0.2, rel=0.1)
    assert moved[RED] @ unit / np.linalg.norm(moved[RED]) > 0.999
    assert not moved[1:].any()


def test_collisions_walls_and_validity():
    state = place(red=(0.0, 0.1), blue=(0.2, 0.1))
    after = cr.push(state, RED * 8 + 0).reshape(5, 2)  # red pushed +x into blue
    assert after[BLUE, 0] > 0.25 and after[RED, 0] < 0.2
    edge = place(red=(0.58, 0.1))
    assert cr.push(edge, RED * 8 + 0).reshape(5, 2)[RED, 0] <= 0.6
    rng = np.random.default_rng(0)
    state = cr.random_state(rng)
    for action in rng.integers(0, 40, 300):
        state = cr.push(state, int(action))
        assert cr.valid_state(state)
    assert not cr.valid_state(place(red=(0.0, 0.0), blue=(0.05, 0.0)))  # overlapping
    assert not cr.valid_state(place(red=(0.0, 0.9)))  # off the table
    assert not cr.valid_state(np.full(10, np.nan))
    assert not cr.valid_state(np.zeros(9))
    with pytest.raises(ValueError, match=r"action: expected an integer 0\.\.39"):
        cr.push(state, 40)


def test_levels_goals_and_instructions():
    assert cr.GOALS.shape == (80, 6) and len({tuple(g) for g in cr.GOALS}) == 80
    assert {len(cr.goals(level)) for level in ("training", "rephrased", "unseen-easy")} == {80}
    assert len(cr.goals("unseen-hard")) == 40
    texts = {level: [t for _, t in cr.instructions(level)] for level in cr.LEVELS}
    assert not set(texts["training"]) & set(texts["rephrased"])
    for word in ("to the left of", "behind", "in front of", "to the right of"):
        assert not any(word in t for t in texts["rephrased"])
    for level, level_texts in texts.items():
        assert all(set(t) <= TEXT_CHARSET and len(t) <= 200 for t in level_texts), level
        assert len(set(level_texts)) == len(level_texts), level
    goal, text = cr.instructions("training")[0]
    assert text == "Push the purple ball behind the cyan ball" and goal[3] == 1 and goal[4] == 2
    with pytest.raises(ValueError, match="level: unknown level 'hard'"):
        cr.instructions("hard")


def test_env_episode_ends_on_success_with_reward_100():
    with World("ClevrRobot", num_envs=1, seed=0, goal=0) as world:
        obs = world.reset()
        goal = obs["goal"][0]
        assert np.array_equal(goal, cr.GOALS[0]) and obs["state"].shape == (1, 10)
        assert obs["instruction"][0] in cr.phrasings(goal, "training")
        assert not obs["success"][0]
        # greedy: the push that brings the state nearest the goal
        for _ in range(50):
            state = obs["state"][0]
            action = min(range(40), key=lambda a: cr.goal_distance(cr.push(state, a), goal))
            obs = world.step([action])
            if obs["step_type"][0] == 2:
                break
        assert obs["reward"][0] == 100.0 and obs["discount"][0] == 0.0


def test_reset_options_fix_the_episode():
    env = cr.ClevrRobotEnv(level="rephrased")
    state = place(red=(0.0, 0.0))
    obs, _ = env.reset(seed=1, options={"state": state, "goal": cr.GOALS[5], "instruction": "x"})
    assert np.array_equal(obs["state"], state) and obs["instruction"] == "x"
    with pytest.raises(WorldError, match=r"options\.state"):
        env.reset(options={"state": np.zeros(10)})
    with pytest.raises(WorldError, match=r"options\.goal"):
        env.reset(options={"goal": cr.goals("unseen-easy")[0]})


def test_goals_per_start_shows_one_start_under_several_goals():
    env = cr.ClevrRobotEnv(goals_per_start=3)
    episodes = [env.reset(seed=4 if i == 0 else None)[0] for i in range(12)]
    starts = [tuple(obs["state"]) for obs in episodes]
    # consecutive runs of one start: at most 3 long, never meeting the goal they start under
    runs = [len(list(group)) for _, group in itertools.groupby(starts)]
    assert max(runs) == 3 and sum(runs) == 12 and len(set(starts)) == len(runs)
    assert not any(obs["success"] for obs in episodes)
    # goals differ within a run (80 goals: a repeat in every run would be a fixed goal)
    goals = [tuple(obs["goal"]) for obs in episodes]
    assert len(set(goals)) > len(runs)
    # a reseeded env starts over: the same episodes again
    again = [env.reset(seed=4 if i == 0 else None)[0] for i in range(12)]
    assert [tuple(obs["state"]) for obs in again] == starts
    assert [tuple(obs["goal"]) for obs in again] == goals
    # the default keeps no start: twelve episodes, twelve starts
    plain = cr.ClevrRobotEnv()
    fresh = [tuple(plain.reset(seed=4 if i == 0 else None)[0]["state"]) for i in range(12)]
    assert len(set(fresh)) == 12


def test_worlds_agree_in_process_sharded_and_over_grpc(sim_server):
    settings = {"num_envs": 4, "seed": 2, "level": "unseen-easy", "max_episode_steps": 6}

    def run(world):
        rng = np.random.default_rng(0)
        results = [world.reset()]
        for _ in range(14):
            results.append(world.step(rng.integers(0, 40, world.num_envs)))
        return results

    local = World("ClevrRobot", **settings)
    with (
        World("ClevrRobot", num_workers=2, **settings) as sharded,
        RemoteWorld(sim_server.address, "ClevrRobot", **settings) as remote,
    ):
        expected = run(local)
        assert_same(run(sharded), expected)
        assert_same(run(remote), expected)
    local.close()
    assert {t for r in expected for t in r["instruction"]} <= {
        t for _, t in cr.instructions("unseen-easy")
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"level": "hard"}, r"^level: unknown level 'hard'; levels: training, rephrased"),
        ({"goal": 80}, r"^goal: expected a goal index 0..79"),
        ({"level": "unseen-hard", "goal": 40}, r"^goal: expected a goal index 0..39"),
        ({"colour": "red"}, r"^colour: unknown setting"),
        ({"goals_per_start": 0}, r"^goals_per_start: expected an integer in \[1, 1000\]"),
    ],
)
def test_bad_settings_name_the_setting(sim_server, settings, message):
    with pytest.raises(WorldError, match=message):
        World("ClevrRobot", num_envs=1, **settings)
    with pytest.raises(WorldError, match=message):
        RemoteWorld(sim_server.address, "ClevrRobot", num_envs=1, **settings)
